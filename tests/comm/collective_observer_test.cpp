// Collective observers on a real one-rank group: what they are told, in
// which order, and that a collective ends for them when its Work is waited
// on, not when the call that issued it returns.

#include "ddp/comm/collective_observer.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/observer_factory.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp {
namespace {

using std::chrono::milliseconds;

// "all_reduce(sum) float32 x4 16 B", "broadcast(root 0) int64 x3 24 B",
// "barrier".
std::string describe(const CollectiveFacts& facts) {
  std::string text = facts.name;
  if (facts.reduce_op) text += std::string("(") + to_string(*facts.reduce_op) + ")";
  if (facts.root >= 0) text += "(root " + std::to_string(facts.root) + ")";
  if (facts.dtype) {
    text += std::string(" ") + c10::toString(*facts.dtype) + " x" + std::to_string(facts.numel) +
            " " + std::to_string(facts.bytes) + " B";
  }
  return text;
}

// Writes "<label> started <facts>" and, for each end,
// "<label> finished <facts>: <how>" into a shared log.
class LoggingObserver final : public CollectiveObserver {
 public:
  struct Log {
    std::mutex mutex;
    std::vector<std::string> lines;
    std::vector<CollectiveOutcome> outcomes;

    void add(std::string line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(std::move(line));
    }
    std::vector<std::string> take() {
      std::lock_guard<std::mutex> lock(mutex);
      return std::exchange(lines, {});
    }
  };

  LoggingObserver(std::string label, std::shared_ptr<Log> log, bool follow = true)
      : label_(std::move(label)), log_(std::move(log)), follow_(follow) {}

  std::unique_ptr<ObservedCollective> on_started(const CollectiveFacts& facts) override {
    log_->add(label_ + " started " + describe(facts));
    if (!follow_) return nullptr;
    return std::make_unique<Follower>(label_, log_);
  }

 private:
  class Follower final : public ObservedCollective {
   public:
    Follower(std::string label, std::shared_ptr<Log> log)
        : label_(std::move(label)), log_(std::move(log)) {}
    void on_finished(const CollectiveFacts& facts,
                     const CollectiveOutcome& outcome) noexcept override {
      std::string how = !outcome.issued  ? "never issued"
                        : outcome.error  ? "failed"
                        : outcome.waited ? "completed"
                                         : "not waited on";
      log_->add(label_ + " finished " + describe(facts) + ": " + how);
      std::lock_guard<std::mutex> lock(log_->mutex);
      log_->outcomes.push_back(outcome);
    }

   private:
    std::string label_;
    std::shared_ptr<Log> log_;
  };

  std::string label_;
  std::shared_ptr<Log> log_;
  bool follow_;
};

TEST(CoreCollectiveObserver, HearsEachCollectiveStartAndEndWithItsFacts) {
  auto group = init(InitOptions(), EnvironmentMap{});
  auto log = std::make_shared<LoggingObserver::Log>();
  group->add_observer(std::make_shared<LoggingObserver>("o", log));
  group->all_reduce(at::ones({4}));
  group->broadcast(at::zeros({3}, at::kLong), 0);
  group->all_gather(at::zeros({2}, at::kDouble), at::ones({2}, at::kDouble));
  group->reduce_scatter(at::zeros({2}), at::ones({2}), ReduceOp::kMax);
  group->barrier();
  EXPECT_EQ(log->take(), (std::vector<std::string>{
                             "o started all_reduce(sum) Float x4 16 B",
                             "o finished all_reduce(sum) Float x4 16 B: completed",
                             "o started broadcast(root 0) Long x3 24 B",
                             "o finished broadcast(root 0) Long x3 24 B: completed",
                             "o started all_gather Double x2 16 B",
                             "o finished all_gather Double x2 16 B: completed",
                             "o started reduce_scatter(max) Float x2 8 B",
                             "o finished reduce_scatter(max) Float x2 8 B: completed",
                             "o started barrier",
                             "o finished barrier: completed",
                         }));
  for (const CollectiveOutcome& outcome : log->outcomes) {
    EXPECT_GE(outcome.duration.count(), 0);
    EXPECT_FALSE(outcome.error);
  }
}

// Note [When a collective ends]: at the first wait(), not at the return of
// the call that issued it, and at the destruction of a Work never waited on.
TEST(CoreCollectiveObserver, ACollectiveEndsWhenItsWorkIsWaitedOnOrDropped) {
  auto group = init(InitOptions(), EnvironmentMap{});
  auto log = std::make_shared<LoggingObserver::Log>();
  group->add_observer(std::make_shared<LoggingObserver>("o", log));
  Work first = group->all_reduce_async(at::ones({8}));
  Work second = group->broadcast_async(at::ones({1}), 0);
  EXPECT_EQ(log->take(), (std::vector<std::string>{"o started all_reduce(sum) Float x8 32 B",
                                                   "o started broadcast(root 0) Float x1 4 B"}));
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_TRUE(log->take().empty()) << "an end was reported before any wait()";
  second.wait();
  EXPECT_EQ(log->take(),
            (std::vector<std::string>{"o finished broadcast(root 0) Float x1 4 B: completed"}));
  first.wait();
  first.wait();  // a second wait ends nothing more
  EXPECT_EQ(log->take(),
            (std::vector<std::string>{"o finished all_reduce(sum) Float x8 32 B: completed"}));
  ASSERT_EQ(log->outcomes.size(), 2u);
  EXPECT_GE(log->outcomes[1].duration, milliseconds(30)) << "measured to the wait, after the sleep";
  { Work dropped = group->barrier_async(); }
  EXPECT_EQ(log->take(),
            (std::vector<std::string>{"o started barrier", "o finished barrier: not waited on"}));
  // A step chained with then() runs after the end was observed.
  Work chained = group->all_reduce_async(at::ones({1})).then([&] { log->add("then"); });
  chained.wait();
  EXPECT_EQ(log->take(), (std::vector<std::string>{
                             "o started all_reduce(sum) Float x1 4 B",
                             "o finished all_reduce(sum) Float x1 4 B: completed", "then"}));
}

TEST(CoreCollectiveObserver, ObserversStartInOrderAndEndInReverse) {
  auto group = init(InitOptions(), EnvironmentMap{});
  auto log = std::make_shared<LoggingObserver::Log>();
  group->add_observer(std::make_shared<LoggingObserver>("a", log));
  group->add_observer(std::make_shared<LoggingObserver>("quiet", log, /*follow=*/false));
  group->add_observer(std::make_shared<LoggingObserver>("b", log));
  group->barrier();
  EXPECT_EQ(log->take(), (std::vector<std::string>{
                             "a started barrier", "quiet started barrier", "b started barrier",
                             "b finished barrier: completed", "a finished barrier: completed"}));
  EXPECT_THROW(group->add_observer(nullptr), InvalidArgumentError);
}

// A group of one rank whose backend refuses every collective.
class RefusingGroup final : public ProcessGroup {
 public:
  explicit RefusingGroup(const ProcessGroup& like)
      : ProcessGroup(like.topology(), like.collective_timeout()) {}
  std::string backend_name() const override { return "refusing"; }
  int issued = 0;

 protected:
  Work do_all_reduce(const at::Tensor&, ReduceOp) override { return refuse(); }
  Work do_broadcast(const at::Tensor&, int) override { return refuse(); }
  Work do_all_gather(const at::Tensor&, const at::Tensor&) override { return refuse(); }
  Work do_reduce_scatter(const at::Tensor&, const at::Tensor&, ReduceOp) override {
    return refuse();
  }
  Work do_barrier() override { return refuse(); }

 private:
  Work refuse() {
    ++issued;
    throw CollectiveError("refusing: the backend is closed");
  }
};

class ThrowingObserver final : public CollectiveObserver {
 public:
  std::unique_ptr<ObservedCollective> on_started(const CollectiveFacts&) override {
    throw ConfigError("observer: cannot start");
  }
};

TEST(CoreCollectiveObserver, ACollectiveNeverIssuedEndsAtOnce) {
  auto group = std::make_shared<RefusingGroup>(*init(InitOptions(), EnvironmentMap{}));
  auto log = std::make_shared<LoggingObserver::Log>();
  group->add_observer(std::make_shared<LoggingObserver>("o", log));
  EXPECT_THROW(group->all_reduce(at::ones({2})), CollectiveError);
  EXPECT_EQ(group->issued, 1);
  EXPECT_EQ(log->take(), (std::vector<std::string>{"o started all_reduce(sum) Float x2 8 B",
                                                   "o finished all_reduce(sum) Float x2 8 B: "
                                                   "never issued"}));
  ASSERT_EQ(log->outcomes.size(), 1u);
  EXPECT_THROW(std::rethrow_exception(log->outcomes[0].error), CollectiveError);

  // An observer that throws fails the collective before the backend sees it.
  group->add_observer(std::make_shared<ThrowingObserver>());
  EXPECT_THROW(group->barrier(), ConfigError);
  EXPECT_EQ(group->issued, 1);
  EXPECT_EQ(log->take(),
            (std::vector<std::string>{"o started barrier", "o finished barrier: never issued"}));
}

TEST(CoreCollectiveObserver, RegisteredFactoriesObserveTheGroupsInitMakes) {
  auto log = std::make_shared<LoggingObserver::Log>();
  const size_t registered = registered_observer_factories().size();
  register_observer_factory(
      [log](ProcessGroup& group, const EnvironmentMap& env) -> std::shared_ptr<CollectiveObserver> {
        if (env.count("DDP_TEST_OBSERVE") == 0) return nullptr;
        return std::make_shared<LoggingObserver>("rank " + std::to_string(group.rank()), log);
      });
  EXPECT_EQ(registered_observer_factories().size(), registered + 1);
  EXPECT_THROW(register_observer_factory(nullptr), InvalidArgumentError);

  auto unobserved = init(InitOptions(), EnvironmentMap{});
  unobserved->barrier();
  EXPECT_TRUE(log->take().empty());
  auto observed = init(InitOptions(), EnvironmentMap{{"DDP_TEST_OBSERVE", "1"}});
  EXPECT_EQ(observed->observers().size(), unobserved->observers().size() + 1);
  observed->barrier();
  EXPECT_EQ(log->take(), (std::vector<std::string>{"rank 0 started barrier",
                                                   "rank 0 finished barrier: completed"}));
}

}  // namespace
}  // namespace ddp
