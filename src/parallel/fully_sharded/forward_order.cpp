#include "parallel/fully_sharded/forward_order.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel::detail {

ForwardOrder::ForwardOrder(int units, int root)
    : order_(units), position_(units), entered_(units, 0) {
  std::iota(order_.begin(), order_.end(), 0);
  if (root > 0) std::rotate(order_.begin(), order_.begin() + root, order_.begin() + root + 1);
  for (int p = 0; p < units; ++p) position_[order_[p]] = p;
}

void ForwardOrder::begin() {
  std::fill(entered_.begin(), entered_.end(), 0);
  entered_order_.clear();
}

bool ForwardOrder::enter(int unit) {
  if (entered_[unit]) return false;
  entered_[unit] = 1;
  entered_order_.push_back(unit);
  return true;
}

void ForwardOrder::record() {
  std::vector<int> order = entered_order_;
  for (int unit : order_) {
    if (!entered_[unit]) order.push_back(unit);
  }
  order_ = order;
  for (int p = 0; p < size(); ++p) position_[order_[p]] = p;
  recorded_ = true;
}

std::vector<int> ForwardOrder::skipped_before(int unit) const {
  std::vector<int> skipped;
  if (!recorded_) return skipped;
  for (int p = 0; p < position_[unit]; ++p) {
    if (!entered_[order_[p]]) skipped.push_back(order_[p]);
  }
  return skipped;
}

std::vector<int> ForwardOrder::not_entered() const {
  std::vector<int> missing;
  for (int unit : order_) {
    if (!entered_[unit]) missing.push_back(unit);
  }
  return missing;
}

void check_same_unit(ProcessGroup& group, int unit, int index,
                     const std::vector<std::string>& names) {
  if (group.size() == 1) return;
  at::Tensor seen = at::tensor({static_cast<int64_t>(unit), -static_cast<int64_t>(unit)});
  {
    comm::detail::CollectiveName name("fsdp.order", index);
    group.all_reduce(seen, ReduceOp::kMax);
  }
  const int64_t highest = seen[0].item<int64_t>();
  const int64_t lowest = -seen[1].item<int64_t>();
  if (highest == lowest) return;
  throw ConfigError(base::detail::str(
      "FullyShardedDataParallel: the ranks run different units as unit ", index + 1,
      " of the first training forward: some run '", names.at(lowest), "' and some '",
      names.at(highest), "' (this rank '", names.at(unit),
      "'); ranks must gather the same units in the same order. If some ranks skip a unit in a "
      "step, set find_unused_units(true) in FullyShardedDataParallelOptions."));
}

}  // namespace ddp::parallel::detail
