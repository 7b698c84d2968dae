// What each rank holds of FullyShardedDataParallel's units: a shard of
// ceil(numel / N) elements per unit, and pieces of the parameters that
// cover each parameter's elements once across the ranks (FsdpTraining's
// kShardSizes, fsdp_checks.cpp).

#include <torch/torch.h>

#include <string>
#include <vector>

#include "ddp/comm/process_group.hpp"
#include "multiprocess/fsdp_checks.hpp"

namespace ddp::testing {

std::string wrong_shard_holdings(FullyShardedDataParallelImpl& model, ProcessGroup& group,
                                 c10::Device device) {
  using torch::Tensor;
  const int64_t world = group.size();
  std::string sizes;
  const auto units = model.unit_names();
  std::vector<int64_t> shard_numels;  // each unit's, padded
  for (int64_t numel : model.unit_numels()) shard_numels.push_back((numel + world - 1) / world);
  size_t index = 0;
  for (const auto& unit : units) {
    int64_t numel = 0;
    for (const auto& item : model.module()->named_parameters()) {
      const std::string prefix = unit == "module" ? "" : unit + ".";
      if (item.key().rfind(prefix, 0) == 0) numel += item.value().numel();
    }
    const int64_t expected = (numel + world - 1) / world;
    if (shard_numels.at(index) != expected && sizes.empty()) {
      sizes = "unit '" + unit + "' has a shard of " + std::to_string(shard_numels[index]) +
              " elements, expected " + std::to_string(expected);
    }
    ++index;
  }
  int64_t shard_bytes = 0;
  for (int64_t shard : shard_numels) shard_bytes += shard * 4;
  if (model.memory().shard_bytes != shard_bytes && sizes.empty()) {
    sizes = "the shards hold " + std::to_string(model.memory().shard_bytes) + " bytes, expected " +
            std::to_string(shard_bytes);
  }
  // Each parameter's pieces on the ranks hold its elements once.
  const auto pieces = model.named_parameters();
  Tensor held = torch::zeros({static_cast<int64_t>(pieces.size())}, torch::kLong);
  for (size_t p = 0; p < pieces.size(); ++p) held[p] = pieces[p].value().numel();
  held = held.to(device);
  group.all_reduce(held);
  held = held.cpu();
  const auto module_parameters = model.module()->named_parameters();
  for (size_t p = 0; p < pieces.size() && sizes.empty(); ++p) {
    const std::string& name = pieces[p].key();
    const int64_t numel =
        module_parameters.contains(name) ? module_parameters[name].numel() : int64_t{-1};
    if (held[p].item<int64_t>() != numel) {
      sizes = "the ranks' pieces of '" + name + "' hold " +
              std::to_string(held[p].item<int64_t>()) + " elements, the parameter " +
              std::to_string(numel);
    }
  }
  return sizes;
}

}  // namespace ddp::testing
