#pragma once

// Internal: a worker's side of ddprun's recovery store (Note [Recovery in
// memory] in ddp/elastic/run.hpp): the generations a job's group meets in,
// and the seat a hot spare waits for (Note [A spare waits for a seat]).

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "ddp/comm/environment.hpp"

namespace c10d {
class Store;
}  // namespace c10d

namespace ddp::elastic::detail {

class Generations {
 public:
  /// Connects to DDP_RECOVERY_STORE (authenticated with the job's secret
  /// when DDP_JOB_SECRET_FILE is set) and starts at
  /// DDP_RECOVERY_GENERATION.
  /// \throws ConfigError for a malformed variable.
  Generations(const EnvironmentMap& env, std::chrono::milliseconds timeout);

  int current() const { return current_; }
  /// The newest generation the launcher started.
  int newest();

  /// How meet() ended.
  enum class Meeting {
    kMet,       // every rank is in: `met` is the generation's store
    kNewer,     // a newer generation started meanwhile: current() moved to it
    kJobEnded,  // the job's training ended in an older generation (finish())
  };

  /// Waits until all `world_size` ranks are in the current generation.
  /// \throws TimeoutError when the ranks do not all come within the timeout.
  Meeting meet(int rank, int world_size, c10::intrusive_ptr<c10d::Store>& met);

  /// Says that the job's training ended in the current generation, so that a
  /// generation started as it ended (a node joined then) does not wait for
  /// ranks that will never come.
  void finish();

  /// Waits for the launcher to start a generation after the current one;
  /// returns the new seat of the worker that had `rank` when the job
  /// re-formed at another layout, nullopt when it keeps its place. A lost
  /// store is followed to its new host through DDP_RECOVERY_STORE_FILE
  /// (Note [A new host] in launch/node_rendezvous.hpp).
  /// \throws TimeoutError when none comes within the timeout;
  ///   RendezvousError when the store is lost and no file says where it went.
  std::optional<std::map<std::string, std::string>> next(int rank);

  /// A hot spare's wait: says it is ready (its pid), then waits without a
  /// deadline of its own (its parent and the store bound it) for the agent
  /// to give it a seat. Returns the seat's variables, its generation
  /// becoming current(), or nullopt when the agent released the spare.
  std::optional<std::map<std::string, std::string>> hold_spare(const std::string& id);

  /// A promoted spare, once it has the group's state: the agent may start
  /// another spare now.
  void report_running(const std::string& id);

 private:
  void connect(const std::string& address);
  void reconnect(std::chrono::steady_clock::time_point give_up);

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::string secret_;
  std::string store_file_;  // DDP_RECOVERY_STORE_FILE; empty: the store never moves
  int moves_ = 0;           // the count the file had when the store was reached
  int current_ = 0;
};

}  // namespace ddp::elastic::detail
