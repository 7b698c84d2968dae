#pragma once

// Internal: the order FullyShardedDataParallel's units run in, recorded in
// the first training forward (Note [The order the units run in]).

#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::parallel::detail {

// Note [The order the units run in]
// A model's forward may call its units in another order than it registered
// them (a decoder before an encoder, a block list walked backwards). The
// prefetches and the reductions must follow the order the units run in, or
// a prefetched unit waits gathered while others run, and a unit's full
// gradient waits for a reduction stuck behind a unit whose backward has not
// come (the peak grows past the bound of two units). As PyTorch's FSDP and
// DeepSpeed's ZeRO-3 trace, the first training forward records the order:
// it prefetches nothing, and before each unit it runs, one all-reduce checks
// that every rank runs the same unit there (Gloo and NCCL pair collectives
// by their order, so a rank running another unit would pair a gather with a
// gather of another size); a difference is a ConfigError on every rank,
// naming both units. Later forwards prefetch the next units of the record,
// backward passes prefetch and reduce in its reverse. Without
// find_unused_units every unit must run in every training forward: a rank
// that reaches a unit with one before it in the record not run in this
// forward, or ends the forward with a unit not run, throws ConfigError
// naming it before it issues a collective the others would not (they see
// its end as a CollectiveError or a timeout). With find_unused_units the
// order stays the registration order (Note [Units some ranks skip]).
class ForwardOrder {
 public:
  /// `units` units, `root` first (or -1: none), in registration order
  /// until record() adopts the first training forward's.
  ForwardOrder(int units, int root);

  bool recorded() const { return recorded_; }
  int size() const { return static_cast<int>(order_.size()); }
  /// The unit at `position`, and the position of `unit`.
  int at(int position) const { return order_[position]; }
  int position_of(int unit) const { return position_[unit]; }

  /// A forward starts: no unit entered yet.
  void begin();
  /// Notes that `unit` runs; true the first time in this forward.
  bool enter(int unit);
  bool entered(int unit) const { return entered_[unit] != 0; }
  /// How many units this forward entered.
  int entered_count() const { return static_cast<int>(entered_order_.size()); }
  /// Adopts this forward's order, the units it did not run after it in
  /// registration order.
  void record();
  /// The units before `unit` in the recorded order that this forward did not
  /// enter (empty before record()).
  std::vector<int> skipped_before(int unit) const;
  /// The units this forward did not enter.
  std::vector<int> not_entered() const;

 private:
  std::vector<int> order_;
  std::vector<int> position_;
  std::vector<char> entered_;
  std::vector<int> entered_order_;
  bool recorded_ = false;
};

/// The first training forward's check (Note [The order the units run in]):
/// one all-reduce over `group` that every rank enters unit `unit` (named
/// `names[unit]`) as its `index`-th; throws ConfigError naming the units
/// the ranks differ on, on every rank.
void check_same_unit(ProcessGroup& group, int unit, int index,
                     const std::vector<std::string>& names);

}  // namespace ddp::parallel::detail
