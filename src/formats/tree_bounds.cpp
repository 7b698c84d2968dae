#include "formats/tree_bounds.hpp"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "base/str.hpp"
#include "ddp/formats/torch_file.hpp"

namespace ddp::formats::detail {

std::string tree_problem(const PyValue& root) {
  auto children = [](const PyValue& value) {
    std::vector<const PyValue*> result;
    for (const auto& item : value.items) result.push_back(item.get());
    for (const auto& [key, item] : value.entries) {
      result.push_back(key.get());
      result.push_back(item.get());
    }
    return result;
  };
  auto too_deep = [] {
    return base::detail::str("values are nested deeper than ", kMaxPickleDepth, " containers");
  };
  constexpr int kOpen = -1;
  std::unordered_map<const PyValue*, int> height;  // kOpen while its subtree is walked
  struct Frame {
    const PyValue* value;
    std::vector<const PyValue*> children;
    size_t next = 0;
    int height = 0;
  };
  std::vector<Frame> path;
  auto enter = [&](const PyValue* value) {
    height[value] = kOpen;
    path.push_back({value, children(*value)});
  };
  enter(&root);
  while (!path.empty()) {
    Frame& frame = path.back();
    if (frame.next == frame.children.size()) {
      height[frame.value] = frame.height + 1;
      const int done = frame.height + 1;
      path.pop_back();
      if (!path.empty()) path.back().height = std::max(path.back().height, done);
      continue;
    }
    const PyValue* child = frame.children[frame.next++];
    const auto known = height.find(child);
    if (known == height.end()) {
      if (path.size() >= static_cast<size_t>(kMaxPickleDepth)) {
        return too_deep();
      }
      enter(child);
    } else if (known->second == kOpen) {
      return "a " + child->type_name() + " contains itself";
    } else {
      frame.height = std::max(frame.height, known->second);
      if (path.size() + static_cast<size_t>(known->second) > static_cast<size_t>(kMaxPickleDepth)) {
        return too_deep();
      }
    }
  }
  return "";
}

}  // namespace ddp::formats::detail
