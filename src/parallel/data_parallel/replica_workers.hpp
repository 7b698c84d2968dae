#pragma once

// Internal: the threads that run DataParallel's replicas. They are started
// once and kept, so a step costs two hand-offs per replica, not a thread
// start.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ddp::parallel::detail {

class ReplicaWorkers {
 public:
  /// Starts `threads` workers (one per replica beyond the first).
  explicit ReplicaWorkers(size_t threads);
  /// Stops and joins the workers.
  ~ReplicaWorkers();
  ReplicaWorkers(const ReplicaWorkers&) = delete;
  ReplicaWorkers& operator=(const ReplicaWorkers&) = delete;

  /// Runs task(i) for every i < count: task(0) on the calling thread, task(i)
  /// on worker i - 1; returns when all have finished. If any threw, rethrows
  /// the exception of the lowest index (after all have finished).
  void run(size_t count, const std::function<void(size_t)>& task);

 private:
  void loop(size_t worker);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  size_t count_ = 0;
  size_t remaining_ = 0;
  const std::function<void(size_t)>* task_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ddp::parallel::detail
