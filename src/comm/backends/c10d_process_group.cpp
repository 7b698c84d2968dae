#include "comm/backends/c10d_process_group.hpp"

#include <vector>

namespace ddp::comm::backends {

C10dProcessGroup::C10dProcessGroup(const BackendContext& context, compat::EnginePtr engine,
                                   std::string name, bool engine_enforces_timeout)
    : ProcessGroup(context.topology, context.collective_timeout),
      engine_(std::move(engine)),
      name_(std::move(name)),
      engine_enforces_timeout_(engine_enforces_timeout) {}

detail::CollectiveInfo C10dProcessGroup::info(const char* name, const at::Tensor& tensor,
                                              std::optional<ReduceOp> op) const {
  detail::CollectiveInfo info = detail::collectiveInfo(*this, name_, name, tensor, op);
  info.engine_enforces_timeout = engine_enforces_timeout_;
  return info;
}

c10d::ReduceOp C10dProcessGroup::toC10d(ReduceOp op) {
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
  return detail::startCollective(info("all_reduce", tensor, op), [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = toC10d(op);
    options.timeout = collective_timeout();
    return engine_->allreduce(tensors, options);
  });
}

Work C10dProcessGroup::do_broadcast(const at::Tensor& tensor, int root) {
  return broadcastAs(tensor, tensor, root);
}

Work C10dProcessGroup::broadcastAs(const at::Tensor& described, const at::Tensor& moved, int root) {
  return detail::startCollective(info("broadcast", described), [&] {
    std::vector<at::Tensor> tensors{moved};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = collective_timeout();
    return engine_->broadcast(tensors, options);
  });
}

Work C10dProcessGroup::do_all_gather(const at::Tensor& output, const at::Tensor& input) {
  return allGatherAs(input, output, input);
}

Work C10dProcessGroup::allGatherAs(const at::Tensor& described, const at::Tensor& output,
                                   const at::Tensor& input) {
  return detail::startCollective(info("all_gather", described), [&] {
    // c10d's portable all-gather takes one output tensor per rank; views into
    // the caller's flat output receive the data without a copy back.
    const int64_t chunk = input.numel();
    at::Tensor flat_output = output.view({-1});
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size(); ++r) outputs[0].push_back(flat_output.narrow(0, r * chunk, chunk));
    std::vector<at::Tensor> inputs{input.view({-1})};
    c10d::AllgatherOptions options;
    options.timeout = collective_timeout();
    return engine_->allgather(outputs, inputs, options);
  });
}

Work C10dProcessGroup::do_reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                         ReduceOp op) {
  return detail::startCollective(info("reduce_scatter", output, op), [&] {
    at::Tensor flat_output = output.view({-1});
    at::Tensor flat_input = input.view({-1});
    c10d::ReduceScatterOptions options;
    options.reduceOp = toC10d(op);
    options.timeout = collective_timeout();
    return engine_->_reduce_scatter_base(flat_output, flat_input, options);
  });
}

Work C10dProcessGroup::do_barrier() {
  return detail::startCollective(info("barrier", at::Tensor()), [&] {
    c10d::BarrierOptions options;
    options.timeout = collective_timeout();
    return engine_->barrier(options);
  });
}

}  // namespace ddp::comm::backends
