#pragma once

// Internal: what a ddp::Work holds, and how collectives are started.

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/compat/torch_compat.hpp"
#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/comm/reduce_op.hpp"
#include "ddp/comm/work.hpp"

namespace ddp::comm::detail {

/// What a collective is, kept so that an error can name it. The text is
/// built only when needed, off the hot path.
struct CollectiveInfo {
  /// The backend ("gloo", "nccl", "shm", "hierarchical"), first in messages.
  std::string backend;
  const char* name = "";
  std::optional<ReduceOp> op;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t numel = 0;
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{0};
  /// When the collective was handed to the backend.
  std::chrono::steady_clock::time_point issued_at;
  /// Note [One clock decides a timeout]
  /// The shared-memory backends enforce the timeout inside the collective,
  /// where they know which ranks are missing; waiting on their Work then
  /// sets no timer of its own, which would race theirs and win or lose by
  /// scheduling luck. NCCL's watchdog enforces it too (Note [NCCL's wait
  /// leaves the host free]). Gloo gets the timeout both as an option and on
  /// wait; either timer firing is the same timeout.
  bool backend_enforces_timeout = false;

  /// "<backend> all_reduce(sum) of 1024 float32 elements on rank 0 of 2".
  std::string describe() const;
};

/// What `group`'s `backend` is about to run: `name` on `tensor` (undefined
/// for a barrier), with `op` for reductions.
CollectiveInfo collective_info(const ProcessGroup& group, std::string backend, const char* name,
                               const at::Tensor& tensor, std::optional<ReduceOp> op = std::nullopt);

/// A collective in flight on an backend, plus an optional step that runs on
/// the waiting thread once the backend is done (copying a widened bfloat16
/// result back, dividing a sum into an average, reducing received chunks).
class WorkImpl {
 public:
  WorkImpl(CollectiveInfo info, base::compat::WorkPtr work, std::function<void()> finish);
  /// Completes after `upstream`, then runs `finish`.
  WorkImpl(std::shared_ptr<WorkImpl> upstream, std::function<void()> finish);
  WorkImpl(const WorkImpl&) = delete;
  WorkImpl& operator=(const WorkImpl&) = delete;

  void wait();
  bool is_completed() const;
  std::string description() const {
    if (!upstream_) return info_.describe();
    return upstream_->description() + (has_local_step_ ? " (then a local step)" : "");
  }

 protected:
  /// Has the first wait() end `observation` (which must outlive this) with
  /// the error it throws, null on success (detail::observed()).
  void end_on_wait(CollectiveObservation* observation) noexcept { observation_ = observation; }

 private:
  CollectiveInfo info_;
  std::shared_ptr<WorkImpl> upstream_;
  base::compat::WorkPtr work_;
  std::function<void()> finish_;
  // Only an observed collective's Work has one, beside it in the same
  // allocation (work.cpp): every other Work stays as small as it was.
  CollectiveObservation* observation_ = nullptr;
  bool has_local_step_ = false;  // finish_ was given (it is cleared once run)
  std::mutex mutex_;
  bool waited_ = false;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
};

/// Rethrows an backend's exception as ddp's TimeoutError or CollectiveError,
/// naming the collective: a timeout when the collective's timeout had elapsed
/// since it was issued (Note [Classifying foreign errors]). Callers let
/// ddp::Error through unchanged: its type is already its kind.
[[noreturn]] void rethrow_as_ddp_error(const CollectiveInfo& info, const std::exception& error);

/// Starts a collective: `issue` hands it to the backend; `finish` (optional)
/// runs after the backend completes. Errors thrown while issuing are
/// translated like errors thrown while waiting.
Work start_collective(const CollectiveInfo& info,
                      const std::function<base::compat::WorkPtr()>& issue,
                      std::function<void()> finish = {});

}  // namespace ddp::comm::detail
