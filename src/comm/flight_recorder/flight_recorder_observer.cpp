#include "comm/flight_recorder/flight_recorder_observer.hpp"

#include <chrono>
#include <iostream>
#include <string>

#include "base/dtype_name.hpp"
#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "comm/flight_recorder/ring.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/flight_recorder.hpp"

namespace ddp::comm::flight_recorder::detail {
namespace {

std::atomic<int32_t> groups_made{0};

double seconds_since_epoch(std::chrono::system_clock::time_point time) {
  return std::chrono::duration<double>(time.time_since_epoch()).count();
}

State state_of(const std::exception_ptr& error) {
  if (!error) return State::kCompleted;
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError&) {
    return State::kTimedOut;
  } catch (...) {
    return State::kFailed;
  }
}

// "all_reduce(sum)", "broadcast(root 0)", "all_gather", ...
std::string operation_of(const CollectiveFacts& facts) {
  std::string operation = facts.name;
  if (facts.reduce_op) operation += std::string("(") + to_string(*facts.reduce_op) + ")";
  if (facts.root >= 0) operation += base::detail::str("(root ", facts.root, ")");
  return operation;
}

// Prints the ring once per timed-out collective, to the rank's log.
void print_ring() {
  const Ring& ring = Ring::get();
  std::cerr << "ddp: " << format(ring.entries(), ring.rank()) << std::flush;
}

// One collective's slot in the ring, completed by its end. A Work dropped
// without a wait leaves its collective issued, as no wait saw it finish.
class RingTicket final : public ObservedCollective {
 public:
  explicit RingTicket(uint64_t ticket) : ticket_(ticket) {}

  void on_finished(const CollectiveFacts&, const CollectiveOutcome& outcome) noexcept override {
    if (outcome.issued && !outcome.waited) return;
    const State state = state_of(outcome.error);
    Ring::get().finish(ticket_, state, std::chrono::duration<double>(outcome.duration).count());
    if (state != State::kTimedOut) return;
    try {
      print_ring();
    } catch (...) {  // the log is best effort; the wait throws the timeout anyway
    }
  }

 private:
  uint64_t ticket_;
};

}  // namespace

void record_to_file_from_environment(const EnvironmentMap& env, int rank, int world_size) {
  auto found = env.find(kFileVariable);
  if (found == env.end() || found->second.empty()) {
    Ring::get().set_rank(rank, world_size);
    return;
  }
  Ring::get().map_to_file(found->second, rank, world_size);
}

FlightRecorderObserver::FlightRecorderObserver() : group_index_(groups_made.fetch_add(1)) {}

std::unique_ptr<ObservedCollective> FlightRecorderObserver::on_started(
    const CollectiveFacts& facts) {
  Entry entry;
  entry.sequence = issued_.fetch_add(1) + 1;
  entry.group = group_index_;
  entry.operation = operation_of(facts);
  entry.name = ddp::comm::detail::current_collective_name().value_or("");
  if (facts.dtype) {
    entry.dtype = ddp::base::detail::dtype_name(*facts.dtype);
    entry.numel = facts.numel;
    entry.bytes = facts.bytes;
  }
  entry.start_time = seconds_since_epoch(facts.start_time);
  entry.state = State::kIssued;
  return std::make_unique<RingTicket>(Ring::get().begin(entry));
}

}  // namespace ddp::comm::flight_recorder::detail
