#include "snapshot/rng_states.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <cstring>
#include <mutex>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot {
namespace detail {

// The default generators: CPU first, then each CUDA device.
std::vector<std::pair<std::string, at::Generator>> generators() {
  std::vector<std::pair<std::string, at::Generator>> all{
      {"cpu", at::detail::getDefaultCPUGenerator()}};
  size_t devices = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  for (size_t i = 0; i < devices; ++i) {
    all.emplace_back(base::detail::str("cuda", i),
                     at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i)));
  }
  return all;
}

at::Tensor generator_state(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

// Every rank's generator states, on rank 0 (named rng/rank<r>/<device>).
std::map<std::string, at::Tensor> gather_rng_states(ProcessGroup& group) {
  auto local = generators();
  std::map<std::string, at::Tensor> result;
  if (group.size() == 1) {
    for (auto& [device, generator] : local)
      result["rng/rank0/" + device] = generator_state(generator);
    return result;
  }
  // Ranks may differ in device count: each sends its states as bytes, each
  // state after its length (Note [Bytes through a collective]).
  std::string mine;
  for (auto& [device, generator] : local) {
    const at::Tensor state = generator_state(generator).contiguous();
    const int64_t length = state.numel();
    mine.append(reinterpret_cast<const char*>(&length), sizeof(length));
    mine.append(static_cast<const char*>(state.data_ptr()), static_cast<size_t>(length));
  }
  const std::vector<std::string> everyone = comm::detail::all_gather_bytes(group, mine);
  if (group.rank() != 0) return result;
  for (int r = 0; r < group.size(); ++r) {
    const std::string& bytes = everyone[r];
    size_t offset = 0;
    for (int i = 0; offset + sizeof(int64_t) <= bytes.size(); ++i) {
      int64_t length = 0;
      std::memcpy(&length, bytes.data() + offset, sizeof(length));
      offset += sizeof(length);
      at::Tensor state = at::empty({length}, at::kByte);
      std::memcpy(state.data_ptr(), bytes.data() + offset, static_cast<size_t>(length));
      offset += static_cast<size_t>(length);
      const std::string device = i == 0 ? "cpu" : base::detail::str("cuda", i - 1);
      result[base::detail::str("rng/rank", r, "/", device)] = state;
    }
  }
  return result;
}

}  // namespace detail

uint64_t derived_rng_seed(const at::Tensor& rank0_cpu_state, int rank) {
  // FNV-1a over the state's bytes, then the rank.
  const at::Tensor bytes = rank0_cpu_state.contiguous();
  const auto* data = static_cast<const uint8_t*>(bytes.data_ptr());
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](uint8_t byte) { hash = (hash ^ byte) * 1099511628211ull; };
  for (int64_t i = 0; i < bytes.numel() * static_cast<int64_t>(bytes.element_size()); ++i) {
    mix(data[i]);
  }
  for (int shift = 0; shift < 32; shift += 8) mix(static_cast<uint8_t>(rank >> shift));
  return hash;
}

}  // namespace ddp::snapshot
