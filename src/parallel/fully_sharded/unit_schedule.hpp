#pragma once

// Internal: when FullyShardedDataParallel's units gather, reshard and
// reduce (Note [The order of a sharded step]).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "parallel/fully_sharded/sharded_unit.hpp"

namespace ddp::parallel::detail {

// Note [The order of a sharded step]
// Forward: before unit u runs it is waited for and the all-gathers of units
// u+1 .. u+prefetch start, so the next units' communication overlaps this
// unit's compute; after it ran, a hook goes on each of its output tensors
// and, with reshard_after_forward, its storage is emptied.
// Backward: the gradient reaching unit u's output runs that hook before any
// of u's backward operations: u is gathered again (it was prefetched while
// u+1's backward ran), its gradient buffer set up, and the gathers of
// u-1 .. u-prefetch start. When the last of u's gradients has been
// accumulated (a post-accumulate hook per parameter) u is ready; units are
// reduce-scattered strictly in reverse forward order, the same on every
// rank whatever order they became ready in, with at most one reduction in
// flight, and a reduced unit is resharded at once. At the end of backward
// (an engine callback queued by the first hook) every unit not yet reduced
// is, with zeros where no gradient came (a unit unused in this step on
// this rank), so every rank issues the same collectives.

// Note [Units some ranks skip]
// Gloo, like NCCL, pairs collectives by the order ranks issue them, so a
// unit one rank runs and another skips must cost both the same collectives
// in the same order. With find_unused_units, a forward therefore gathers
// every unit, run or not, in unit order: before unit u runs, every unit up
// to u + prefetch not yet gathered in this forward; at its end, the rest.
// No unit is resharded until its reduction (none is gathered again in
// backward, whose hooks fire in an order that depends on what ran), and
// the reductions go in reverse unit order, a unit this rank skipped being
// ready from the start. Memory is that of reshard_after_forward(false).
class UnitSchedule : public std::enable_shared_from_this<UnitSchedule> {
 public:
  /// `units` in forward order; `root`: the index of the unit that holds
  /// the parameters outside every other unit (gathered for the whole
  /// forward), or -1.
  UnitSchedule(std::vector<std::unique_ptr<ShardedUnit>> units, int root,
               FullyShardedDataParallelOptions options, ProcessGroup& group);

  /// Whether backward passes reduce (false inside no_sync()).
  bool require_sync() const { return require_sync_; }
  void set_require_sync(bool value) { require_sync_ = value; }

  /// Installs the parameters' post-accumulate hooks; once, after construction.
  void attach_hooks();

  const std::vector<std::unique_ptr<ShardedUnit>>& units() const { return units_; }

  void begin_forward();
  void before_unit(int unit);
  /// `outputs`: the tensors the unit returned (empty when they could not
  /// be found: the unit then stays gathered until its backward).
  void after_unit(int unit, std::vector<at::Tensor>& outputs);
  /// After the forward, with the tensors of its output.
  void end_forward(std::vector<at::Tensor>& outputs);

 private:
  void watch_outputs(int unit, std::vector<at::Tensor>& outputs);
  void gather_once(int unit);
  void before_backward(int unit);
  void gradient_arrived(int unit);
  void launch_ready();
  void launch(int unit);
  void finish_in_flight();
  void end_backward();
  void exchange_usage();
  // With find_unused_units: whether unit `unit` will have no gradient on
  // this rank, and whether no rank will.
  bool unused_here(int unit) const;
  bool unused_everywhere(int unit) const;

  std::vector<std::unique_ptr<ShardedUnit>> units_;
  int root_;
  FullyShardedDataParallelOptions options_;
  ProcessGroup& group_;
  bool require_sync_ = true;
  std::vector<char> called_;  // units run since the last backward
  std::vector<char> gathered_in_forward_;
  std::vector<int32_t> used_by_;                     // ranks that ran each unit (find_unused_units)
  std::vector<std::shared_ptr<void>> accumulators_;  // keeps 1.13's hooks alive
  int open_unit_ = -1;  // the unit before_unit() gathered last, not yet after_unit()ed
  // Per backward.
  bool callback_queued_ = false;
  std::vector<char> ready_;
  int next_to_reduce_ = -1;
  int in_flight_ = -1;  // the unit whose reduction is running, or -1
};

}  // namespace ddp::parallel::detail
