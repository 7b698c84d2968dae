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

CollectiveInfo collectiveInfo(const ProcessGroup& group, const char* name, const at::Tensor& tensor,
                              std::optional<ReduceOp> op) {
  CollectiveInfo info;
  info.name = name;
  info.op = op;
  info.dtype = tensor.defined() ? tensor.scalar_type() : c10::ScalarType::Float;
  info.numel = tensor.defined() ? tensor.numel() : 0;
  info.rank = group.rank();
  info.world_size = group.size();
  info.timeout = group.collectiveTimeout();
  return info;
}

WorkImpl::WorkImpl(CollectiveInfo info, compat::WorkPtr work, std::function<void()> finish)
    : info_(std::move(info)), work_(std::move(work)), finish_(std::move(finish)) {}

WorkImpl::WorkImpl(std::shared_ptr<WorkImpl> upstream, std::function<void()> finish)
    : upstream_(std::move(upstream)), finish_(std::move(finish)) {}

void WorkImpl::wait() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!waited_) {
    waited_ = true;
    try {
      if (upstream_) upstream_->wait();
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
    finish_ = nullptr;
    done_.store(true, std::memory_order_release);
  }
  if (error_) std::rethrow_exception(error_);
}

// Lock-free so that polling never waits behind a blocking wait(); the
// engine handles are kept until the Work is destroyed, so reading them here
// cannot race with wait().
bool WorkImpl::isCompleted() const {
  if (done_.load(std::memory_order_acquire)) return true;
  return (!upstream_ || upstream_->isCompleted()) && (!work_ || work_->isCompleted());
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

Work Work::then(std::function<void()> after) const {
  // A completed (empty) Work has no upstream: `after` runs on wait().
  return Work(std::make_shared<detail::WorkImpl>(impl_, std::move(after)));
}

std::string Work::description() const {
  return impl_ ? impl_->description() : "completed work";
}

}  // namespace ddp
