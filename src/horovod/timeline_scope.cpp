// The per-thread state of the timeline: the stack of name scopes and the
// depth of nested ProcessGroup calls.

#include <string>
#include <vector>

#include "horovod/timeline_recorder.hpp"

namespace ddp::timeline {
namespace detail {
namespace {

struct Frame {
  const char* label = nullptr;       // with `index`; or null and `text`
  const std::string* text = nullptr;
  int64_t index = -1;
  bool fallback = false;
};

std::vector<Frame>& scopes() {
  thread_local std::vector<Frame> stack;
  return stack;
}

int& depth() noexcept {
  thread_local int value = 0;
  return value;
}

std::string format(const Frame& frame) {
  if (frame.text) return *frame.text;
  std::string name = frame.label;
  if (frame.index >= 0) name += " " + std::to_string(frame.index);
  return name;
}

}  // namespace

LabelScope::LabelScope(const char* label, int64_t index, bool fallback) {
  scopes().push_back(Frame{label, nullptr, index, fallback});
}

LabelScope::~LabelScope() { scopes().pop_back(); }

CallDepth::CallDepth() noexcept { ++depth(); }

CallDepth::~CallDepth() { --depth(); }

bool CallDepth::outermost() const noexcept { return depth() == 1; }

std::optional<std::string> currentScopeName() {
  const auto& stack = scopes();
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    if (!it->fallback) return format(*it);
  }
  if (!stack.empty()) return format(stack.back());
  return std::nullopt;
}

}  // namespace detail

NameScope::NameScope(std::string name) : name_(std::move(name)) {
  detail::scopes().push_back(detail::Frame{nullptr, &name_, -1, false});
}

NameScope::~NameScope() { detail::scopes().pop_back(); }

}  // namespace ddp::timeline
