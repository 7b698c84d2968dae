#pragma once

// Internal: runs collectives one after another on a thread of their own, in
// the order they were issued, and hands back a c10d::Work for each.

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "base/compat/torch_compat.hpp"

namespace ddp::comm::shm {

/// A FIFO of tasks drained by one worker thread. After a task fails, every
/// later task fails at once with a CollectiveError naming the first failure:
/// ranks that disagree about what has been done cannot safely go on.
class SerialExecutor {
 public:
  SerialExecutor();
  /// Calls stop().
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  /// Queues `task`; the returned Work completes when it has run (with its
  /// exception, if it threw).
  base::compat::WorkPtr submit(std::function<void()> task);

  /// Finishes the queued tasks, then stops the thread (idempotent). Owners
  /// call it before destroying what the tasks use.
  void stop();

 private:
  struct Item;
  void run();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::string first_failure_;
  std::thread worker_;
};

}  // namespace ddp::comm::shm
