#include "comm/shm/serial_executor.hpp"

#include "ddp/base/errors.hpp"

namespace ddp::comm::shm {
namespace {

/// A Work completed by the executor's thread.
class ExecutorWork final : public c10d::Work {
 public:
  void complete(std::exception_ptr error) { finish(std::move(error)); }
};

}  // namespace

struct SerialExecutor::Item {
  std::function<void()> task;
  c10::intrusive_ptr<ExecutorWork> work;
};

SerialExecutor::SerialExecutor() : worker_([this] { run(); }) {}

SerialExecutor::~SerialExecutor() { stop(); }

void SerialExecutor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (worker_.joinable()) worker_.join();
}

base::compat::WorkPtr SerialExecutor::submit(std::function<void()> task) {
  auto work = c10::make_intrusive<ExecutorWork>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      work->complete(std::make_exception_ptr(
          CollectiveError("the process group is shutting down; no collective can start.")));
      return work;
    }
    queue_.push_back(Item{std::move(task), work});
  }
  ready_.notify_one();
  return work;
}

void SerialExecutor::run() {
  for (;;) {
    Item item;
    std::string failed_before;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      failed_before = first_failure_;
    }
    std::exception_ptr error;
    if (!failed_before.empty()) {
      error = std::make_exception_ptr(CollectiveError(
          "not started: an earlier collective of this process group failed (" + failed_before +
          "), and the ranks can no longer agree on what has been done. Recreate the process "
          "group (restart the job)."));
    } else {
      try {
        item.task();
      } catch (const std::exception& e) {
        error = std::current_exception();
        std::lock_guard<std::mutex> lock(mutex_);
        first_failure_ = e.what();
      }
    }
    // Note [A collective lets go of its tensors] (backends/gloo_backend.cpp):
    // the task's tensors go before wait() can return.
    item.task = nullptr;
    item.work->complete(error);
  }
}

}  // namespace ddp::comm::shm
