#pragma once

/// \file work.hpp
/// A handle on an asynchronous collective.

#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace ddp::comm {

class Work;

namespace detail {
class WorkImpl;
class CollectiveObservation;
/// Internal: a Work that completes with `work` and then ends `observation`
/// for its observers, with the error its wait() throws (or, never waited
/// on, when destroyed): Note [Observing collectives] in process_group.hpp.
Work observed(const Work& work, CollectiveObservation observation);
}  // namespace detail

/// A collective in flight. Returned by the `...Async` methods of
/// ddp::ProcessGroup; `wait()` blocks until the result is in the tensors.
///
/// A Work must be waited on before its tensors are read. Waiting twice is
/// allowed; the second wait returns at once (or throws the same error).
class [[nodiscard]] Work {
 public:
  /// A handle that is already complete (nothing to wait for).
  Work();
  explicit Work(std::shared_ptr<detail::WorkImpl> impl);

  /// Blocks until the collective has finished and its result is in place.
  /// \throws TimeoutError when it did not finish within the collective
  ///   timeout, naming the operation.
  /// \throws CollectiveError when the backend reported another failure.
  void wait();

  /// True once the collective has finished (successfully or not). Does not
  /// block; a finished collective still needs wait() to apply its result.
  bool is_completed() const;

  /// A Work that completes when this one has and `after` has then run (on
  /// the waiting thread, once): for decompressing a result, copying it back,
  /// scaling it. Errors of either surface from the new Work's wait().
  Work then(std::function<void()> after) const;

  /// What this collective is, e.g. "all_reduce(sum) of 1024 float32 elements".
  std::string description() const;

 private:
  friend Work detail::observed(const Work& work, detail::CollectiveObservation observation);
  std::shared_ptr<detail::WorkImpl> impl_;
};

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
