#pragma once

// Internal: when FullyShardedDataParallel's units gather, reshard and
// reduce (Note [The order of a sharded step]).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "parallel/fully_sharded/forward_order.hpp"
#include "parallel/fully_sharded/mapped_allocations.hpp"
#include "parallel/fully_sharded/reduction_queue.hpp"
#include "parallel/fully_sharded/sharded_unit.hpp"

namespace ddp::parallel::detail {

// Note [The order of a sharded step]
// Forward: before unit u runs it is waited for and the all-gathers of the
// next `prefetch` units of the forward order (Note [The order the units run
// in]) start, so the next units' communication overlaps this unit's
// compute; after it ran, a hook goes on each of its output tensors and,
// with reshard_after_forward, its storage is emptied, except the last unit
// of a training forward's order (not the root): the backward starts with
// it, and gathering it again at once cost a unit's all-gather per step.
// Backward: the gradient reaching unit u's output runs that hook before any
// of u's backward operations: u is gathered again (it was prefetched while
// the unit after it ran its backward; the last unit of the forward was kept)
// and the gathers of the `prefetch` units before it start. Only when u's
// first gradient is about to be accumulated (a pre-hook on each
// parameter's AccumulateGrad) does the reduction in flight finish and u's
// gradient buffer get set up, so the reduction of the unit after u runs
// beside u's backward computation with one full gradient alive (finishing
// it when u's backward began put each reduce-scatter alone on the critical
// path: 4-10% of a step on the CPU). When the last of u's gradients has
// been accumulated (a post-accumulate hook per parameter) u is ready; units
// are reduce-scattered strictly in reverse forward order, the same on every
// rank whatever order they became ready in, and a reduced unit is
// resharded at once. So at most one full gradient is alive: a backward
// holds u gathered, its gradient and the prefetched unit (3 units). With
// overlap_reduction the reduction of the unit after u is waited for only
// when u's own starts, so it runs on past u's first accumulation and its
// gradient is a fourth unit-sized buffer. At the end of backward (an
// engine callback queued by the first hook) every unit
// not yet reduced is, with zeros where no gradient came (a unit unused in
// this step on this rank), so every rank issues the same collectives, and
// every unit is resharded (a frozen one, which has no reduction, too).

// Note [One state per step]
// The schedule keeps one explicit state, set at every forward, as FSDP2's
// parameter groups do, never a count that only a clean backward resets:
// - kIdle: between steps; nothing gathered.
// - kForward: a forward runs. A forward that finds this state left by one
//   that threw reshards what it gathered.
// - kAwaitingBackward: a training forward ended (several may, before one
//   backward through all of them: their units' hooks all wait).
// - kBackward: a backward that accumulates into the units runs. A forward
//   that finds it left by a backward that threw (an exception in a hook, in
//   a custom function; the engine then drops its end-of-backward callback)
//   drops that backward's full gradients and unfinished reductions, so the
//   next step is the step of a job that skipped the batch.
// A backward that accumulates into no unit's parameters (autograd::grad of
// an input, with create_graph for a gradient penalty) gathers the units it
// passes through, reduces nothing and leaves them gathered: the graph it
// created reads them when the training backward runs through it, and that
// backward's reductions reshard them.

// Note [Units some ranks skip]
// Gloo, like NCCL, pairs collectives by the order ranks issue them, so a
// unit one rank runs and another skips must cost both the same collectives
// in the same order, and at the same points relative to the collectives
// the model issues itself (SyncBatchNorm's, in forward and in backward).
// With find_unused_units, a forward therefore starts by gathering every
// unit, run or not, in unit order, before the model's code runs (gathering
// a unit as it is entered put a skipped unit's gather after SyncBatchNorm's
// all-reduce on one rank and before it on another: seed 265 of
// fsdp_generated_models.hpp). No unit is resharded until its reduction (none is gathered again in
// backward, whose hooks fire in an order that depends on what ran), and
// the reductions go in reverse unit order, all of them at the end of
// backward. A reduction launched as soon as a unit is ready would be issued
// at a point of the backward that depends on what this rank ran (a unit it
// skipped is ready at once, one whose branch it skipped inside only at the
// end), so a collective the model issues in its backward (SyncBatchNorm's)
// would pair with different collectives on different ranks: the random
// models found two ranks waiting for each other for ever (seed 121 of
// fsdp_generated_models.hpp). Memory is that of reshard_after_forward(false)
// with every unit's full gradient held until the end of backward.
class UnitSchedule : public std::enable_shared_from_this<UnitSchedule> {
 public:
  /// `units` in registration order; `root`: the index of the unit that holds
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

  /// A forward starts; `training`: the wrapper is in training mode (and
  /// GradMode on), so that its units must run on every rank.
  void begin_forward(bool training);
  void before_unit(int unit);
  /// `outputs`: the tensors the unit returned (empty when they could not
  /// be found: the unit then stays gathered until its backward).
  /// `checkpointed`: the first run of a checkpointed function, whose
  /// recompute in backward enters the unit again.
  void after_unit(int unit, std::vector<at::Tensor>& outputs, bool checkpointed = false);
  /// A checkpointed function's recompute in backward enters `unit` (Note
  /// [Checkpointed units] in ddp/parallel/fully_sharded_units.hpp): what
  /// the gradient reaching its output does without checkpointing, but the
  /// gradient buffer waits for the reduction in a synchronized backward.
  void before_recompute(int unit) { enter_backward(unit, !require_sync_); }
  /// After the forward, with the tensors of its output.
  void end_forward(std::vector<at::Tensor>& outputs);
  /// The units this forward has not run whose parameters hold no bytes:
  /// what a forward that failed reading a parameter read.
  std::vector<int> unentered_units() const;

 private:
  enum class Phase { kIdle, kForward, kAwaitingBackward, kBackward };
  void watch_outputs(int unit, std::vector<at::Tensor>& outputs);
  void gather_once(int unit);
  void prefetch_after(int unit);
  void check_runs(int unit);
  void before_backward(int unit) { enter_backward(unit, true); }
  void enter_backward(int unit, bool prepare_gradients);
  // Before the first of the unit's gradients is accumulated.
  void before_accumulate(int unit);
  bool backward_accumulates() const;
  void gradient_arrived(int unit, size_t parameter);
  // find_unused_units: a parameter no rank gave a gradient keeps none.
  void drop_unreceived_gradients();
  void end_backward();
  void reset_backward();
  void abandon_backward();
  void exchange_usage();
  // With find_unused_units: whether no rank ran unit `unit`.
  bool unused_everywhere(int unit) const;

  std::vector<std::unique_ptr<ShardedUnit>> units_;
  std::vector<std::string> names_;
  int root_;
  FullyShardedDataParallelOptions options_;
  ProcessGroup& group_;
  ForwardOrder order_;
  Phase phase_ = Phase::kIdle;
  bool training_ = false;  // this forward trains (Note [The order the units run in])
  bool require_sync_ = true;
  std::vector<char> called_;  // units run in training forwards since the last backward
  std::vector<char> gathered_in_forward_;
  std::vector<char> cast_in_forward_;                // units whose buffers this forward cast
  std::vector<int32_t> used_by_;                     // ranks that ran each unit (find_unused_units)
  std::vector<std::shared_ptr<void>> accumulators_;  // keeps 1.13's hooks alive
  int open_unit_ = -1;  // the unit before_unit() gathered last, not yet after_unit()ed
  // Note [The backward's large blocks from a pool]: the largest host
  // parameter's bytes with cache_buffers, else 0 (no pool).
  size_t pool_keep_bytes_ = 0;
  // Per backward.
  bool callback_queued_ = false;
  bool accumulates_ = false;  // the running backward accumulates into the units
  std::optional<PooledAllocations> backward_pool_;  // through a backward that accumulates
  ReductionQueue reductions_;
  // Per unit entered in backward and not yet accumulated into: 1 the
  // reduction in flight waits for its first gradient, 2 its gradient
  // buffer too (0: neither).
  std::vector<char> awaiting_gradients_;
};

}  // namespace ddp::parallel::detail
