#include "snapshot/background_writer.hpp"

#include <stdexcept>
#include <utility>

namespace ddp::snapshot::detail {

BackgroundWriter::~BackgroundWriter() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return all_done_; });
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BackgroundWriter::ready() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void BackgroundWriter::start(Task shard, Task main) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!all_done_) {
      throw std::logic_error(
          "BackgroundWriter::start: a write is still in flight; wait_all() for it first");
    }
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    shard_ = std::move(shard);
    main_ = std::move(main);
    queued_ = true;
    shard_done_ = all_done_ = abandoned_ = false;
    shard_failure_ = failure_ = nullptr;
  }
  changed_.notify_all();
}

std::exception_ptr BackgroundWriter::wait_shard() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return shard_done_; });
  return shard_failure_;
}

std::exception_ptr BackgroundWriter::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return all_done_; });
  return failure_;
}

bool BackgroundWriter::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !all_done_;
}

void BackgroundWriter::abandon() {
  std::lock_guard<std::mutex> lock(mutex_);
  abandoned_ = true;
}

bool BackgroundWriter::abandoned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return abandoned_;
}

void BackgroundWriter::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return queued_ || stopping_; });
    if (!queued_) return;  // stopping, nothing in flight
    Task shard = std::move(shard_), main = std::move(main_);
    queued_ = false;
    lock.unlock();
    std::exception_ptr failure;
    if (shard) {
      try {
        shard();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    lock.lock();
    shard_failure_ = failure;
    shard_done_ = true;
    changed_.notify_all();
    lock.unlock();
    if (main && !failure) {
      try {
        main();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    shard = nullptr;  // the staged tensors' handles go before the write counts as done
    main = nullptr;
    lock.lock();
    failure_ = failure;
    all_done_ = true;
    changed_.notify_all();
  }
}

}  // namespace ddp::snapshot::detail
