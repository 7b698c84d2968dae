#pragma once

// Internal: the contract between ddprun and the processes it starts, named
// once (as c10d's TCPStore names its wire protocol in one QueryType enum).
// The launcher (ddp::launch) writes it and ddp::elastic and init() read it;
// both sit above comm, so it lives here.
//
// Note [The launcher's protocol]
// Three channels carry it:
//   1. the worker's environment: the variables below (their meaning is
//      documented beside their definitions in ddp/comm/environment.hpp,
//      which users read, and comm/store/job_secret.hpp);
//   2. the recovery store (`ddprun --recovery memory`), its keys built by
//      the functions of "The recovery store" below; and the store file
//      (DDP_RECOVERY_STORE_FILE) naming where that store is now;
//   3. the agents' store, where the nodes' launchers meet (the keys of
//      "The agents' store"); no worker reads it.
// A key or a variable is spelled only here; every reader and writer calls
// these names (tests/launch/worker_protocol_test.cpp checks that the keys are
// distinct and that the store file reads back as written).

#include <map>
#include <optional>
#include <string>

#include "comm/store/job_secret.hpp"
#include "ddp/comm/environment.hpp"

namespace ddp::comm::store {

// --- 1. The worker's environment.

using comm::kRecoveryGenerationVariable;
using comm::kRecoveryStoreFileVariable;
using comm::kRecoveryStoreVariable;
using comm::kSpareVariable;
/// The agents' rendezvous round the worker was started in (0, then one more
/// each time the nodes re-formed); read by the tests' workers.
inline constexpr const char* kRendezvousRoundVariable = "DDP_RENDEZVOUS_ROUND";

// --- 2. The recovery store.

/// A counter: the newest generation of the job's group.
std::string generations_key();
/// Set by the generation whose training ended (its generation number).
std::string finished_key();
/// The prefix under which generation `generation`'s group meets.
std::string generation_prefix(int generation);
/// "ddp/generation/<g>/seat/<rank>": a running worker's new place when the
/// job re-forms at another size in memory (Note [A new host] in
/// launch/node_rendezvous.hpp), keyed by the rank it had; set before
/// generation g starts.
std::string reseat_key(int generation, int rank);
/// A hot spare's pid, set once it waits (LibTorch loaded, the program's
/// set-up done; Note [A spare waits for a seat] in ddp/elastic/run.hpp).
std::string spare_ready_key(const std::string& id);
/// Set by the agent: the spare's worker variables (encode_seat()), or
/// kSpareRelease at the job's end.
std::string spare_seat_key(const std::string& id);
/// The generation, set by a promoted spare once it has the group's state
/// (the agent then starts another spare).
std::string spare_running_key(const std::string& id);

/// The value of a spare's seat key that ends it: the job needs no more
/// spares.
inline constexpr const char* kSpareRelease = "release";

/// A seat's variables as the store keeps them, one VAR=VALUE per line.
std::string encode_seat(const std::map<std::string, std::string>& variables);
/// The variables of encode_seat()'s text (lines without '=' are skipped).
std::map<std::string, std::string> decode_seat(const std::string& text);

/// The store file's content: how many times the launcher named a store
/// (1 for the first), and the store's HOST:PORT.
struct StoreFileEntry {
  int count = 0;
  std::string address;
};

/// The store file's text, "<count> HOST:PORT\n".
std::string format_store_file(const StoreFileEntry& entry);
/// Writes `entry` to `path`, through `path`.new renamed over it so that a
/// worker never reads half of it. Throws IoError when it cannot.
void write_store_file(const std::string& path, const StoreFileEntry& entry);
/// The entry in format_store_file()'s `text`, read from `path` (named in
/// the error). Throws ConfigError, with the text, when it is not one.
StoreFileEntry parse_store_file(const std::string& text, const std::string& path);
/// The entry in the file at `path`; nullopt when there is no file to read.
/// Throws ConfigError when the file holds no entry.
std::optional<StoreFileEntry> read_store_file(const std::string& path);

// --- 3. The agents' store.

/// The run the store's host serves (--rdzv-id); a node of another run
/// refuses it.
std::string run_id_key();
/// "<take-overs>:<round>", set by a node that took over the store from a
/// lost host (Note [A new host] in launch/node_rendezvous.hpp).
std::string takeover_key();
/// A key of the nodes' rendezvous: of round `round`, or of the whole run
/// when `round` is negative.
std::string rendezvous_key(const std::string& run_id, int round, const std::string& name);
/// A key of attempt `attempt` (one rendezvous round's workers).
std::string attempt_key(const std::string& run_id, int attempt, const std::string& name);
/// An attempt's first failure, the value of its attempt_key(..., "failure")
/// (set once, by compare-and-set, so every node reads the same one).
struct AttemptFailure {
  /// What failed, for the log ("rank 1 (node 0, ...) ended with exit 9: ...").
  std::string text;
  /// Whether a restart would meet it again (a worker's ExitCode::kSnapshot:
  /// the disk still full, the file still unreadable), so no node restarts.
  bool repeats = false;
};
/// The key's value for `failure`: "repeats\n" or "restart\n", then the text.
std::string failure_value(const AttemptFailure& failure);
/// The failure a value of failure_value() names; a value without the first
/// line (an agent of an older ddprun) is all text, not repeating.
AttemptFailure parse_failure_value(const std::string& value);
/// Where node 0's agent names the recovery store's address.
std::string recovery_store_key(const std::string& run_id);

}  // namespace ddp::comm::store
