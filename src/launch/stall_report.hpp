#pragma once

// Internal: what ddprun says about a failed job from its ranks' flight
// recorders (ddp/comm/flight_recorder.hpp).
//
// Note [Reading a stall]
// All ranks issue the same collectives in the same order, so the n-th
// collective of one rank's group is the n-th of every other's. When a job
// fails, ddprun reads each rank's last recorded collective and compares:
//   - ranks whose last collective is older than the newest any rank issued
//     stopped before it (a hang in their own code, a crash, a SIGSTOP),
//     while the ranks at the newest waited in it:
//       "rank 1 stopped after collective #5 broadcast(root 0) of 4 float32
//        (16 B) (completed) while ranks 0, 2 waited in collective #6
//        all_reduce(sum) of 1 int64 (8 B) (timed out after 1.502 s)";
//   - when every rank reached the newest but they disagree on what it is,
//     the ranks issued different collectives, and the report names each;
//   - when every rank reached the same collective and some did not finish
//     it, the stall is inside the backend or the network;
//   - when every rank finished its last collective, or none issued one,
//     the failure was not a collective's, and there is nothing to say.
// A rank with no file (it never started ddp) counts as having issued none.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ddp/comm/flight_recorder.hpp"

namespace c10d {
class Store;
}

namespace ddp::launch {

/// One rank's last recorded collective (nullopt: it recorded none).
struct RankPosition {
  int rank = 0;
  std::optional<flight_recorder::Entry> last;
};

/// The last collective of the newest group in `record`, if any.
std::optional<flight_recorder::Entry> last_collective(const flight_recorder::Record& record);

/// One sentence on where the ranks stopped (Note [Reading a stall]), or ""
/// when there is nothing to say.
std::string describe_stall(std::vector<RankPosition> ranks);

/// "0, 2, 5-9": ranks as a short list (sorted, runs as ranges).
std::string rank_list(std::vector<int> ranks);

/// The same position as one line of text, for the agents' store, and back.
std::string encode_position(const RankPosition& position);
std::optional<RankPosition> decode_position(const std::string& line);

/// Publishes this node's `positions` at `own_key` of the agents' `store`,
/// reads every other node's from `other_keys`, waiting for each until
/// `give_up` (a node that does not answer by then is left out, its ranks
/// unknown rather than idle), and returns them all.
std::vector<RankPosition> gather_positions(c10d::Store& store, std::vector<RankPosition> positions,
                                           const std::string& own_key,
                                           const std::vector<std::string>& other_keys,
                                           std::chrono::steady_clock::time_point give_up);

}  // namespace ddp::launch
