#include "ddp/model_sync.hpp"

#include <ATen/ATen.h>

#include <map>
#include <sstream>

#include "ddp/errors.hpp"
#include "dtype_name.hpp"
#include "horovod/timeline_recorder.hpp"

namespace ddp::detail {
namespace {

// Note [Exchanging text through a collective]
// The collectives carry numbers, so each rank's descriptions travel as one
// int64 per byte: a few kilobytes for real models, sent once at start-up,
// and every rank can then name both sides of a difference.
std::vector<std::string> gatherText(ProcessGroup& group, const std::string& text) {
  timeline::detail::LabelScope name("ddp.verify_model", -1, /*fallback=*/true);
  const int world = group.size();
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  at::Tensor lengths = at::empty({world}, at::kLong);
  group.allGather(lengths, length);
  const int64_t longest = lengths.max().item<int64_t>();
  at::Tensor mine = at::zeros({std::max<int64_t>(longest, 1)}, at::kLong);
  for (size_t i = 0; i < text.size(); ++i) mine[i] = static_cast<unsigned char>(text[i]);
  at::Tensor all = at::empty({world * mine.numel()}, at::kLong);
  group.allGather(all, mine);
  auto values = all.accessor<int64_t, 1>();
  std::vector<std::string> texts(world);
  for (int r = 0; r < world; ++r) {
    const int64_t n = lengths[r].item<int64_t>();
    for (int64_t i = 0; i < n; ++i) texts[r] += static_cast<char>(values[r * mine.numel() + i]);
  }
  return texts;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) result.push_back(line);
  return result;
}

std::string join(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace

std::vector<std::string> describeTensors(const std::vector<std::string>& names,
                                         const std::vector<at::Tensor>& tensors) {
  std::vector<std::string> descriptions;
  for (size_t i = 0; i < tensors.size(); ++i) {
    descriptions.push_back(names[i] + " " + dtypeName(tensors[i].scalar_type()) + " " +
                           c10::str(tensors[i].sizes()));
  }
  return descriptions;
}

void verifySameAcrossRanks(ProcessGroup& group, const std::vector<std::string>& descriptions,
                           const std::string& what) {
  if (group.size() == 1) return;
  std::string text;
  for (const auto& d : descriptions) text += d + "\n";
  std::vector<std::vector<std::string>> all;
  for (const auto& t : gatherText(group, text)) all.push_back(lines(t));

  const auto& reference = all[0];
  size_t longest = 0;
  for (const auto& list : all) longest = std::max(longest, list.size());
  for (size_t i = 0; i < longest; ++i) {
    auto entry = [&](int r) {
      return i < all[r].size() ? "'" + all[r][i] + "'" : std::string("nothing (it has only ") +
                                                         std::to_string(all[r].size()) + ")";
    };
    std::vector<int> agree, differ;
    for (int r = 0; r < group.size(); ++r) (entry(r) == entry(0) ? agree : differ).push_back(r);
    if (differ.empty()) continue;
    throw InvalidArgumentError(
        "DistributedDataParallel: the " + what + " differ across ranks at #" +
        std::to_string(i) + ": rank 0 has " + entry(0) + ", rank " + std::to_string(differ[0]) +
        " has " + entry(differ[0]) + " (ranks that differ from rank 0: " + join(differ) +
        "; ranks that agree: " + join(agree) + "; rank 0 has " + std::to_string(reference.size()) +
        " in all). Every rank must build the same model before wrapping it.");
  }
}

// Note [One collective for all buffers]
// Every collective costs a fixed latency (over a millisecond with Gloo on
// some machines), and a batch-norm model has float32 statistics and an int64
// counter. So the bytes of all tensors on a device travel together, packed
// into one int32 buffer, whatever their dtypes.
void broadcastCoalesced(ProcessGroup& group, const std::vector<at::Tensor>& tensors, int root) {
  if (group.size() == 1 || tensors.empty()) return;
  timeline::detail::LabelScope name("ddp.broadcast_coalesced", -1, /*fallback=*/true);
  std::map<std::string, std::vector<at::Tensor>> by_device;
  for (const auto& t : tensors) by_device[t.device().str()].push_back(t);
  // Each tensor starts 8-byte aligned: reinterpreting bytes as a dtype
  // needs an offset divisible by its size.
  auto bytesOf = [](const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); };
  auto aligned = [](int64_t n) { return (n + 7) / 8 * 8; };
  for (auto& [device, members] : by_device) {
    int64_t total = 0;
    for (const auto& t : members) total += aligned(bytesOf(t));
    at::Tensor packed = at::empty({total / 4}, members.front().options().dtype(at::kInt));
    at::Tensor bytes = packed.view(at::kByte);
    int64_t offset = 0;
    for (const auto& t : members) {
      if (group.rank() == root) {
        bytes.narrow(0, offset, bytesOf(t)).copy_(t.reshape({-1}).view(at::kByte));
      }
      offset += aligned(bytesOf(t));
    }
    group.broadcast(packed, root);
    if (group.rank() == root) continue;
    offset = 0;
    for (const auto& t : members) {
      t.copy_(bytes.narrow(0, offset, bytesOf(t)).view(t.scalar_type()).view(t.sizes()));
      offset += aligned(bytesOf(t));
    }
  }
}

}  // namespace ddp::detail
