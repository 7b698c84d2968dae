#include "ddp/parallel/join.hpp"

#include <ATen/ATen.h>

#include <exception>
#include <iostream>
#include <string>

#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel {
namespace {

CollectiveError early_termination(int active, int world, int rank) {
  return CollectiveError(
      base::detail::str("Join: rank ", rank, " sees ", world - active, " of the ", world,
                        " ranks out of inputs, and throw_on_early_termination is set; every rank "
                        "stops here. Give every rank the same number of batches, or leave "
                        "throw_on_early_termination off to let the ranks still training finish."));
}

}  // namespace

Join::Join(std::vector<Joinable*> joinables, JoinOptions options)
    : joinables_(std::move(joinables)), options_(options) {
  if (joinables_.empty()) {
    throw InvalidArgumentError(
        "Join: no joinables; pass the DistributedDataParallel modules (model.get()) that "
        "train in the loop.");
  }
  for (size_t i = 0; i < joinables_.size(); ++i) {
    Joinable* joinable = joinables_[i];
    if (joinable == nullptr) {
      throw InvalidArgumentError(
          base::detail::str("Join: joinable #", i, " is null; pass live objects."));
    }
    if (joinable->join_ != nullptr) {
      throw InvalidArgumentError(base::detail::str(
          "Join: joinable #", i, " is already in another Join; leave that one first."));
    }
    ProcessGroup& group = joinable->join_process_group();
    if (group_ == nullptr) group_ = &group;
    if (&group != group_) {
      throw InvalidArgumentError(base::detail::str(
          "Join: joinable #", i,
          " communicates over another process group than joinable #0; one Join covers one group."));
    }
  }
  round_.world = group_->size();
  round_.active = group_->size();
  if (!options_.enable()) return;
  for (Joinable* joinable : joinables_) joinable->join_ = this;
}

Join::~Join() {
  if (options_.enable() && !joined_ && std::uncaught_exceptions() == 0) {
    try {
      join();
    } catch (const std::exception& e) {
      std::cerr << "ddp::Join: joining at the end of the context failed: " << e.what() << std::endl;
    }
  }
  for (Joinable* joinable : joinables_) {
    if (joinable->join_ == this) joinable->join_ = nullptr;
  }
}

// One round: [active, sync, one-hot of this rank] summed over the group.
JoinRound Join::exchange(bool active, bool sync) {
  const int world = group_->size();
  at::Tensor flags = at::zeros({world + 2}, at::kInt);
  if (active) {
    auto values = flags.accessor<int32_t, 1>();
    values[0] = 1;
    values[1] = sync ? 1 : 0;
    values[2 + group_->rank()] = 1;
  }
  {
    comm::detail::CollectiveName name("join.round");
    group_->all_reduce(flags, ReduceOp::kSum);
  }
  auto values = flags.accessor<int32_t, 1>();
  JoinRound round;
  round.world = world;
  round.active = values[0];
  round.sync = values[1] > 0;
  for (int r = world - 1; r >= 0; --r) {
    if (values[2 + r] > 0) {
      round.source = r;
      break;
    }
  }
  return round;
}

JoinRound Join::notify(const Joinable& caller, bool sync) {
  if (!options_.enable()) return round_;
  if (&caller != joinables_.front()) return round_;
  if (joined_) {
    throw InvalidArgumentError(
        "Join: a joinable started an iteration on a rank that has already joined; call "
        "join() after the training loop, not inside it.");
  }
  round_ = exchange(/*active=*/true, sync);
  if (options_.throw_on_early_termination() && round_.active < round_.world) {
    throw early_termination(round_.active, round_.world, group_->rank());
  }
  return round_;
}

int Join::join() {
  if (!options_.enable() || joined_) return source_;
  joined_ = true;
  bool last_to_join = true;
  while (true) {
    round_ = exchange(/*active=*/false, false);
    if (round_.active == 0) break;
    if (options_.throw_on_early_termination()) {
      throw early_termination(round_.active, round_.world, group_->rank());
    }
    for (Joinable* joinable : joinables_) joinable->join_shadow(round_);
    last_to_join = false;
  }
  // The source: the highest of the ranks that were still training in the
  // round before the last one.
  at::Tensor candidate = at::full({1}, last_to_join ? group_->rank() : -1, at::kInt);
  {
    comm::detail::CollectiveName name("join.source");
    group_->all_reduce(candidate, ReduceOp::kMax);
  }
  source_ = candidate.item<int32_t>();
  for (Joinable* joinable : joinables_) joinable->join_finish(source_);
  return source_;
}

}  // namespace ddp::parallel
