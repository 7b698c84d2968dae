#pragma once

// A process group that counts the collectives issued through it and hands
// each to another group's public method, as the `auto` engine does: the
// timeline must then show each collective once, and its count is known
// independently of the timeline.

#include <atomic>
#include <memory>
#include <string>

#include "ddp/process_group.hpp"

namespace ddp::testing {

class CountingGroup final : public ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->topology(), inner->collectiveTimeout()), inner_(std::move(inner)) {}

  std::string backendName() const override { return "counting(" + inner_->backendName() + ")"; }
  /// Collectives issued so far.
  int64_t issued() const { return issued_.load(); }

 protected:
  Work doAllReduce(const at::Tensor& tensor, ReduceOp op) override {
    ++issued_;
    return inner_->allReduceAsync(tensor, op);
  }
  Work doBroadcast(const at::Tensor& tensor, int root) override {
    ++issued_;
    return inner_->broadcastAsync(tensor, root);
  }
  Work doAllGather(const at::Tensor& output, const at::Tensor& input) override {
    ++issued_;
    return inner_->allGatherAsync(output, input);
  }
  Work doReduceScatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    ++issued_;
    return inner_->reduceScatterAsync(output, input, op);
  }
  Work doBarrier() override {
    ++issued_;
    return inner_->barrierAsync();
  }

 private:
  std::shared_ptr<ProcessGroup> inner_;
  std::atomic<int64_t> issued_{0};
};

}  // namespace ddp::testing
