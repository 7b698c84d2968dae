#pragma once

// Internal: the one background thread of a SnapshotManager's asynchronous
// saves (Note [An asynchronous save] in ddp/snapshot/snapshot_manager.hpp).
// It runs one save at a time, in two parts: this rank's shard file, then
// (rank 0) the main file; the training thread waits for either part. The
// thread runs no collective: what the ranks must agree on is settled on
// the training thread.

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace ddp::snapshot::detail {

/// A thread that runs one write at a time and keeps its outcome.
class BackgroundWriter {
 public:
  /// A part of a write; it reports failure by throwing.
  using Task = std::function<void()>;

  BackgroundWriter() = default;
  /// Waits for the write in flight, then stops the thread. Never throws.
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  /// Starts the thread if it is not running, so that start() cannot fail
  /// for want of one. \throws std::system_error when none can be started.
  void ready();

  /// Runs `shard`, then `main` unless `shard` threw, on the thread; either
  /// may be empty. \throws std::logic_error while a write is in flight
  ///   (wait_all() first: one write at a time).
  void start(Task shard, Task main);

  /// Waits until the shard part is done; returns its failure or null.
  std::exception_ptr wait_shard();

  /// Waits until the write is done; returns its first failure or null
  /// (null too when nothing was started).
  std::exception_ptr wait_all();

  /// Whether a write is in flight.
  bool busy() const;

  /// Asks the write in flight to give up; the main part polls abandoned().
  void abandon();
  /// Whether abandon() was called since the write started.
  bool abandoned() const;

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  Task shard_, main_;
  bool queued_ = false, shard_done_ = true, all_done_ = true, abandoned_ = false, stopping_ = false;
  std::exception_ptr shard_failure_, failure_;
  std::thread thread_;
};

}  // namespace ddp::snapshot::detail
