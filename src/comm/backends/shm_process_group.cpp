// `shm`: every rank on one node; collectives through POSIX shared memory
// (src/comm/shm/communicator.cpp), run on the group's worker thread.

#include "comm/backends/shm_process_group.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

#include "base/str.hpp"
#include "comm/shm/tensor_bridge.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::backends {

Work SerialProcessGroup::submit(const detail::CollectiveInfo& info, std::function<void()> task) {
  return detail::start_collective(info, [&] { return executor_.submit(std::move(task)); });
}

detail::CollectiveInfo SerialProcessGroup::info(const char* name, const at::Tensor& tensor,
                                                std::optional<ReduceOp> op) const {
  detail::CollectiveInfo info = detail::collective_info(*this, backend_, name, tensor, op);
  info.backend_enforces_timeout = true;
  return info;
}

std::unique_ptr<shm::Communicator> make_node_communicator(const BackendContext& context,
                                                          const std::vector<int>& node_ranks,
                                                          const base::compat::StorePtr& store) {
  shm::CommunicatorOptions options;
  options.rank = static_cast<int>(
      std::find(node_ranks.begin(), node_ranks.end(), context.topology.rank) - node_ranks.begin());
  options.global_ranks = node_ranks;
  options.timeout = context.collective_timeout;
  return std::make_unique<shm::Communicator>(*store, options);
}

namespace {

class ShmProcessGroup final : public SerialProcessGroup {
 public:
  ShmProcessGroup(const BackendContext& context, std::unique_ptr<shm::Communicator> node)
      : SerialProcessGroup(context, "shm"), node_(std::move(node)) {}

  ~ShmProcessGroup() override { stop_worker(); }

  std::string backend_name() const override { return "shm"; }

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    auto what = info("all_reduce", tensor, op);
    return submit(what, [node = node_.get(), tensor, op, describe = describing(what)] {
      shm::HostStaging staged(tensor);
      node->all_reduce(staged.data(), tensor.numel(), shm::element_type_of(tensor.scalar_type()),
                       shm::combine_of(op), op == ReduceOp::kAverage, describe);
      staged.copy_back();
    });
  }

  Work do_broadcast(const at::Tensor& tensor, int root) override {
    auto what = info("broadcast", tensor);
    return submit(what, [node = node_.get(), tensor, root, describe = describing(what)] {
      shm::HostStaging staged(tensor);
      node->broadcast(staged.data(), tensor.nbytes(), root, describe);
      staged.copy_back();
    });
  }

  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override {
    auto what = info("all_gather", input);
    return submit(what, [node = node_.get(), output, input, describe = describing(what)] {
      shm::HostStaging out(output);
      shm::HostStaging in(input);
      node->all_gather(out.data(), in.data(), input.nbytes(), describe);
      out.copy_back();
    });
  }

  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    auto what = info("reduce_scatter", output, op);
    return submit(what, [node = node_.get(), output, input, op, describe = describing(what)] {
      shm::HostStaging out(output);
      shm::HostStaging in(input);
      node->reduce_scatter(out.data(), in.data(), output.numel(),
                           shm::element_type_of(output.scalar_type()), shm::combine_of(op),
                           op == ReduceOp::kAverage, describe);
      out.copy_back();
    });
  }

  Work do_barrier() override {
    auto what = info("barrier", at::Tensor());
    return submit(what,
                  [node = node_.get(), describe = describing(what)] { node->barrier(describe); });
  }

 private:
  std::unique_ptr<shm::Communicator> node_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_shm_process_group(const BackendContext& context,
                                                     const std::vector<std::vector<int>>& nodes) {
  if (nodes.size() != 1) {
    throw ConfigError(
        base::detail::str("backend 'shm' needs every rank on one node, but the ",
                          context.topology.world_size, " ranks are on ", nodes.size(),
                          " nodes. Use backend 'auto', which runs shared memory within "
                          "each node and Gloo between them."));
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>("shm", context.store);
  return std::make_shared<ShmProcessGroup>(context,
                                           make_node_communicator(context, nodes[0], store));
}

}  // namespace ddp::comm::backends
