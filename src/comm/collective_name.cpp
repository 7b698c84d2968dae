#include "comm/collective_name.hpp"

#include <vector>

#include "base/str.hpp"

namespace ddp::comm::detail {
namespace {

struct Frame {
  const char* label = nullptr;  // with `index`; or null, and `text`
  const std::string* text = nullptr;
  int64_t index = -1;
  bool fallback = false;
};

std::vector<Frame>& frames() {
  thread_local std::vector<Frame> stack;
  return stack;
}

std::string format(const Frame& frame) {
  if (frame.text) return *frame.text;
  std::string name = frame.label;
  if (frame.index >= 0) name += base::detail::str(" ", frame.index);
  return name;
}

}  // namespace

CollectiveName::CollectiveName(const char* label, int64_t index, bool fallback) {
  frames().push_back(Frame{label, nullptr, index, fallback});
}

CollectiveName::~CollectiveName() { frames().pop_back(); }

void push_collective_name(const std::string* text) {
  frames().push_back(Frame{nullptr, text, -1, false});
}

void pop_collective_name() noexcept { frames().pop_back(); }

std::optional<std::string> current_collective_name() {
  const auto& stack = frames();
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
    if (!it->fallback) return format(*it);
  }
  if (!stack.empty()) return format(stack.back());
  return std::nullopt;
}

}  // namespace ddp::comm::detail
