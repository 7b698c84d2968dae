#pragma once

// Internal: the flight recorder as a ProcessGroup decorator, which init()
// applies under the timeline's (Note [The timeline at the edge]): it hands
// every collective to the wrapped engine through ProcessGroup's forwarders
// and records it in the process's ring (flight_recorder/ring.hpp). When a
// wait on one of its collectives times out, it prints the ring to stderr.
// The engines know nothing of it.

#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "ddp/environment.hpp"
#include "ddp/process_group.hpp"
#include "ddp/work.hpp"

namespace ddp::flight_recorder::detail {

/// Maps the process's ring to the file DDP_FLIGHT_RECORDER_FILE names in
/// `env`, if any, and labels it with `rank` (init() calls it).
/// \throws IoError when the file cannot be created.
void record_to_file_from_environment(const EnvironmentMap& env, int rank, int world_size);

/// Records the collectives of the group it wraps.
class FlightRecorderProcessGroup final : public ProcessGroup {
 public:
  explicit FlightRecorderProcessGroup(std::shared_ptr<ProcessGroup> inner);

  std::string backend_name() const override { return inner_->backend_name(); }
  /// The wrapped engine.
  const std::shared_ptr<ProcessGroup>& inner() const noexcept { return inner_; }

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override;
  Work do_broadcast(const at::Tensor& tensor, int root) override;
  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override;
  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  Work do_barrier() override;

 private:
  template <typename Issue>
  Work record(std::string operation, const at::Tensor* tensor, Issue&& issue);

  std::shared_ptr<ProcessGroup> inner_;
  int32_t group_index_;
  std::atomic<int64_t> issued_{0};
};

}  // namespace ddp::flight_recorder::detail
