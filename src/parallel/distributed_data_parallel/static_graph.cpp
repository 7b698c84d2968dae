// The static graph's record (Note [Static graph]): the members of Reducer
// that count, compare and enforce each parameter's gradients per backward
// pass when DistributedDataParallelOptions::static_graph is set.

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/distributed_data_parallel/reducer.hpp"

namespace ddp::parallel::detail {

// Note [Static graph]
// With static_graph, the first synchronized iteration only counts how many
// times each parameter's hook runs (twice for a module applied twice under
// reentrant checkpointing, zero for one never used) and reduces every bucket
// at its end, as delay_allreduce does. The ranks then compare their counts,
// all of them (one all-reduce of a ranks x parameters table, once), and fail
// together naming the parameters and the ranks when they differ. From the
// second iteration on, a gradient is ready when its hook has run the recorded
// number of times, so it is reduced once with the accumulated value, and a
// parameter recorded at zero is ready from the start: no unused-parameter
// search, no usage exchange. A later iteration whose counts differ from the
// record is a named error on the rank where it happens.
void Reducer::finalize_recording() {
  const at::Tensor table = exchange_arrivals(/*joined=*/false);
  for (size_t i = 0; i < names_.size(); ++i) {
    if (recorded_arrivals_[i] > 0) {
      arrived_[i] = 1;  // placed by fill_bucket below
    } else {
      buckets_.slice(i).zero_();
    }
    buckets_.mark_ready(i);
  }
  for (size_t b = 0; b < buckets_.buckets().size(); ++b) fill_bucket(b);
  buckets_.launch_rest([this](size_t b) { return launch(b); });
  std::vector<int32_t> used(names_.size());
  for (size_t i = 0; i < used.size(); ++i) used[i] = recorded_arrivals_[i] > 0 ? 1 : 0;
  wait_and_copy_out(used);
  stats_.launched_during_backward = 0;
  ++stats_.synchronized_iterations;

  for (size_t i = 0; i < names_.size(); ++i) {
    if (recorded_arrivals_[i] > 0) ready_order_.push_back(i);
  }
  std::sort(ready_order_.begin(), ready_order_.end(),
            [this](size_t a, size_t b) { return last_arrival_[a] < last_arrival_[b]; });
  if (!rebuilt_) rebuild_in_ready_order();
  adopt_recorded_counts(table);
}

// Each rank's hook counts of the recording iteration in its row (-1 for a
// rank that has joined, under a Join); throws on every rank alike when the
// ranks that trained disagree.
at::Tensor Reducer::exchange_arrivals(bool joined) {
  const int64_t count = static_cast<int64_t>(names_.size());
  const int world = group_->size();
  at::Tensor table = at::zeros({world, count}, at::kLong);
  if (joined) {
    table[group_->rank()].fill_(-1);
  } else {
    table[group_->rank()].copy_(at::tensor(recorded_arrivals_, at::kLong));
  }
  if (!alone_) {  // Note [Alone]
    comm::detail::CollectiveName name("ddp.static_graph");
    group_->all_reduce(table, ReduceOp::kSum);
  }

  const auto* values = table.data_ptr<int64_t>();
  std::string listed;
  int disagreeing = 0;
  for (int64_t i = 0; i < count; ++i) {
    std::string per_rank;
    bool differ = false;
    int64_t first = -1;
    for (int r = 0; r < world; ++r) {
      const int64_t value = values[r * count + i];
      if (value < 0) continue;  // joined
      if (first >= 0 && value != first) differ = true;
      if (first < 0) first = value;
      per_rank += base::detail::str(per_rank.empty() ? "rank " : ", rank ", r, ": ", value);
    }
    if (!differ) continue;
    if (++disagreeing <= 4)
      listed += (disagreeing > 1 ? "; '" : "'") + names_[i] + "' (" + per_rank + ")";
  }
  if (disagreeing > 0) {
    throw InvalidArgumentError(base::detail::str(
        "DistributedDataParallel(static_graph): the ranks' first iterations differ: ", disagreeing,
        " parameter(s) received different numbers of gradients per backward pass: ", listed,
        disagreeing > 4 ? "; ..." : "",
        ". static_graph needs the same graph on every rank and in every iteration; run the same "
        "modules on every rank, or construct without static_graph (with find_unused_parameters for "
        "parameters that some ranks skip)."));
  }
  return table;
}

void Reducer::adopt_recorded_counts(const at::Tensor& table) {
  for (int r = 0; r < group_->size(); ++r) {
    if (table[r].min().item<int64_t>() < 0) continue;  // joined
    const at::Tensor row = table[r].contiguous();
    expected_.assign(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
    break;
  }
  stats_.static_gradient_counts = expected_;
  buckets_.set_passes(expected_);
}

void Reducer::throw_missing_gradients(const std::vector<size_t>& missing) {
  std::string all;
  for (size_t k = 0; k < missing.size() && k < 8; ++k) {
    const size_t i = missing[k];
    all += base::detail::str(k ? ", '" : "'", names_[i], "' (",
                             expected_[i] - buckets_.passes_left(i), " of ", expected_[i], ")");
  }
  if (missing.size() > 8) all += ", ...";
  const std::string message = base::detail::str(
      "DistributedDataParallel(static_graph): rank ", group_->rank(), ": ", missing.size(),
      " parameter(s) received fewer gradients in synchronized iteration ",
      stats_.synchronized_iterations + 1, " than the first iteration recorded: ", all,
      ". static_graph needs the same graph in every iteration; construct without it when the graph "
      "changes (with find_unused_parameters for parameters that some iterations skip).");
  board_.report_error(message);  // Note [Naming a mismatch on every rank]
  throw InvalidArgumentError(message);
}

}  // namespace ddp::parallel::detail
