#include "ddp/comm/broadcast_tensors.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <string>

#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::comm {

// Note [One collective for all buffers]
// Every collective costs a fixed latency (over a millisecond with Gloo on
// some machines), and a batch-norm model has float32 statistics and an int64
// counter. So the bytes of all tensors on a device travel together, packed
// into one int32 buffer, whatever their dtypes.
void broadcast_tensors(ProcessGroup& group, const std::vector<at::Tensor>& tensors, int root) {
  if (root < 0 || root >= group.size()) {
    throw InvalidArgumentError(base::detail::str("broadcast_tensors: root rank ", root,
                                                 " is outside the group (ranks 0 to ",
                                                 group.size() - 1, "); pass an existing rank."));
  }
  if (group.size() == 1 || tensors.empty()) return;
  at::NoGradGuard no_grad;
  detail::CollectiveName name("ddp.broadcast_coalesced", -1, /*fallback=*/true);
  std::map<std::string, std::vector<at::Tensor>> by_device;
  for (const auto& t : tensors) by_device[t.device().str()].push_back(t);
  // Each tensor starts 8-byte aligned: reinterpreting bytes as a dtype
  // needs an offset divisible by its size.
  auto bytes_of = [](const at::Tensor& t) {
    return t.numel() * static_cast<int64_t>(t.element_size());
  };
  auto aligned = [](int64_t n) { return (n + 7) / 8 * 8; };
  for (auto& [device, members] : by_device) {
    int64_t total = 0;
    for (const auto& t : members) total += aligned(bytes_of(t));
    at::Tensor packed = at::empty({total / 4}, members.front().options().dtype(at::kInt));
    at::Tensor bytes = packed.view(at::kByte);
    int64_t offset = 0;
    for (const auto& t : members) {
      if (group.rank() == root) {
        bytes.narrow(0, offset, bytes_of(t)).copy_(t.reshape({-1}).view(at::kByte));
      }
      offset += aligned(bytes_of(t));
    }
    group.broadcast(packed, root);
    if (group.rank() == root) continue;
    offset = 0;
    for (const auto& t : members) {
      t.copy_(bytes.narrow(0, offset, bytes_of(t)).view(t.scalar_type()).view(t.sizes()));
      offset += aligned(bytes_of(t));
    }
  }
}

}  // namespace ddp::comm
