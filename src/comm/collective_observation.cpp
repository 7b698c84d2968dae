#include "comm/collective_observation.hpp"

#include <utility>

namespace ddp::comm::detail {

CollectiveFacts collective_facts(const char* name, const at::Tensor& tensor,
                                 std::optional<ReduceOp> reduce_op, int root) {
  CollectiveFacts facts;
  facts.name = name;
  facts.reduce_op = reduce_op;
  facts.root = root;
  if (tensor.defined()) {
    facts.dtype = tensor.scalar_type();
    facts.numel = tensor.numel();
    facts.bytes = facts.numel * static_cast<int64_t>(tensor.element_size());
  }
  facts.start_time = std::chrono::system_clock::now();
  facts.steady_start_time = std::chrono::steady_clock::now();
  return facts;
}

CollectiveObservation::CollectiveObservation(
    const std::vector<std::shared_ptr<CollectiveObserver>>& observers, const CollectiveFacts& facts)
    : facts_(facts) {
  followers_.reserve(observers.size());  // then push_back cannot throw (nor, up to 2, allocate)
  try {
    for (const auto& observer : observers) {
      std::unique_ptr<ObservedCollective> follower = observer->on_started(facts_);
      if (follower) followers_.push_back(std::move(follower));
    }
  } catch (...) {
    end(std::current_exception(), /*issued=*/false, /*waited=*/false);
    throw;
  }
}

CollectiveObservation::CollectiveObservation(CollectiveObservation&& other) noexcept
    : facts_(other.facts_), followers_(std::move(other.followers_)), ended_(other.ended_) {
  other.followers_.clear();
  other.ended_ = true;
}

CollectiveObservation::~CollectiveObservation() { end(nullptr, /*issued=*/true, /*waited=*/false); }

void CollectiveObservation::end(std::exception_ptr error, bool issued, bool waited) noexcept {
  if (ended_) return;
  ended_ = true;
  if (followers_.empty()) return;
  CollectiveOutcome outcome;
  outcome.error = std::move(error);
  outcome.issued = issued;
  outcome.waited = waited;
  outcome.duration = std::chrono::steady_clock::now() - facts_.steady_start_time;
  // One clock read: the wall clock's end is its start plus the duration.
  outcome.finish_time =
      facts_.start_time +
      std::chrono::duration_cast<std::chrono::system_clock::duration>(outcome.duration);
  // The reverse order of the starts, as nested scopes end.
  for (auto follower = followers_.rbegin(); follower != followers_.rend(); ++follower) {
    (*follower)->on_finished(facts_, outcome);
  }
  followers_.clear();
}

}  // namespace ddp::comm::detail
