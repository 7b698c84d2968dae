#pragma once

/// \file process_group.hpp
/// The process group: the ranks of a job and the collectives between them.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ddp/comm/environment.hpp"
#include "ddp/comm/reduce_op.hpp"
#include "ddp/comm/work.hpp"

namespace c10d {
class Store;
}  // namespace c10d

namespace ddp::comm {

class CollectiveObserver;

/// The ranks of a job and the collectives between them, over one backend
/// (Gloo, NCCL, or `auto`, which picks per tensor device).
///
/// Every collective exists in two forms: `all_reduce(...)` blocks until done;
/// `all_reduce_async(...)` returns a ddp::Work to wait on later. All ranks
/// must issue the same collectives in the same order. Tensors must be dense
/// and contiguous, of dtype float32, float64, bfloat16, float16, int32 or
/// int64.
///
/// Note [Arguments are checked before any backend sees them]
/// A wrong size on one rank would otherwise surface as a hang or a garbled
/// result on another. The public methods validate, then call the backend's
/// do...() implementation, which may assume valid arguments.
///
/// Note [Observing collectives]
/// What watches collectives from outside the backends (the flight recorder,
/// the timeline, a program's statistics) is a CollectiveObserver added to
/// the group (ddp/comm/collective_observer.hpp). The public methods tell the
/// observers around the backend's do...() call: started just before it, in
/// the order the observers were added; finished when the Work is waited on
/// (Note [When a collective ends]), in the reverse order, as nested scopes
/// end. A group without observers pays one empty-vector check per
/// collective: no allocation, no clock, no virtual call. Only the public
/// methods notify, so a collective that a group hands on to another inside
/// (`auto` to Gloo, the hierarchical backend to its leaders) is observed
/// once, by the group the caller holds.
class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// This process's rank, 0 <= rank() < size().
  int rank() const noexcept { return topology_.rank; }
  /// The number of processes in the group.
  int size() const noexcept { return topology_.world_size; }
  /// Rank, local rank, node and rendezvous address of this process.
  const Topology& topology() const noexcept { return topology_; }
  /// How long a collective may take before it fails with TimeoutError.
  std::chrono::milliseconds collective_timeout() const noexcept { return collective_timeout_; }
  /// The backend's name: "gloo", "nccl" or "auto(gloo,nccl)".
  virtual std::string backend_name() const = 0;

  /// The rendezvous store the group was formed through (a ddp::TcpStore
  /// hosted by rank 0; under torchrun 2.x a c10d::PrefixStore over a client
  /// of its agent's c10d::TCPStore; InitOptions::store's), or null for a
  /// group not made by ddp::init(). A channel beside the collectives for
  /// small messages, which still works when a collective does not:
  /// DistributedDataParallel names a mismatch between ranks through a
  /// ddp::TcpStore. Take a connection of your own (TcpStore::clone()) before
  /// using it from another thread.
  const std::shared_ptr<c10d::Store>& rendezvous_store() const noexcept { return store_; }
  /// Sets what rendezvous_store() returns (ddp::init() does).
  void set_rendezvous_store(std::shared_ptr<c10d::Store> store) { store_ = std::move(store); }

  /// Has `observer` hear of every collective issued through this group's
  /// public methods from now on (Note [Observing collectives]). Not
  /// synchronized with collectives: add observers before other threads
  /// issue collectives on the group. ddp::init() adds the flight recorder's
  /// and the registered ones (ddp/comm/observer_factory.hpp).
  /// \throws InvalidArgumentError when `observer` is null.
  void add_observer(std::shared_ptr<CollectiveObserver> observer);
  /// The observers, in the order they were added.
  const std::vector<std::shared_ptr<CollectiveObserver>>& observers() const noexcept {
    return observers_;
  }

  /// Reduces `tensor` across ranks in place; every rank gets the result.
  Work all_reduce_async(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  /// Blocking form of all_reduce_async().
  void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum);

  /// Copies `tensor` from rank `root` into `tensor` on every rank.
  Work broadcast_async(const at::Tensor& tensor, int root = 0);
  /// Blocking form of broadcast_async().
  void broadcast(const at::Tensor& tensor, int root = 0);

  /// Concatenates every rank's `input` into `output` (size() * input.numel()
  /// elements, rank r's input at offset r * input.numel()).
  Work all_gather_async(const at::Tensor& output, const at::Tensor& input);
  /// Blocking form of all_gather_async().
  void all_gather(const at::Tensor& output, const at::Tensor& input);

  /// Reduces `input` (size() * output.numel() elements) across ranks and
  /// leaves chunk r of the result in `output` on rank r.
  Work reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                            ReduceOp op = ReduceOp::kSum);
  /// Blocking form of reduce_scatter_async().
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                      ReduceOp op = ReduceOp::kSum);

  /// Completes when every rank has reached it.
  Work barrier_async();
  /// Blocking form of barrier_async().
  void barrier();

 protected:
  ProcessGroup(Topology topology, std::chrono::milliseconds collective_timeout);

  /// Backend implementations; arguments are already validated.
  virtual Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) = 0;
  virtual Work do_broadcast(const at::Tensor& tensor, int root) = 0;
  virtual Work do_all_gather(const at::Tensor& output, const at::Tensor& input) = 0;
  virtual Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                 ReduceOp op) = 0;
  virtual Work do_barrier() = 0;

 private:
  Topology topology_;
  std::chrono::milliseconds collective_timeout_;
  std::shared_ptr<c10d::Store> store_;
  std::vector<std::shared_ptr<CollectiveObserver>> observers_;
};

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
