#include "flight_recorder/flight_recorder_process_group.hpp"

#include <chrono>
#include <iostream>

#include "collective_name.hpp"
#include "ddp/errors.hpp"
#include "ddp/flight_recorder.hpp"
#include "dtype_name.hpp"
#include "flight_recorder/ring.hpp"

namespace ddp::flight_recorder::detail {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::atomic<int32_t> groups_made{0};

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

// Prints the ring once per timed-out collective, to the rank's log.
void print_ring() {
  const Ring& ring = Ring::get();
  std::cerr << "ddp: " << format(ring.entries(), ring.rank()) << std::flush;
}

}  // namespace

void record_to_file_from_environment(const EnvironmentMap& env, int rank, int world_size) {
  auto found = env.find(kFileVariable);
  if (found == env.end() || found->second.empty()) {
    Ring::get().set_rank(rank, world_size);
    return;
  }
  Ring::get().map_to_file(found->second, rank, world_size);
}

FlightRecorderProcessGroup::FlightRecorderProcessGroup(std::shared_ptr<ProcessGroup> inner)
    : ProcessGroup(inner->topology(), inner->collective_timeout()),
      inner_(std::move(inner)),
      group_index_(groups_made.fetch_add(1)) {}

template <typename Issue>
Work FlightRecorderProcessGroup::record(std::string operation, const at::Tensor* tensor,
                                        Issue&& issue) {
  Entry entry;
  entry.sequence = issued_.fetch_add(1) + 1;
  entry.group = group_index_;
  entry.operation = std::move(operation);
  entry.name = ddp::detail::current_collective_name().value_or("");
  if (tensor) {
    entry.dtype = ddp::detail::dtypeName(tensor->scalar_type());
    entry.numel = tensor->numel();
    entry.bytes = tensor->numel() * static_cast<int64_t>(tensor->element_size());
  }
  entry.start_time = now_seconds();
  entry.state = State::kIssued;
  Ring& ring = Ring::get();
  const uint64_t ticket = ring.begin(entry);
  const double start = entry.start_time;
  auto observe = [ticket, start](const std::exception_ptr& error) {
    const State state = state_of(error);
    Ring::get().finish(ticket, state, now_seconds() - start);
    if (state == State::kTimedOut) print_ring();
  };
  Work work;
  try {
    work = issue();
  } catch (...) {
    observe(std::current_exception());
    throw;
  }
  return ddp::detail::observed(work, std::move(observe));
}

Work FlightRecorderProcessGroup::do_all_reduce(const at::Tensor& tensor, ReduceOp op) {
  return record(std::string("all_reduce(") + to_string(op) + ")", &tensor,
                [&] { return forward_all_reduce(*inner_, tensor, op); });
}

Work FlightRecorderProcessGroup::do_broadcast(const at::Tensor& tensor, int root) {
  return record("broadcast(root " + std::to_string(root) + ")", &tensor,
                [&] { return forward_broadcast(*inner_, tensor, root); });
}

Work FlightRecorderProcessGroup::do_all_gather(const at::Tensor& output, const at::Tensor& input) {
  return record("all_gather", &input, [&] { return forward_all_gather(*inner_, output, input); });
}

Work FlightRecorderProcessGroup::do_reduce_scatter(const at::Tensor& output,
                                                   const at::Tensor& input, ReduceOp op) {
  return record(std::string("reduce_scatter(") + to_string(op) + ")", &input,
                [&] { return forward_reduce_scatter(*inner_, output, input, op); });
}

Work FlightRecorderProcessGroup::do_barrier() {
  return record("barrier", nullptr, [&] { return forward_barrier(*inner_); });
}

}  // namespace ddp::flight_recorder::detail
