// Hierarchical: ranks on several nodes. Shared memory within each node, Gloo
// between one leader per node (its lowest rank), shared memory again to
// hand the result to the node.
//
// Note [Hierarchical collectives]
//  - all-reduce: the node reduces in shared memory, the leaders all-reduce
//    the node results over Gloo, each leader broadcasts to its node; an
//    average is a sum divided by the world size at the very end, so that it
//    rounds as Gloo's does;
//  - broadcast: within the root's node first, then between the leaders,
//    then within the other nodes;
//  - all-gather: each node gathers into a block padded to the largest node,
//    the leaders gather the blocks, each leader reorders them by job rank
//    and broadcasts the result to its node;
//  - reduce-scatter: where every node holds as many consecutive ranks (the
//    launchers' block layout), the node reduces in shared memory, the
//    leaders reduce-scatter the node results over Gloo so that each gets
//    its node's block of chunks, and each leader broadcasts its block to its
//    node: (N - 1) / N of the buffer leaves a node, half an all-reduce's.
//    Otherwise a hierarchical all-reduce of a copy, keeping this rank's
//    chunk;
//  - barrier: node, leaders, node.
// Inter-node traffic is one message per node instead of one per rank, which
// is what makes this worth it when nodes hold several ranks.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

#include "base/str.hpp"
#include "comm/backends/average.hpp"
#include "comm/backends/shm_process_group.hpp"
#include "comm/shm/tensor_bridge.hpp"
#include "comm/timeout_message.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::backends {
namespace {

class HierarchicalProcessGroup final : public SerialProcessGroup {
 public:
  HierarchicalProcessGroup(const BackendContext& context, std::vector<std::vector<int>> nodes,
                           int node_index, std::unique_ptr<shm::Communicator> node,
                           std::shared_ptr<ProcessGroup> leaders)
      : SerialProcessGroup(context, "hierarchical"),
        nodes_(std::move(nodes)),
        node_index_(node_index),
        node_(std::move(node)),
        leaders_(std::move(leaders)) {
    for (size_t k = 0; k < nodes_.size(); ++k) {
      for (int r : nodes_[k]) node_of_rank_.resize(std::max<size_t>(node_of_rank_.size(), r + 1));
      for (int r : nodes_[k]) node_of_rank_[r] = static_cast<int>(k);
    }
  }

  ~HierarchicalProcessGroup() override { stop_worker(); }

  std::string backend_name() const override { return "hierarchical(shm,gloo)"; }

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    auto what = info("all_reduce", tensor, op);
    return submit(what, [this, tensor, op, describe = describing(what)] {
      shm::HostStaging staged(tensor);
      all_reduce_host(staged.host(), op, describe);
      staged.copy_back();
    });
  }

  Work do_broadcast(const at::Tensor& tensor, int root) override {
    auto what = info("broadcast", tensor);
    return submit(what, [this, tensor, root, describe = describing(what)] {
      shm::HostStaging staged(tensor);
      const int root_node = node_of_rank_[root];
      const auto& root_ranks = nodes_[root_node];
      const int root_local = static_cast<int>(
          std::find(root_ranks.begin(), root_ranks.end(), root) - root_ranks.begin());
      if (node_index_ == root_node) {
        node_->broadcast(staged.data(), tensor.nbytes(), root_local, describe);
      }
      if (leaders_) between_nodes(describe, [&] { leaders_->broadcast(staged.host(), root_node); });
      if (node_index_ != root_node) node_->broadcast(staged.data(), tensor.nbytes(), 0, describe);
      staged.copy_back();
    });
  }

  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override {
    auto what = info("all_gather", input);
    return submit(what, [this, output, input, describe = describing(what)] {
      shm::HostStaging out(output);
      shm::HostStaging in(input);
      size_t widest = 0;
      for (const auto& ranks : nodes_) widest = std::max(widest, ranks.size());
      const int64_t m = input.numel();
      at::Tensor block = at::empty({static_cast<int64_t>(widest) * m}, in.host().options());
      node_->all_gather(block.data_ptr(), in.data(), input.nbytes(), describe);
      if (leaders_) {
        at::Tensor blocks =
            at::empty({static_cast<int64_t>(nodes_.size()) * block.numel()}, block.options());
        between_nodes(describe, [&] { leaders_->all_gather(blocks, block); });
        at::Tensor flat = out.host().view({-1});
        for (size_t k = 0; k < nodes_.size(); ++k) {
          for (size_t i = 0; i < nodes_[k].size(); ++i) {
            const int64_t from = (static_cast<int64_t>(k * widest + i)) * m;
            flat.narrow(0, nodes_[k][i] * m, m).copy_(blocks.narrow(0, from, m));
          }
        }
      }
      node_->broadcast(out.data(), output.nbytes(), 0, describe);
      out.copy_back();
    });
  }

  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    auto what = info("reduce_scatter", output, op);
    return submit(what, [this, output, input, op, describe = describing(what)] {
      at::Tensor everything = input.to(c10::kCPU, /*non_blocking=*/false, /*copy=*/true);
      if (!nodes_are_blocks()) {
        all_reduce_host(everything, op, describe);
        output.view({-1}).copy_(everything.view({size(), -1})[rank()]);
        return;
      }
      const ReduceOp sum = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
      node_->all_reduce(everything.data_ptr(), everything.numel(),
                        shm::element_type_of(everything.scalar_type()), shm::combine_of(sum),
                        /*average=*/false, describe);
      const auto node_count = static_cast<int64_t>(nodes_.size());
      at::Tensor block = at::empty({everything.numel() / node_count}, everything.options());
      if (leaders_) {
        between_nodes(describe, [&] { leaders_->reduce_scatter(block, everything, sum); });
      }
      node_->broadcast(block.data_ptr(), block.nbytes(), 0, describe);
      const int local = rank() - nodes_[node_index_].front();
      at::Tensor mine = block.view({static_cast<int64_t>(nodes_[node_index_].size()), -1})[local];
      if (op == ReduceOp::kAverage) divide_by_world_size(mine, size());
      output.view({-1}).copy_(mine);
    });
  }

  Work do_barrier() override {
    auto what = info("barrier", at::Tensor());
    return submit(what, [this, describe = describing(what)] {
      node_->barrier(describe);
      if (leaders_) between_nodes(describe, [&] { leaders_->barrier(); });
      node_->barrier(describe);
    });
  }

 private:
  // Whether node k holds ranks [k * S, (k + 1) * S) for one S.
  bool nodes_are_blocks() const {
    const size_t per_node = nodes_.front().size();
    for (size_t k = 0; k < nodes_.size(); ++k) {
      if (nodes_[k].size() != per_node || nodes_[k].front() != static_cast<int>(k * per_node) ||
          nodes_[k].back() != static_cast<int>((k + 1) * per_node - 1)) {
        return false;
      }
    }
    return true;
  }

  // Runs the leaders' Gloo step of a collective. Its errors name the outer
  // collective (this rank of the whole job, Note [One timeout message]), not
  // the leaders' group, whose ranks are node indices.
  template <typename Step>
  void between_nodes(const shm::Describe& describe, Step&& step) {
    try {
      step();
    } catch (const TimeoutError&) {
      throw TimeoutError(
          detail::timeout_message(describe(), collective_timeout(), "",
                                  "its Gloo step between the node leaders timed out"));
    } catch (const CollectiveError& error) {
      throw CollectiveError(describe() + " failed between nodes: " + error.what());
    }
  }

  void all_reduce_host(const at::Tensor& host, ReduceOp op, const shm::Describe& describe) {
    node_->all_reduce(host.data_ptr(), host.numel(), shm::element_type_of(host.scalar_type()),
                      shm::combine_of(op), /*average=*/false, describe);
    if (leaders_) {
      between_nodes(describe, [&] {
        leaders_->all_reduce(host, op == ReduceOp::kAverage ? ReduceOp::kSum : op);
      });
    }
    node_->broadcast(host.data_ptr(), host.nbytes(), 0, describe);
    if (op == ReduceOp::kAverage) divide_by_world_size(host, size());
  }

  std::vector<std::vector<int>> nodes_;
  int node_index_;
  std::vector<int> node_of_rank_;
  std::unique_ptr<shm::Communicator> node_;
  std::shared_ptr<ProcessGroup> leaders_;  // Null on ranks that do not lead a node.
};

}  // namespace

std::shared_ptr<ProcessGroup> make_hierarchical_process_group(
    const BackendContext& context, const std::vector<std::vector<int>>& nodes) {
  const int rank = context.topology.rank;
  int node_index = 0;
  while (std::find(nodes[node_index].begin(), nodes[node_index].end(), rank) ==
         nodes[node_index].end()) {
    ++node_index;
  }
  auto node_store = c10::make_intrusive<c10d::PrefixStore>(
      base::detail::str("hier/node", node_index), context.store);
  auto node = make_node_communicator(context, nodes[node_index], node_store);
  std::shared_ptr<ProcessGroup> leaders;
  if (nodes[node_index].front() == rank) {
    BackendContext leader_context = context;
    leader_context.topology.rank = node_index;
    leader_context.topology.world_size = static_cast<int>(nodes.size());
    leader_context.store = c10::make_intrusive<c10d::PrefixStore>("hier/leaders", context.store);
    leaders = make_gloo_process_group(leader_context);
  }
  return std::make_shared<HierarchicalProcessGroup>(context, nodes, node_index, std::move(node),
                                                    std::move(leaders));
}

}  // namespace ddp::comm::backends
