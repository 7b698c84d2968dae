#include "ddp/comm/flight_recorder.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>

#include "base/str.hpp"
#include "comm/flight_recorder/flight_recorder_observer.hpp"
#include "comm/flight_recorder/ring.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::comm::flight_recorder {
namespace {

// "11:50:02.130" (UTC), as the ranks' logs print times.
std::string clock_time(double seconds) {
  const auto whole = static_cast<std::time_t>(std::floor(seconds));
  std::tm parts{};
  gmtime_r(&whole, &parts);
  char text[32];
  std::snprintf(text, sizeof(text), "%02d:%02d:%02d.%03d", parts.tm_hour, parts.tm_min,
                parts.tm_sec, static_cast<int>((seconds - std::floor(seconds)) * 1000));
  return text;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f s", seconds);
  return text;
}

}  // namespace

const char* to_string(State state) noexcept {
  switch (state) {
    case State::kIssued:
      return "issued";
    case State::kCompleted:
      return "completed";
    case State::kTimedOut:
      return "timed out";
    case State::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string Entry::describe() const {
  std::string text = base::detail::str("#", sequence, " ", operation);
  if (!name.empty()) text += " '" + name + "'";
  if (!dtype.empty()) {
    text += base::detail::str(" of ", numel, " ", dtype, " (", bytes, " B)");
  }
  return text;
}

std::string format(const std::vector<Entry>& entries, int rank) {
  std::string text = base::detail::str("flight recorder of rank ", rank, ": the last ",
                                       entries.size(), " collective(s), oldest first\n");
  for (const Entry& e : entries) {
    text += "  " + e.describe() + ", started " + clock_time(e.start_time) + " UTC, ";
    switch (e.state) {
      case State::kIssued:
        text += "issued, never finished";
        break;
      case State::kCompleted:
        text += "completed in " + seconds_text(e.duration);
        break;
      default:
        text += std::string(to_string(e.state)) + " after " + seconds_text(e.duration);
    }
    if (e.group != 0) text += base::detail::str(" (group ", e.group, ")");
    text += "\n";
  }
  return text;
}

std::vector<Entry> entries() { return detail::Ring::get().entries(); }

std::optional<Record> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return detail::parse_ring(bytes);
}

std::shared_ptr<ProcessGroup> recorded(std::shared_ptr<ProcessGroup> group) {
  if (!group) {
    throw InvalidArgumentError(
        "flight_recorder::recorded: the group is null; pass the group that ddp::init() or a "
        "backend returned.");
  }
  for (const auto& observer : group->observers()) {
    if (dynamic_cast<const detail::FlightRecorderObserver*>(observer.get())) return group;
  }
  group->add_observer(std::make_shared<detail::FlightRecorderObserver>());
  return group;
}

}  // namespace ddp::comm::flight_recorder
