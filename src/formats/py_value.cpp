#include "ddp/formats/py_value.hpp"

namespace ddp::formats {

// Note [A value tree freed without recursion]
PyValue::~PyValue() {
  if (items.empty() && entries.empty()) return;
  std::vector<PyRef> pending;
  auto take_children = [&pending](PyValue& value) {
    for (auto& item : value.items) pending.push_back(std::move(item));
    for (auto& [key, item] : value.entries) {
      pending.push_back(std::move(key));
      pending.push_back(std::move(item));
    }
    value.items.clear();
    value.entries.clear();
  };
  take_children(*this);
  while (!pending.empty()) {
    PyRef next = std::move(pending.back());
    pending.pop_back();
    // Only the last owner frees a value; its children then join the list,
    // and its own destructor finds it empty.
    if (next && next.use_count() == 1) take_children(*next);
  }
}

}  // namespace ddp::formats
