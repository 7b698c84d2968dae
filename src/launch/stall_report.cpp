#include "launch/stall_report.hpp"

#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "base/str.hpp"
#include "comm/flight_recorder/entry_json.hpp"
#include "comm/store/store_value.hpp"

namespace ddp::launch {
namespace {

using flight_recorder::Entry;
using flight_recorder::State;

std::string plural_ranks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

// "(timed out after 1.502 s)", "(completed)", "(issued, never finished)".
std::string state_text(const Entry& e) {
  if (e.state == State::kCompleted) return "(completed)";
  if (e.state == State::kIssued) return "(issued, never finished)";
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3f s", e.duration);
  return std::string("(") + flight_recorder::to_string(e.state) + " after " + seconds + ")";
}

// What a collective is, without its number or state: ranks that disagree
// on this at the same number issued different collectives.
std::string what(const Entry& e) {
  return base::detail::str(e.operation, " ", e.dtype, " ", e.numel);
}

std::string without_number(const Entry& e) {
  const std::string text = e.describe();
  return text.substr(text.find(' ') + 1);
}

}  // namespace

std::optional<Entry> last_collective(const flight_recorder::Record& record) {
  if (record.entries.empty()) return std::nullopt;
  // The newest entry's group; its highest sequence (entries are oldest first).
  const int32_t group = record.entries.back().group;
  std::optional<Entry> last;
  for (const Entry& e : record.entries) {
    if (e.group == group && (!last || e.sequence >= last->sequence)) last = e;
  }
  return last;
}

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += base::detail::str(text.empty() ? "" : ", ", ranks[i]);
    if (j > i) text += base::detail::str(j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  return text;
}

std::string describe_stall(std::vector<RankPosition> ranks) {
  int64_t newest = 0;
  for (const auto& r : ranks) {
    if (r.last) newest = std::max(newest, r.last->sequence);
  }
  if (newest == 0) return "";
  // Ranks behind the newest collective, grouped by where they stopped.
  std::map<int64_t, std::vector<int>> behind;  // last sequence (0: none) -> ranks
  std::map<int64_t, Entry> behind_at;
  std::vector<int> at_newest;
  std::vector<int> unfinished;
  std::map<std::string, std::vector<int>> kinds;  // what the newest is, per rank
  std::map<std::string, Entry> kind_entry;
  for (const auto& r : ranks) {
    const int64_t sequence = r.last ? r.last->sequence : 0;
    if (sequence < newest) {
      behind[sequence].push_back(r.rank);
      if (r.last) behind_at.emplace(sequence, *r.last);
      continue;
    }
    at_newest.push_back(r.rank);
    if (r.last->state != State::kCompleted) unfinished.push_back(r.rank);
    kinds[what(*r.last)].push_back(r.rank);
    kind_entry.emplace(what(*r.last), *r.last);
  }
  if (kinds.size() > 1) {
    std::string text =
        base::detail::str("the ranks issued different collectives as #", newest, ":");
    for (const auto& [kind, who] : kinds) {
      text += " " + plural_ranks(who) + " " + without_number(kind_entry.at(kind)) + ";";
    }
    text.back() = '.';
    return text + " Every rank must issue the same collectives in the same order.";
  }
  // The waiting ranks agree on what the collective is; the one that timed
  // out tells best how long they waited (the others may have failed after it).
  Entry front = kind_entry.begin()->second;
  for (const auto& r : ranks) {
    if (r.last && r.last->sequence == newest && r.last->state == State::kTimedOut) {
      front = *r.last;
      break;
    }
  }
  if (!behind.empty()) {
    std::string text;
    for (const auto& [sequence, who] : behind) {
      if (!text.empty()) text += "; ";
      if (sequence == 0) {
        text += plural_ranks(who) + " issued no collective";
      } else {
        text += plural_ranks(who) + " stopped after collective " +
                behind_at.at(sequence).describe() + " " + state_text(behind_at.at(sequence));
      }
    }
    return text + " while " + plural_ranks(at_newest) + " " +
           (unfinished.empty() ? "had finished" : "waited in") + " collective " + front.describe() +
           " " + state_text(front);
  }
  if (unfinished.empty()) return "";
  std::string text = "every rank reached collective " + front.describe() + "; " +
                     plural_ranks(unfinished) + " did not finish it";
  if (unfinished.size() < at_newest.size()) {
    std::vector<int> finished;
    for (int r : at_newest) {
      if (std::find(unfinished.begin(), unfinished.end(), r) == unfinished.end()) {
        finished.push_back(r);
      }
    }
    text += ", " + plural_ranks(finished) + " did";
  }
  return text + ": the backend or the network between them stalled.";
}

std::string encode_position(const RankPosition& position) {
  nlohmann::json line = {{"rank", position.rank}};
  if (position.last) line["last"] = flight_recorder::detail::entry_to_json(*position.last);
  return line.dump();
}

std::optional<RankPosition> decode_position(const std::string& text) {
  const nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!line.is_object() || !line.contains("rank") || !line["rank"].is_number_integer()) {
    return std::nullopt;
  }
  RankPosition position;
  position.rank = line["rank"].get<int>();
  if (line.contains("last") && line["last"].is_object()) {
    position.last = flight_recorder::detail::entry_from_json(line["last"]);
  }
  return position;
}

std::vector<RankPosition> gather_positions(c10d::Store& store, std::vector<RankPosition> positions,
                                           const std::string& own_key,
                                           const std::vector<std::string>& other_keys,
                                           std::chrono::steady_clock::time_point give_up) {
  std::string local;
  for (const auto& position : positions) local += encode_position(position) + "\n";
  store.set(own_key, comm::store::as_bytes(local));
  for (const std::string& key : other_keys) {
    while (!store.check({key}) && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!store.check({key})) continue;
    std::istringstream lines(comm::store::as_text(store.get(key)));
    for (std::string line; std::getline(lines, line);) {
      if (auto position = decode_position(line)) positions.push_back(*position);
    }
  }
  return positions;
}

}  // namespace ddp::launch
