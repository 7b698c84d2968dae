#include "ddp/comm/work.hpp"

#include <c10/core/ScalarType.h>

#include "base/dtype_name.hpp"
#include "base/str.hpp"
#include "comm/collective_observation.hpp"
#include "comm/timeout_message.hpp"
#include "comm/work_impl.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::comm {
namespace detail {

std::string CollectiveInfo::describe() const {
  std::string text = backend.empty() ? name : backend + " " + name;
  if (op) text += std::string("(") + to_string(*op) + ")";
  text += base::detail::str(" of ", numel, " ", base::detail::dtype_name(dtype), " elements");
  return base::detail::str(text, " on rank ", rank, " of ", world_size);
}

CollectiveInfo collective_info(const ProcessGroup& group, std::string backend, const char* name,
                               const at::Tensor& tensor, std::optional<ReduceOp> op) {
  CollectiveInfo info;
  info.backend = std::move(backend);
  info.name = name;
  info.op = op;
  info.dtype = tensor.defined() ? tensor.scalar_type() : c10::ScalarType::Float;
  info.numel = tensor.defined() ? tensor.numel() : 0;
  info.rank = group.rank();
  info.world_size = group.size();
  info.timeout = group.collective_timeout();
  info.issued_at = std::chrono::steady_clock::now();
  return info;
}

WorkImpl::WorkImpl(CollectiveInfo info, base::compat::WorkPtr work, std::function<void()> finish)
    : info_(std::move(info)), work_(std::move(work)), finish_(std::move(finish)) {}

WorkImpl::WorkImpl(std::shared_ptr<WorkImpl> upstream, std::function<void()> finish)
    : upstream_(std::move(upstream)),
      finish_(std::move(finish)),
      has_local_step_(static_cast<bool>(finish_)) {}

namespace {

// An observed collective's Work and its observation in one allocation
// (Note [Observing collectives]). The observation, if no wait() ended it,
// ends as not waited on when the Work is destroyed (Note [When a collective
// ends]).
class ObservedWorkImpl final : public WorkImpl {
 public:
  ObservedWorkImpl(std::shared_ptr<WorkImpl> upstream, CollectiveObservation observation)
      : WorkImpl(std::move(upstream), nullptr), observation_(std::move(observation)) {
    end_on_wait(&observation_);
  }

 private:
  CollectiveObservation observation_;
};

}  // namespace

void WorkImpl::wait() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!waited_) {
    waited_ = true;
    try {
      if (upstream_) upstream_->wait();
      if (work_) {
        if (info_.backend_enforces_timeout) {
          work_->wait();
        } else {
          work_->wait(info_.timeout);
        }
      }
      if (finish_) finish_();
    } catch (const Error&) {
      error_ = std::current_exception();
    } catch (const std::exception& e) {
      try {
        rethrow_as_ddp_error(info_, e);
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    finish_ = nullptr;
    done_.store(true, std::memory_order_release);
    if (observation_) {  // observers must not change the outcome: end() is noexcept
      observation_->end(error_, /*issued=*/true, /*waited=*/true);
      observation_ = nullptr;
    }
  }
  if (error_) std::rethrow_exception(error_);
}

// Lock-free so that polling never waits behind a blocking wait(); the
// backend handles are kept until the Work is destroyed, so reading them here
// cannot race with wait().
bool WorkImpl::is_completed() const {
  if (done_.load(std::memory_order_acquire)) return true;
  return (!upstream_ || upstream_->is_completed()) && (!work_ || work_->isCompleted());
}

// Note [Classifying foreign errors]
// ddp's own backends throw ddp's typed errors. The c10d backends throw
// whatever Gloo or NCCL raise, with wording that differs between backends and
// LibTorch versions, so the text decides nothing. Both backends were given
// this collective's timeout, and their timers started after `issued_at`: an
// error raised once the timeout has elapsed since then is their timeout; an
// earlier one (a closed connection, a peer that exited) is not.
void rethrow_as_ddp_error(const CollectiveInfo& info, const std::exception& error) {
  const std::string cause = error.what();
  if (std::chrono::steady_clock::now() - info.issued_at >= info.timeout) {
    throw TimeoutError(
        timeout_message(info.describe(), info.timeout, "",
                        "the backend does not say which ranks were missing; it said: " + cause));
  }
  throw CollectiveError(info.describe() + " failed: " + cause.substr(0, cause.find('\n')) +
                        ". A peer rank may have exited; check every rank's log.");
}

Work start_collective(const CollectiveInfo& info,
                      const std::function<base::compat::WorkPtr()>& issue,
                      std::function<void()> finish) {
  base::compat::WorkPtr work;
  try {
    work = issue();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    rethrow_as_ddp_error(info, e);
  }
  return Work(std::make_shared<WorkImpl>(info, std::move(work), std::move(finish)));
}

}  // namespace detail

Work::Work() = default;

Work::Work(std::shared_ptr<detail::WorkImpl> impl) : impl_(std::move(impl)) {}

void Work::wait() {
  if (impl_) impl_->wait();
}

bool Work::is_completed() const { return !impl_ || impl_->is_completed(); }

Work Work::then(std::function<void()> after) const {
  // A completed (empty) Work has no upstream: `after` runs on wait().
  return Work(std::make_shared<detail::WorkImpl>(impl_, std::move(after)));
}

Work detail::observed(const Work& work, detail::CollectiveObservation observation) {
  return Work(std::make_shared<detail::ObservedWorkImpl>(work.impl_, std::move(observation)));
}

std::string Work::description() const { return impl_ ? impl_->description() : "completed work"; }

}  // namespace ddp::comm
