#include "comm/backends/c10d_process_group.hpp"

#include <vector>

namespace ddp::comm::backends {

C10dProcessGroup::C10dProcessGroup(const BackendContext& context, base::compat::BackendPtr backend,
                                   std::string name, bool backend_enforces_timeout)
    : ProcessGroup(context.topology, context.collective_timeout),
      backend_(std::move(backend)),
      name_(std::move(name)),
      backend_enforces_timeout_(backend_enforces_timeout) {}

detail::CollectiveInfo C10dProcessGroup::info(const char* name, const at::Tensor& tensor,
                                              std::optional<ReduceOp> op) const {
  detail::CollectiveInfo info = detail::collective_info(*this, name_, name, tensor, op);
  info.backend_enforces_timeout = backend_enforces_timeout_;
  return info;
}

c10d::ReduceOp C10dProcessGroup::to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kAverage:
      return c10d::ReduceOp::AVG;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
  }
  return c10d::ReduceOp::SUM;
}

Work C10dProcessGroup::do_all_reduce(const at::Tensor& tensor, ReduceOp op) {
  return detail::start_collective(info("all_reduce", tensor, op), [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = to_c10d(op);
    options.timeout = collective_timeout();
    return backend_->allreduce(tensors, options);
  });
}

Work C10dProcessGroup::do_broadcast(const at::Tensor& tensor, int root) {
  return broadcast_as(tensor, tensor, root);
}

Work C10dProcessGroup::broadcast_as(const at::Tensor& described, const at::Tensor& moved,
                                    int root) {
  return detail::start_collective(info("broadcast", described), [&] {
    std::vector<at::Tensor> tensors{moved};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = collective_timeout();
    return backend_->broadcast(tensors, options);
  });
}

Work C10dProcessGroup::do_all_gather(const at::Tensor& output, const at::Tensor& input) {
  return all_gather_as(input, output, input);
}

Work C10dProcessGroup::all_gather_as(const at::Tensor& described, const at::Tensor& output,
                                     const at::Tensor& input) {
  return detail::start_collective(info("all_gather", described), [&] {
    // c10d's portable all-gather takes one output tensor per rank; views into
    // the caller's flat output receive the data without a copy back.
    const int64_t chunk = input.numel();
    at::Tensor flat_output = output.view({-1});
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size(); ++r) outputs[0].push_back(flat_output.narrow(0, r * chunk, chunk));
    std::vector<at::Tensor> inputs{input.view({-1})};
    c10d::AllgatherOptions options;
    options.timeout = collective_timeout();
    return backend_->allgather(outputs, inputs, options);
  });
}

Work C10dProcessGroup::do_reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                         ReduceOp op) {
  return detail::start_collective(info("reduce_scatter", output, op), [&] {
    at::Tensor flat_output = output.view({-1});
    at::Tensor flat_input = input.view({-1});
    c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op);
    options.timeout = collective_timeout();
    return backend_->_reduce_scatter_base(flat_output, flat_input, options);
  });
}

Work C10dProcessGroup::do_barrier() {
  return detail::start_collective(info("barrier", at::Tensor()), [&] {
    c10d::BarrierOptions options;
    options.timeout = collective_timeout();
    return backend_->barrier(options);
  });
}

}  // namespace ddp::comm::backends
