#pragma once

// Internal: the order in which a backward's units reduce their gradients,
// and what of it runs at once (Note [The order of a sharded step], Note
// [Hybrid sharding]).

#include <functional>
#include <memory>
#include <vector>

#include "parallel/fully_sharded/forward_order.hpp"
#include "parallel/fully_sharded/sharded_unit.hpp"

namespace ddp::parallel::detail {

/// The reductions of a synchronized backward: strictly in reverse forward
/// order, the same on every rank whatever order the units became ready in;
/// one reduce-scatter in flight, and with hybrid sharding one all-reduce
/// across the replicas besides it. A unit is resharded as its reduction
/// starts.
class ReductionQueue {
 public:
  /// `units` and `order` are UnitSchedule's, which owns the queue.
  ReductionQueue(const std::vector<std::unique_ptr<ShardedUnit>>& units, const ForwardOrder& order);
  /// All of unit `unit`'s gradients arrived: it is reduced, after every
  /// unit later in the forward order, as soon as they are ready too.
  void ready(int unit);
  /// Finishes the reduction in flight, but for a hybrid unit's all-reduce
  /// across the replicas, which runs on until the next call.
  void finish_in_flight();
  /// At the end of a synchronized backward: reduces every trainable unit
  /// not yet reduced (resharding, without a reduction, each one
  /// `unused(unit)` names) and waits for every reduction.
  void finish(const std::function<bool(int)>& unused);
  /// Ready for the next backward; after an exception in one, forgets what
  /// is in flight (the units drop it: ShardedUnit::abandon_gradients()).
  void reset();

 private:
  void launch(int unit);
  void finish_replicating();

  const std::vector<std::unique_ptr<ShardedUnit>>& units_;
  const ForwardOrder& order_;
  std::vector<char> ready_;
  int next_ = -1;         // a position in order_, walked down
  int in_flight_ = -1;    // the unit whose reduce-scatter is running, or -1
  int replicating_ = -1;  // the unit whose all-reduce across the replicas is, or -1
};

}  // namespace ddp::parallel::detail
