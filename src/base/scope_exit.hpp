#pragma once

// Internal: runs a function when a scope ends, however it ends. The reducer
// and the gradient fusion reset their step this way, so that a step that
// throws (a named error, a collective timeout) still leaves them ready for
// the next one.

#include <functional>
#include <utility>

namespace ddp::base::detail {

class ScopeExit {
 public:
  explicit ScopeExit(std::function<void()> on_exit) : on_exit_(std::move(on_exit)) {}
  ~ScopeExit() {
    if (on_exit_) on_exit_();
  }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  std::function<void()> on_exit_;
};

}  // namespace ddp::base::detail
