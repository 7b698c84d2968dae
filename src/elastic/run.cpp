#include "ddp/elastic/run.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/elastic/membership_change.hpp"
#include "elastic/generations.hpp"
#include "elastic/membership_watch.hpp"

namespace ddp::elastic {
namespace {

using Clock = std::chrono::steady_clock;

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

int64_t milliseconds(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// A seat's variables become the process's own, in `env` and in its
// environment (code that reads a variable later, such as the error file's
// RANK, sees the seat). No thread of ddp's runs here: the group is gone.
void take_seat(const std::map<std::string, std::string>& seat, EnvironmentMap& env) {
  for (const auto& [name, value] : seat) {
    env[name] = value;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
}

// A process the job did not need (a released spare, a worker of a
// generation that started as the training ended) ends here, with exit 0:
// the code after run() belongs to a worker that trained.
[[noreturn]] void end_unneeded() {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(0);
}

// Note [A spare waits for a seat]: a hot spare waits here until the agent
// gives it a lost worker's variables, which it then takes for its own, in
// `env` and in the process's environment (code that reads a variable
// later, such as the error file's RANK, sees the seat).
void take_seat_or_exit(detail::Generations& generations, const std::string& id,
                       EnvironmentMap& env) {
  const auto began = Clock::now();
  std::optional<std::map<std::string, std::string>> seat;
  try {
    seat = generations.hold_spare(id);
  } catch (const RendezvousError& e) {  // its node's agent starts new spares where it went
    std::cerr << "ddp: spare " << id << ": " << first_line(e.what())
              << " This spare, which held no rank, ends." << std::endl;
    end_unneeded();
  }
  if (!seat) end_unneeded();
  take_seat(*seat, env);
  env.erase(kSpareVariable);
  ::unsetenv(kSpareVariable);
  std::cerr << "ddp: spare " << id << " takes rank " << env["RANK"] << " of " << env["WORLD_SIZE"]
            << " in generation " << generations.current() << " (it waited "
            << milliseconds(Clock::now() - began) << " ms)" << std::endl;
}

// Note [A node joins in memory]: a generation that starts as this one's
// training ends finds the mark and its workers end (end_unneeded). A lost
// store here loses only that courtesy: the training is done.
void mark_finished(detail::Generations& generations) {
  try {
    generations.finish();
  } catch (const Error&) {
  }
}

}  // namespace

void run(State& state, const TrainFunction& train, const RunOptions& options) {
  run(state, train, options, capture_environment());
}

bool is_spare() { return capture_environment().count(kSpareVariable) != 0; }

void run(State& state, const TrainFunction& train, const RunOptions& options,
         const EnvironmentMap& given) {
  if (given.count(kRecoveryStoreVariable) == 0) {  // one generation: no recovery
    train(init(options.init(), given));
    return;
  }
  EnvironmentMap env = given;
  detail::Generations generations(env, options.rejoin_timeout());
  auto spare = env.find(kSpareVariable);
  std::string spare_id = spare == env.end() ? "" : spare->second;
  if (!spare_id.empty()) take_seat_or_exit(generations, spare_id, env);
  Topology topology = resolve_topology(env);
  std::optional<Clock::time_point> failed_at;
  std::string who = base::detail::str("ddp: rank ", topology.rank, ": ");
  while (true) {
    c10::intrusive_ptr<c10d::Store> store;  // a timeout here ends the worker
    const auto meeting = generations.meet(topology.rank, topology.world_size, store);
    if (meeting == detail::Generations::Meeting::kNewer) continue;
    if (meeting == detail::Generations::Meeting::kJobEnded) {
      std::cerr << who << "the job's training ended before generation " << generations.current()
                << " met; this worker has nothing to train and ends" << std::endl;
      end_unneeded();
    }
    std::shared_ptr<ProcessGroup> group;
    try {
      group = init(
          InitOptions(options.init()).store(store).rendezvous_timeout(options.rejoin_timeout()),
          env);
      const std::optional<int> sender = state.sync(*group);
      if (generations.current() > 0) {  // a replacement, or a survivor
        std::cerr << who << "generation " << generations.current() << ": "
                  << (sender ? base::detail::str("continuing from commit ", state.commits(),
                                                 " of rank ", *sender)
                             : std::string("no rank had committed; starting over"))
                  << (failed_at ? base::detail::str(" (", milliseconds(Clock::now() - *failed_at),
                                                    " ms after the failure)")
                                : std::string())
                  << std::endl;
      }
      if (!spare_id.empty()) {  // a promoted spare: the agent may start another
        generations.report_running(spare_id);
        spare_id.clear();
      }
      {
        const detail::MembershipWatch watch(state, *group, generations);
        train(group);
      }
      if (group->rank() == 0) mark_finished(generations);
      return;
    } catch (const MembershipChange& change) {
      std::cerr << who << change.what() << std::endl;
    } catch (const Error& e) {
      const bool lost_peer = dynamic_cast<const CollectiveError*>(&e) ||
                             dynamic_cast<const TimeoutError*>(&e) ||
                             dynamic_cast<const RendezvousError*>(&e);
      if (!lost_peer) throw;
      failed_at = Clock::now();
      std::cerr << who << "generation " << generations.current()
                << " lost a peer: " << first_line(e.what())
                << "; waiting for the launcher's next generation (recovery in memory)" << std::endl;
    }
    group.reset();
    // Note [A new host]: the job may re-form at another size, this worker
    // kept, at a rank of the new layout.
    if (auto seat = generations.next(topology.rank)) {
      const Topology before = topology;
      take_seat(*seat, env);
      topology = resolve_topology(env);
      who = base::detail::str("ddp: rank ", topology.rank, ": ");
      std::cerr << who << "generation " << generations.current() << ": re-formed at "
                << topology.world_size << " ranks (was rank " << before.rank << " of "
                << before.world_size << ")" << std::endl;
    }
  }
}

}  // namespace ddp::elastic
