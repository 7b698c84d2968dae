#include "parallel/data_parallel/replica_workers.hpp"

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::parallel::detail {

ReplicaWorkers::ReplicaWorkers(size_t threads) {
  for (size_t worker = 0; worker < threads; ++worker) {
    threads_.emplace_back([this, worker] { loop(worker); });
  }
}

ReplicaWorkers::~ReplicaWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ReplicaWorkers::run(size_t count, const std::function<void(size_t)>& task) {
  if (count > threads_.size() + 1) {
    throw InvalidArgumentError(base::detail::str(
        "DataParallel: ", count, " replicas to run but only ", threads_.size() + 1, " threads."));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count_ = count;
    remaining_ = count > 0 ? count - 1 : 0;
    task_ = &task;
    errors_.assign(count, nullptr);
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr first;
  if (count > 0) {
    try {
      task(0);
    } catch (...) {
      first = std::current_exception();
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return remaining_ == 0; });
  task_ = nullptr;
  if (first) std::rethrow_exception(first);
  for (auto& error : errors_) {
    if (error) std::rethrow_exception(error);
  }
}

void ReplicaWorkers::loop(size_t worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    const size_t index = worker + 1;
    if (index >= count_) continue;
    const std::function<void(size_t)>* task = task_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*task)(index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    errors_[index] = error;
    if (--remaining_ == 0) done_.notify_one();
  }
}

}  // namespace ddp::parallel::detail
