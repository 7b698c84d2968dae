#pragma once

// Reading a timeline file back and checking its events, for the timeline's
// worker and tests.

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::testing {

/// The file parsed as JSON (a discarded value when it is not valid JSON).
inline nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

/// The complete ("X") events of a trace, in file order.
inline std::vector<nlohmann::json> complete_events(const nlohmann::json& trace) {
  std::vector<nlohmann::json> events;
  if (!trace.is_array()) return events;
  for (const auto& event : trace) {
    if (event.value("ph", "") == "X") events.push_back(event);
  }
  return events;
}

/// How many complete events have a name starting with `prefix`.
inline int count_named(const std::vector<nlohmann::json>& events, const std::string& prefix) {
  int count = 0;
  for (const auto& event : events) {
    if (event.at("name").get<std::string>().rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

/// "" when no two events of one (pid, tid) lane overlap in time, else the
/// first pair's names.
inline std::string first_overlap(const std::vector<nlohmann::json>& events) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> lanes;
  std::map<std::pair<int, int>, std::vector<std::string>> names;
  for (const auto& event : events) {
    auto key = std::make_pair(event.at("pid").get<int>(), event.at("tid").get<int>());
    const double start = event.at("ts").get<double>();
    lanes[key].push_back({start, start + event.at("dur").get<double>()});
    names[key].push_back(event.at("name").get<std::string>());
  }
  for (auto& [key, spans] : lanes) {
    for (size_t i = 0; i < spans.size(); ++i) {
      for (size_t j = i + 1; j < spans.size(); ++j) {
        // Microsecond timestamps: touching ends are not an overlap.
        const bool overlap =
            spans[i].first < spans[j].second - 1 && spans[j].first < spans[i].second - 1;
        if (overlap) return names[key][i] + " and " + names[key][j];
      }
    }
  }
  return "";
}

/// The names of timeline_test_worker's checks of its own file (its
/// "record" scenario), each written only here: the worker reports them,
/// timeline_test.cpp expects them all (timeline_record_check_names()).
namespace timeline_check {
inline const std::string kStarted = "DDP_TIMELINE started the timeline";
inline const std::string kParsesWhileRecording = "the file parses as a JSON array while recording";
inline const std::string kOneEventPerCollective = "one event per collective";
inline const std::string kEventsWritten = "events_written() counts them";
inline const std::string kDdpBuckets = "one ddp.bucket event per DDP bucket reduced";
inline const std::string kFusionBuffers = "one fusion-buffer all-reduce per fused step";
inline const std::string kUnfused = "one all-reduce per gradient without fusion";
inline const std::string kBroadcastParameters =
    "broadcast_parameters: a fingerprint all-reduce and one broadcast, twice";
inline const std::string kBroadcastOptimizerState =
    "broadcast_optimizer_state: two agreements, the description (2) and the state (1), twice";
inline const std::string kNameScope = "a NameScope names";
inline const std::string kUnscoped = "collectives outside any scope are named by their operation";
inline const std::string kNoOverlap = "no two events overlap on a lane";
inline const std::string kEventFields = "every event has pid = rank, a wall-clock ts and dur >= 0";
inline const std::string kNeverWaited = "the one Work never waited on is marked waited=false";
inline const std::string kFirstEvent = "the first event describes a 1000-element float32 sum";
}  // namespace timeline_check

/// The names timeline_test_worker's "record" scenario reports on every rank.
inline std::set<std::string> timeline_record_check_names() {
  using namespace timeline_check;  // NOLINT(google-build-using-namespace)
  return {kStarted,
          kParsesWhileRecording,
          kOneEventPerCollective,
          kEventsWritten,
          kDdpBuckets,
          kFusionBuffers,
          kUnfused,
          kBroadcastParameters,
          kBroadcastOptimizerState,
          kNameScope,
          kUnscoped,
          kNoOverlap,
          kEventFields,
          kNeverWaited,
          kFirstEvent};
}

}  // namespace ddp::testing
