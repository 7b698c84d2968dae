// SerialExecutor in one process: order, thread, completion, failures and
// shutdown. Every wait has a timeout, so a broken executor fails the test
// instead of hanging it.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/shm/serial_executor.hpp"
#include "common/error_capture.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::shm {
namespace {

using ddp::testing::error_of;

using std::chrono::milliseconds;

// Far beyond any scheduling delay of a loaded two-core machine.
constexpr milliseconds kGateDeadline{60000};

// A gate that tasks wait at (at most kGateDeadline) until the test opens it.
class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  bool wait_open() {
    std::unique_lock<std::mutex> lock(mutex_);
    return opened_.wait_for(lock, kGateDeadline, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

TEST(ShmSerialExecutor, RunsTasksInOrderOnOneOtherThread) {
  SerialExecutor executor;
  constexpr int kTasks = 200;
  std::vector<int> ran;  // touched by the executor's thread only, until wait()
  std::vector<std::thread::id> threads;
  std::vector<base::compat::WorkPtr> works;
  for (int i = 0; i < kTasks; ++i) {
    works.push_back(executor.submit([&, i] {
      ran.push_back(i);
      threads.push_back(std::this_thread::get_id());
    }));
  }
  for (auto& work : works) EXPECT_TRUE(work->wait(kGateDeadline));
  ASSERT_EQ(ran.size(), static_cast<size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) EXPECT_EQ(ran[i], i);
  for (const auto& id : threads) {
    EXPECT_EQ(id, threads.front());
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(ShmSerialExecutor, WorkCompletesAfterItsTask) {
  SerialExecutor executor;
  Gate gate;
  std::atomic<bool> finished{false};
  base::compat::WorkPtr work = executor.submit([&] {
    gate.wait_open();
    finished = true;
  });
  base::compat::WorkPtr next = executor.submit([] {});
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(work->isCompleted());
  EXPECT_FALSE(next->isCompleted());  // queued behind the blocked task
  gate.open();
  EXPECT_TRUE(work->wait(kGateDeadline));
  EXPECT_TRUE(finished.load());
  EXPECT_TRUE(work->isCompleted());
  EXPECT_TRUE(next->wait(kGateDeadline));
}

TEST(ShmSerialExecutor, FailedTaskRethrowsItsException) {
  {
    SerialExecutor executor;
    auto work = executor.submit([] { throw TimeoutError("all_reduce timed out (test)"); });
    EXPECT_EQ(error_of<TimeoutError>([&] { work->wait(kGateDeadline); }),
              "all_reduce timed out (test)");
  }
  {
    SerialExecutor executor;
    auto work = executor.submit([] { throw InvalidArgumentError("bad root (test)"); });
    EXPECT_EQ(error_of<InvalidArgumentError>([&] { work->wait(kGateDeadline); }),
              "bad root (test)");
  }
  {
    SerialExecutor executor;
    auto work = executor.submit([] { throw std::out_of_range("index 7 (test)"); });
    EXPECT_EQ(error_of<std::out_of_range>([&] { work->wait(kGateDeadline); }), "index 7 (test)");
  }
}

// After a failure, later tasks do not run: each fails at once with a
// CollectiveError naming the first failure (not a later one).
TEST(ShmSerialExecutor, LaterTasksFailAfterAFailure) {
  SerialExecutor executor;
  auto before = executor.submit([] {});
  auto failed = executor.submit([] { throw TimeoutError("broadcast timed out: rank(s) 3"); });
  std::atomic<int> later_ran{0};
  std::vector<base::compat::WorkPtr> later;
  for (int i = 0; i < 3; ++i) later.push_back(executor.submit([&] { ++later_ran; }));
  EXPECT_NO_THROW(before->wait(kGateDeadline));
  EXPECT_EQ(error_of<TimeoutError>([&] { failed->wait(kGateDeadline); }),
            "broadcast timed out: rank(s) 3");
  for (auto& work : later) {
    const std::string message = error_of<CollectiveError>([&] { work->wait(kGateDeadline); });
    EXPECT_NE(message.find("an earlier collective of this process group failed "
                           "(broadcast timed out: rank(s) 3)"),
              std::string::npos)
        << message;
  }
  // Submitted after the failure was recorded: same error, still not run.
  auto after = executor.submit([&] { ++later_ran; });
  EXPECT_NE(error_of<CollectiveError>([&] {
              after->wait(kGateDeadline);
            }).find("(broadcast timed out: rank(s) 3)"),
            std::string::npos);
  EXPECT_EQ(later_ran.load(), 0);
}

// stop() runs what is queued, then returns; again, it returns at once; a
// task submitted afterwards fails with CollectiveError and never runs.
TEST(ShmSerialExecutor, StopFinishesQueuedTasksAndIsIdempotent) {
  SerialExecutor executor;
  std::atomic<int> ran{0};
  std::vector<base::compat::WorkPtr> works;
  works.push_back(executor.submit([&] {
    std::this_thread::sleep_for(milliseconds(100));
    ++ran;
  }));
  for (int i = 0; i < 20; ++i) works.push_back(executor.submit([&] { ++ran; }));
  executor.stop();
  EXPECT_EQ(ran.load(), 21);
  for (auto& work : works) EXPECT_TRUE(work->isCompleted());
  executor.stop();
  EXPECT_EQ(ran.load(), 21);
  auto late = executor.submit([&] { ++ran; });
  EXPECT_TRUE(late->isCompleted());
  EXPECT_NE(error_of<CollectiveError>([&] { late->wait(kGateDeadline); }).find("shutting down"),
            std::string::npos);
  EXPECT_EQ(ran.load(), 21);
}

// Destroying an executor with queued tasks finishes them and returns (run on
// a helper thread, so that a hang fails the test instead of blocking it).
TEST(ShmSerialExecutor, DestructionWithQueuedTasksDoesNotHang) {
  auto ran = std::make_shared<std::atomic<int>>(0);
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> destroyed = done->get_future();
  std::thread owner([ran, done] {
    {
      SerialExecutor executor;
      executor.submit([ran] {
        std::this_thread::sleep_for(milliseconds(100));
        ++*ran;
      });
      for (int i = 0; i < 20; ++i) executor.submit([ran] { ++*ran; });
    }
    done->set_value();
  });
  if (destroyed.wait_for(kGateDeadline) != std::future_status::ready) {
    owner.detach();  // leaks the executor; the test has failed anyway
    FAIL() << "~SerialExecutor did not return within " << kGateDeadline.count() << " ms";
  }
  owner.join();
  EXPECT_EQ(ran->load(), 21);
}

}  // namespace
}  // namespace ddp::comm::shm
