#pragma once

// A process group that counts the collectives issued through it and hands
// each to another group's public method, as the `auto` backend does: the
// timeline must then show each collective once, and its count is known
// independently of the timeline.

#include <atomic>
#include <memory>
#include <string>

#include "ddp/comm/process_group.hpp"

namespace ddp::testing {

class CountingGroup final : public ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->topology(), inner->collective_timeout()), inner_(std::move(inner)) {}

  std::string backend_name() const override { return "counting(" + inner_->backend_name() + ")"; }
  /// Collectives issued so far.
  int64_t issued() const { return issued_.load(); }

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    ++issued_;
    return inner_->all_reduce_async(tensor, op);
  }
  Work do_broadcast(const at::Tensor& tensor, int root) override {
    ++issued_;
    return inner_->broadcast_async(tensor, root);
  }
  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override {
    ++issued_;
    return inner_->all_gather_async(output, input);
  }
  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    ++issued_;
    return inner_->reduce_scatter_async(output, input, op);
  }
  Work do_barrier() override {
    ++issued_;
    return inner_->barrier_async();
  }

 private:
  std::shared_ptr<ProcessGroup> inner_;
  std::atomic<int64_t> issued_{0};
};

}  // namespace ddp::testing
