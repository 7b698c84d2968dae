#include "ddp/hvd/runtime.hpp"

#include <mutex>
#include <string>

#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::hvd {
namespace {

std::mutex& mutex() {
  static std::mutex instance;
  return instance;
}

std::shared_ptr<ProcessGroup>& default_group() {
  static std::shared_ptr<ProcessGroup> group;
  return group;
}

}  // namespace

std::shared_ptr<ProcessGroup> init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(mutex());
  if (!default_group()) default_group() = ddp::init(options);
  return default_group();
}

void init(std::shared_ptr<ProcessGroup> group) {
  if (!group) {
    throw ConfigError(
        "hvd::init: the process group is null; pass the group returned by "
        "ddp::init(), or call hvd::init() without arguments.");
  }
  std::lock_guard<std::mutex> lock(mutex());
  default_group() = std::move(group);
}

void shutdown() {
  std::lock_guard<std::mutex> lock(mutex());
  default_group().reset();
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(mutex());
  return default_group() != nullptr;
}

std::shared_ptr<ProcessGroup> process_group() {
  return detail::group_or_default(nullptr, "hvd::process_group()");
}

int rank() { return process_group()->rank(); }

int size() { return process_group()->size(); }

int local_rank() { return process_group()->topology().local_rank; }

int local_size() { return process_group()->topology().local_world_size; }

namespace detail {

std::shared_ptr<ProcessGroup> group_or_default(std::shared_ptr<ProcessGroup> group,
                                               const char* who) {
  if (group) return group;
  std::lock_guard<std::mutex> lock(mutex());
  if (!default_group()) {
    throw ConfigError(std::string(who) +
                      " needs a process group, and hvd::init() has not been "
                      "called: call ddp::hvd::init() at start-up, or pass a group explicitly.");
  }
  return default_group();
}

}  // namespace detail
}  // namespace ddp::hvd
