#include "snapshot/staging_buffer.hpp"

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "ddp/snapshot/errors.hpp"
#include "snapshot/snapshot_format.hpp"

namespace ddp::snapshot::detail {

NamedTensors StagingBuffer::stage(const NamedTensors& records) {
  for (const auto& [name, tensor] : records) {  // fail before copying anything
    if (std::string problem = tensor_record_problem(name, tensor); !problem.empty()) {
      throw SnapshotError("cannot save the training state: " + problem +
                          "; keep only dense tensors of the dtypes snapshots hold in it");
    }
  }
  std::map<std::string, Buffer> kept;
  std::vector<c10::Device> devices;  // whose streams the copies went on
  NamedTensors staged;
  staged.reserve(records.size());
  for (const auto& [name, tensor] : records) {
    const bool pinned = tensor.is_cuda();
    auto found = buffers_.find(name);
    Buffer buffer;
    if (found != buffers_.end() && found->second.pinned == pinned &&
        found->second.tensor.scalar_type() == tensor.scalar_type() &&
        found->second.tensor.sizes().equals(tensor.sizes())) {
      buffer = std::move(found->second);
    } else {
      buffer.pinned = pinned;
      buffer.tensor = at::empty(
          tensor.sizes(), at::TensorOptions().dtype(tensor.scalar_type()).pinned_memory(pinned));
      ++allocations_;
    }
    buffer.tensor.copy_(tensor.detach(), /*non_blocking=*/pinned);
    if (pinned && std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) {
      devices.push_back(tensor.device());
    }
    staged.emplace_back(name, buffer.tensor);
    kept.insert_or_assign(name, std::move(buffer));
  }
  for (const c10::Device& device : devices) {  // the non-blocking copies are done
    c10::impl::getDeviceGuardImpl(device.type())->getStream(device).synchronize();
  }
  buffers_ = std::move(kept);
  return staged;
}

int64_t StagingBuffer::bytes() const {
  int64_t total = 0;
  for (const auto& [name, buffer] : buffers_) total += static_cast<int64_t>(buffer.tensor.nbytes());
  return total;
}

}  // namespace ddp::snapshot::detail
