#include "comm/flight_recorder/entry_json.hpp"

#include <string>

namespace ddp::comm::flight_recorder::detail {

nlohmann::json entry_to_json(const Entry& e) {
  return {{"sequence", e.sequence},   {"group", e.group},
          {"operation", e.operation}, {"name", e.name},
          {"dtype", e.dtype},         {"numel", e.numel},
          {"bytes", e.bytes},         {"start_time", e.start_time},
          {"duration", e.duration},   {"state", to_string(e.state)}};
}

Entry entry_from_json(const nlohmann::json& json) {
  Entry e;
  if (!json.is_object()) return e;
  e.sequence = json.value("sequence", int64_t{0});
  e.group = json.value("group", 0);
  e.operation = json.value("operation", "");
  e.name = json.value("name", "");
  e.dtype = json.value("dtype", "");
  e.numel = json.value("numel", int64_t{0});
  e.bytes = json.value("bytes", int64_t{0});
  e.start_time = json.value("start_time", 0.0);
  e.duration = json.value("duration", 0.0);
  const std::string state = json.value("state", "");
  for (State s : {State::kIssued, State::kCompleted, State::kTimedOut, State::kFailed}) {
    if (state == to_string(s)) e.state = s;
  }
  return e;
}

}  // namespace ddp::comm::flight_recorder::detail
