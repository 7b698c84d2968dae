// NodeBarrier in one process: threads play the ranks of a node over a
// control area allocated here. Every wait has a deadline, so no test can
// hang; time bounds are lower bounds (the barrier never gives up early) or
// generous upper bounds that hold on a loaded machine.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/shm/node_barrier.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::shm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Far beyond any scheduling delay of a loaded two-core machine; tests that
// must end early assert they end well before it.
constexpr milliseconds kBarrierDeadline{60000};

// The control area of one node: `size` rank lines and the wake word, zeroed
// and aligned as in the shared segment.
struct Node {
  explicit Node(int size) : size(size), ranks(new RankControl[size]), wake(new WakeWord) {
    for (int r = 0; r < size; ++r) {
      ranks[r].arrived.store(0);
      ranks[r].pid.store(0);
      ranks[r].pid_namespace.store(0);
      for (auto& stamp : ranks[r].stamps) {
        for (auto& word : stamp) word.store(0);
      }
    }
    wake->generation.store(0);
    wake->sleepers.store(0);
  }

  // Marks rank `r` as a live process of this pid namespace (this one).
  void set_live(int r) {
    ranks[r].pid.store(getpid());
    ranks[r].pid_namespace.store(current_pid_namespace());
  }

  NodeBarrier barrier(int rank, std::vector<int> global_ranks) {
    return NodeBarrier(ranks.get(), wake.get(), rank, std::move(global_ranks));
  }

  int size;
  std::unique_ptr<RankControl[]> ranks;
  std::unique_ptr<WakeWord> wake;
};

std::vector<int> identity(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

// A pid that was this process's child and has been reaped: no such process.
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  if (child < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  errno = 0;
  EXPECT_EQ(kill(child, 0), -1) << "pid " << child << " is still a process";
  EXPECT_EQ(errno, ESRCH) << "pid " << child;
  return child;
}

const auto kDescribe = [] { return std::string("all_reduce of 4 floats (test collective)"); };

// How an arrive_and_wait ended.
struct Outcome {
  std::string type = "returned";  // "returned", "TimeoutError", "CollectiveError", "other"
  std::string message;
  Clock::time_point ended;
};

// `timeout` is what the deadline came from, for the message.
Outcome arrive_and_wait(NodeBarrier& barrier, Clock::time_point deadline,
                        milliseconds timeout = milliseconds(0)) {
  Outcome outcome;
  try {
    barrier.arrive_and_wait(deadline, kDescribe, timeout);
  } catch (const TimeoutError& e) {
    outcome = {"TimeoutError", e.what(), {}};
  } catch (const CollectiveError& e) {
    outcome = {"CollectiveError", e.what(), {}};
  } catch (const std::exception& e) {
    outcome = {"other", e.what(), {}};
  }
  outcome.ended = Clock::now();
  return outcome;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ShmNodeBarrier, ControlAreaIsAligned) {
  Node node(3);
  for (int r = 0; r < node.size; ++r) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(&node.ranks[r]) % 128, 0u);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(node.wake.get()) % 128, 0u);
  EXPECT_NE(current_pid_namespace(), 0u);  // Linux with /proc: the inode of our pid namespace
}

// 4 ranks on 2 cores (so ranks sleep as well as spin) pass 300 barriers: no
// rank leaves barrier k before every rank has reached it, and all count 300.
TEST(ShmNodeBarrier, AllRanksPassInLockstep) {
  constexpr int kSize = 4;
  constexpr int kBarriers = 300;
  Node node(kSize);
  for (int r = 0; r < kSize; ++r) node.set_live(r);
  std::vector<std::atomic<int>> reached(kBarriers);
  for (auto& count : reached) count.store(0);
  std::vector<Outcome> failures(kSize);
  std::vector<int> early(kSize, 0);
  std::vector<uint64_t> counts(kSize, 0);
  const Clock::time_point deadline = Clock::now() + kBarrierDeadline;
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      NodeBarrier barrier = node.barrier(r, identity(kSize));
      for (int k = 0; k < kBarriers; ++k) {
        reached[k].fetch_add(1);
        Outcome outcome = arrive_and_wait(barrier, deadline);
        if (outcome.type != "returned") {
          failures[r] = outcome;
          return;
        }
        if (reached[k].load() != kSize) ++early[r];
      }
      counts[r] = barrier.count();
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(failures[r].type, "returned") << "rank " << r << ": " << failures[r].message;
    EXPECT_EQ(early[r], 0) << "rank " << r << " left barriers before every rank reached them";
    EXPECT_EQ(counts[r], static_cast<uint64_t>(kBarriers)) << "rank " << r;
    EXPECT_EQ(node.ranks[r].arrived.load(), static_cast<uint64_t>(kBarriers)) << "rank " << r;
  }
  EXPECT_EQ(node.wake->sleepers.load(), 0u);
}

// A rank that arrives 300 ms late holds the others at the barrier until then.
TEST(ShmNodeBarrier, WaitsForALateRank) {
  Node node(2);
  node.set_live(0);
  node.set_live(1);
  const Clock::time_point start = Clock::now();
  Outcome first;
  std::thread waiter([&] {
    NodeBarrier barrier = node.barrier(0, identity(2));
    first = arrive_and_wait(barrier, start + kBarrierDeadline);
  });
  std::this_thread::sleep_for(milliseconds(300));
  NodeBarrier late = node.barrier(1, identity(2));
  const Outcome second = arrive_and_wait(late, start + kBarrierDeadline);
  waiter.join();
  EXPECT_EQ(first.type, "returned") << first.message;
  EXPECT_EQ(second.type, "returned") << second.message;
  EXPECT_GE(first.ended - start, milliseconds(300));
}

// Ranks 0 and 2 of three (job ranks 10 and 12) wait for rank 1 (job rank
// 11), alive but never arriving: both time out at the deadline, not before,
// naming job rank 11 and the collective.
TEST(ShmNodeBarrier, MissingRankTimesOutNamingIt) {
  Node node(3);
  for (int r = 0; r < 3; ++r) node.set_live(r);
  const milliseconds timeout(1000);
  std::vector<Outcome> outcomes(3);
  std::vector<Clock::time_point> deadlines(3);
  std::vector<std::thread> threads;
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] {
      NodeBarrier barrier = node.barrier(r, {10, 11, 12});
      deadlines[r] = Clock::now() + timeout;
      outcomes[r] = arrive_and_wait(barrier, deadlines[r], timeout);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r : {0, 2}) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(outcomes[r].type, "TimeoutError") << outcomes[r].message;
    EXPECT_GE(outcomes[r].ended, deadlines[r]);
    EXPECT_LT(outcomes[r].ended - deadlines[r], kBarrierDeadline / 2);
    EXPECT_TRUE(contains(outcomes[r].message, kDescribe())) << outcomes[r].message;
    EXPECT_TRUE(
        contains(outcomes[r].message,
                 kDescribe() + " did not finish within 1000 ms: rank(s) 11 did not reach it"))
        << outcomes[r].message;
  }
}

// With three ranks missing, all three are listed in order.
TEST(ShmNodeBarrier, TimeoutListsEveryMissingRank) {
  Node node(4);
  for (int r = 0; r < 4; ++r) node.set_live(r);
  NodeBarrier barrier = node.barrier(0, {4, 5, 6, 7});
  const Clock::time_point deadline = Clock::now() + milliseconds(200);
  const Outcome outcome = arrive_and_wait(barrier, deadline, milliseconds(200));
  EXPECT_EQ(outcome.type, "TimeoutError") << outcome.message;
  EXPECT_GE(outcome.ended, deadline);
  EXPECT_TRUE(
      contains(outcome.message, "did not finish within 200 ms: rank(s) 5, 6, 7 did not reach it"))
      << outcome.message;
  EXPECT_TRUE(contains(outcome.message, kDescribe())) << outcome.message;
}

// A peer whose process is gone (same pid namespace) fails the others with
// CollectiveError naming it and its pid, long before the deadline.
TEST(ShmNodeBarrier, DeadRankFailsFast) {
  Node node(3);
  node.set_live(0);
  node.set_live(2);
  const pid_t dead = dead_pid();
  node.ranks[1].pid.store(dead);
  node.ranks[1].pid_namespace.store(current_pid_namespace());
  const Clock::time_point start = Clock::now();
  std::vector<Outcome> outcomes(3);
  std::vector<std::thread> threads;
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] {
      NodeBarrier barrier = node.barrier(r, {20, 21, 22});
      outcomes[r] = arrive_and_wait(barrier, start + kBarrierDeadline);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r : {0, 2}) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(outcomes[r].type, "CollectiveError") << outcomes[r].message;
    EXPECT_LT(outcomes[r].ended - start, kBarrierDeadline / 2);
    EXPECT_TRUE(contains(outcomes[r].message, kDescribe())) << outcomes[r].message;
    EXPECT_TRUE(contains(outcomes[r].message, "rank 21 (pid " + std::to_string(dead) + ")"))
        << outcomes[r].message;
  }
}

// A dead pid is only trusted within our pid namespace: a peer recorded in
// another namespace, with no pid, or a waiter whose own namespace is unknown
// (0) is covered by the deadline alone.
TEST(ShmNodeBarrier, DeadPidOutsideOurNamespaceWaitsForTheDeadline) {
  const pid_t dead = dead_pid();
  const uint64_t own = current_pid_namespace();
  struct Case {
    const char* name;
    int64_t peer_pid;
    uint64_t peer_namespace;
    uint64_t own_namespace;
  };
  for (const Case& c :
       {Case{"peer in another namespace", dead, own + 1, own},
        Case{"peer without a pid", 0, own, own}, Case{"own namespace unknown", dead, 0, 0}}) {
    SCOPED_TRACE(c.name);
    Node node(2);
    node.ranks[0].pid.store(getpid());
    node.ranks[0].pid_namespace.store(c.own_namespace);
    node.ranks[1].pid.store(c.peer_pid);
    node.ranks[1].pid_namespace.store(c.peer_namespace);
    NodeBarrier barrier = node.barrier(0, {0, 1});
    const Clock::time_point deadline = Clock::now() + milliseconds(200);
    const Outcome outcome = arrive_and_wait(barrier, deadline);
    EXPECT_EQ(outcome.type, "TimeoutError") << outcome.message;
    EXPECT_GE(outcome.ended, deadline);
    EXPECT_TRUE(contains(outcome.message, "rank(s) 1 did not reach it")) << outcome.message;
  }
}

}  // namespace
}  // namespace ddp::comm::shm
