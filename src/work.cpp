#include "ddp/work.hpp"

#include <c10/core/ScalarType.h>

#include "ddp/errors.hpp"
#include "dtype_name.hpp"
#include "work_impl.hpp"

namespace ddp {
namespace detail {

std::string CollectiveInfo::describe() const {
  std::string text = name;
  if (op) text += std::string("(") + toString(*op) + ")";
  text += " of " + std::to_string(numel) + " " + dtypeName(dtype) + " elements";
  return text;
}

WorkImpl::WorkImpl(CollectiveInfo info, compat::WorkPtr work, std::function<void()> finish)
    : info_(std::move(info)), work_(std::move(work)), finish_(std::move(finish)) {}

void WorkImpl::wait() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!waited_) {
    waited_ = true;
    try {
      if (work_) work_->wait(info_.timeout);
      if (finish_) finish_();
    } catch (const Error&) {
      error_ = std::current_exception();
    } catch (const std::exception& e) {
      try {
        rethrowAsDdpError(info_, e);
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    work_.reset();  // Release the engine's buffers as soon as possible.
    finish_ = nullptr;
  }
  if (error_) std::rethrow_exception(error_);
}

bool WorkImpl::isCompleted() const {
  return !work_ || work_->isCompleted();
}

namespace {
bool looksLikeTimeout(const std::string& message) {
  for (const char* marker : {"imed out", "imeout", "timed out"}) {
    if (message.find(marker) != std::string::npos) return true;
  }
  return false;
}
}  // namespace

void rethrowAsDdpError(const CollectiveInfo& info, const std::exception& error) {
  const std::string where = info.describe() + " on rank " + std::to_string(info.rank) +
                            " of " + std::to_string(info.world_size);
  const std::string cause = error.what();
  if (looksLikeTimeout(cause)) {
    throw TimeoutError(where + " did not finish within " + std::to_string(info.timeout.count()) +
                       " ms (" + cause.substr(0, cause.find('\n')) +
                       "). Another rank may have crashed, stopped, or skipped this collective: "
                       "check every rank's log (all ranks must issue the same collectives in "
                       "the same order), or raise the collective timeout.");
  }
  throw CollectiveError(where + " failed: " + cause.substr(0, cause.find('\n')) +
                        ". A peer rank may have exited; check every rank's log.");
}

Work startCollective(const CollectiveInfo& info, const std::function<compat::WorkPtr()>& issue,
                     std::function<void()> finish) {
  compat::WorkPtr work;
  try {
    work = issue();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    rethrowAsDdpError(info, e);
  }
  return Work(std::make_shared<WorkImpl>(info, std::move(work), std::move(finish)));
}

}  // namespace detail

Work::Work() = default;

Work::Work(std::shared_ptr<detail::WorkImpl> impl) : impl_(std::move(impl)) {}

void Work::wait() {
  if (impl_) impl_->wait();
}

bool Work::isCompleted() const {
  return !impl_ || impl_->isCompleted();
}

std::string Work::description() const {
  return impl_ ? impl_->description() : "completed work";
}

}  // namespace ddp
