#include "launch/spare_pool.hpp"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <filesystem>
#include <random>
#include <system_error>

#include "base/str.hpp"
#include "comm/store/store_value.hpp"
#include "comm/store/worker_protocol.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/error_file.hpp"
#include "launch/say.hpp"

namespace ddp::launch {
namespace {

// 8 hex digits: unique enough among one job's spares, short in a log line.
std::string new_spare_id() {
  static std::mt19937_64 engine{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string id;
  uint64_t bits = engine();
  for (int i = 0; i < 8; ++i, bits >>= 4) id += digits[bits & 15];
  return id;
}

int64_t milliseconds_between(std::chrono::steady_clock::time_point from,
                             std::chrono::steady_clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

}  // namespace

struct SparePool::Spare {
  std::string id;
  std::optional<ChildProcess> process;
  RankOutput output;
  std::string error_file;
  Clock::time_point started;
  std::optional<Clock::time_point> ready;
};

SparePool::SparePool(const LaunchPlan& plan, c10d::Store& store, std::string dir)
    : plan_(plan), store_(store), dir_(std::move(dir)) {}

SparePool::~SparePool() = default;  // a ChildProcess kills its group when destroyed

void SparePool::fill(const WorkerPlacement& base) {
  if (stopped_refilling_ || promoted_) return;
  while (static_cast<int>(spares_.size()) < plan_.spares) start_one(base);
}

void SparePool::start_one(const WorkerPlacement& base) {
  const std::string id = new_spare_id();
  WorkerPlacement placement = base;
  const std::string dir = base::detail::str(dir_, "/spare_", id);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw IoError("cannot create the directory " + dir + " for a hot spare's error file: " +
                  error.message() + "; check that TMPDIR (or --log-dir) is writable.");
  }
  placement.error_file = dir + "/error.json";
  placement.flight_recorder_file = dir + "/flight_recorder.bin";
  ChildSpec spec;
  spec.argv = plan_.argv;
  spec.env = spare_environment(plan_, placement, id);
  spec.unset_env = placing_variables();
  unsigned console = 0;  // the spare shows what local rank 0's settings show
  for (int stream = 0; stream < 2; ++stream) {
    if (!plan_.redirects.has(0, stream) || plan_.tee.has(0, stream)) console |= 1u << stream;
  }
  Spare& spare = spares_.emplace_back(Spare{id, std::nullopt, RankOutput("spare " + id, console),
                                            placement.error_file, Clock::now(), std::nullopt});
  spare.process.emplace(spec, /*separate_stderr=*/true);
  say(base::detail::str("started spare ", id, " (pid ", spare.process->pid(), ")"));
}

void SparePool::add_processes(std::vector<ChildProcess*>& processes) {
  for (auto& spare : spares_) processes.push_back(&*spare.process);
}

void SparePool::pump() {
  for (auto it = spares_.begin(); it != spares_.end();) {
    Spare& spare = *it;
    spare.process->pump([&](Stream s, std::string_view chunk) { spare.output.feed(s, chunk); });
    if (!spare.process->reap() || !spare.process->finished()) {
      ++it;
      continue;
    }
    spare.output.flush();
    if (released_ && spare.process->exit_code() == 0) {  // released, as asked
      it = spares_.erase(it);
      continue;
    }
    auto recorded = read_error_file(spare.error_file);
    say(base::detail::str("spare ", spare.id, " (pid ", spare.process->pid(), ") ended with ",
                          describe_exit(spare.process->exit_code(), spare.process->term_signal()),
                          " before it was needed",
                          recorded ? ": " + recorded->message : std::string()));
    if (!spare.ready && !stopped_refilling_) {
      stopped_refilling_ = true;
      say("starting no more spares: one ended before it was ready, so the program cannot wait "
          "as a spare (it must train inside ddp::elastic::run; see Note [A spare waits for a "
          "seat])");
    }
    it = spares_.erase(it);
  }
}

void SparePool::poll_store(const WorkerPlacement& base) {
  for (auto& spare : spares_) {
    if (spare.ready || !store_.check({comm::store::spare_ready_key(spare.id)})) continue;
    spare.ready = Clock::now();
    say(base::detail::str("spare ", spare.id, " (pid ", spare.process->pid(), ") ready after ",
                          milliseconds_between(spare.started, *spare.ready), " ms"));
  }
  if (promoted_ && (store_.check({comm::store::spare_running_key(*promoted_)}) ||
                    Clock::now() - promoted_at_ > std::chrono::seconds(10))) {
    promoted_.reset();
  }
  // A spare that ended on its own may have lost the store (its host's node
  // is gone): one round trip first, so that a lost store is the agent's
  // RendezvousError before any spare starts there.
  if (static_cast<int>(spares_.size()) < plan_.spares)
    store_.add(comm::store::generations_key(), 0);
  fill(base);
}

std::optional<PromotedSpare> SparePool::take(const std::map<std::string, std::string>& seat) {
  auto chosen = spares_.end();
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->process->exited()) continue;
    if (chosen == spares_.end() || (it->ready && (!chosen->ready || *it->ready < *chosen->ready))) {
      chosen = it;
    }
  }
  if (chosen == spares_.end()) return std::nullopt;
  store_.set(comm::store::spare_seat_key(chosen->id),
             comm::store::as_bytes(comm::store::encode_seat(seat)));
  chosen->output.flush();
  PromotedSpare promoted{std::move(*chosen->process), chosen->id, std::nullopt};
  if (chosen->ready) promoted.ready_for_ms = milliseconds_between(*chosen->ready, Clock::now());
  promoted_ = chosen->id;
  promoted_at_ = Clock::now();
  spares_.erase(chosen);
  return promoted;
}

void SparePool::release(std::chrono::milliseconds grace) {
  stopped_refilling_ = true;
  released_ = true;
  for (auto& spare : spares_) {
    try {
      store_.set(comm::store::spare_seat_key(spare.id),
                 comm::store::as_bytes(comm::store::kSpareRelease));
    } catch (const std::exception&) {  // the store is gone: stop_all below ends it
    }
  }
  // A released spare exits 0 by itself; one that fails meanwhile is named.
  const auto give_up = Clock::now() + grace;
  while (!spares_.empty() && Clock::now() < give_up) {
    std::vector<ChildProcess*> processes;
    add_processes(processes);
    wait_for_output(processes, std::chrono::milliseconds(20));
    pump();
  }
  std::vector<ChildProcess*> processes;
  add_processes(processes);
  stop_all(processes, std::chrono::milliseconds(0), [&](ChildProcess& p) {
    for (auto& spare : spares_) {
      if (&*spare.process == &p) {
        p.pump([&](Stream s, std::string_view chunk) { spare.output.feed(s, chunk); });
      }
    }
  });
  spares_.clear();
}

}  // namespace ddp::launch
