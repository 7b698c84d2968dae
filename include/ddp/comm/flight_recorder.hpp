#pragma once

/// \file flight_recorder.hpp
/// The flight recorder: every process keeps its last 64 collectives (what
/// they were, when they started, whether they finished), so that a hung or
/// timed-out job can say which rank stopped where. NCCL's flight recorder
/// (TORCH_NCCL_TRACE_BUFFER_SIZE) for every ddp backend, always on.
///
/// Note [What the flight recorder keeps]
/// ddp::init() adds an observer to the group it returns (Note [Observing
/// collectives] in ddp/comm/process_group.hpp) so that each collective issued
/// through it takes a slot of a ring of kCapacity entries: a sequence number
/// (1, 2, ... per group; all ranks issue the same collectives in the same
/// order, so equal numbers are the same collective), the operation, its
/// name (DistributedDataParallel's "ddp.bucket 3", a timeline::NameScope),
/// dtype, element count and bytes, the wall-clock start, and its state:
/// issued until its Work's wait() returns (completed) or throws (timed out,
/// failed). When a wait times out, the rank prints its ring to stderr, and
/// ddp::record_error() adds it to the error file (extraInfo.flight_recorder).
///
/// Note [The ring outlives its process]
/// Under ddprun (or with DDP_FLIGHT_RECORDER_FILE set), the ring is a
/// memory-mapped file: each record is a store into the page cache, no system
/// call, and the file holds the ring even after the process is SIGKILLed or
/// while it hangs in a kernel or a deadlock. ddprun reads every rank's file
/// when a job fails and says which rank stopped at which collective while
/// the others waited (Note [Reading a stall] in launch/stall_report.hpp).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp::comm {

class ProcessGroup;

namespace flight_recorder {

/// How many collectives each process keeps (the newest).
inline constexpr int kCapacity = 64;

/// The variable naming the file the ring is mapped to (ddprun sets it for
/// each worker). Read through the environment map ddp::init() is given.
inline constexpr const char* kFileVariable = "DDP_FLIGHT_RECORDER_FILE";

/// Where a recorded collective stands.
enum class State : int32_t {
  kIssued = 1,     ///< Handed to the backend; no wait() has returned yet.
  kCompleted = 2,  ///< A wait() returned: the result is in place.
  kTimedOut = 3,   ///< A wait() threw TimeoutError.
  kFailed = 4,     ///< A wait() threw another error.
};

/// "issued", "completed", "timed out" or "failed".
const char* to_string(State state) noexcept;

/// One recorded collective.
struct Entry {
  /// 1 for the first collective of its group, then 2, 3, ...
  int64_t sequence = 0;
  /// Which group of the process issued it: 0 for the first group wrapped.
  int32_t group = 0;
  /// "all_reduce(sum)", "broadcast(root 0)", "all_gather",
  /// "reduce_scatter(average)" or "barrier".
  std::string operation;
  /// The name its issuer gave it ("ddp.bucket 3"), or "".
  std::string name;
  /// "float32", "int64", ... ("" for a barrier).
  std::string dtype;
  /// Elements and bytes of the input tensor.
  int64_t numel = 0;
  int64_t bytes = 0;
  /// Seconds since the Unix epoch when it was issued.
  double start_time = 0;
  /// Seconds from its start until a wait() returned or threw; 0 while issued.
  double duration = 0;
  State state = State::kIssued;

  /// "#12 all_reduce(sum) 'ddp.bucket 0' of 1024 float32 (4096 B)".
  std::string describe() const;
};

/// A ring as read back from a file.
struct Record {
  int rank = -1;
  int world_size = 0;
  int64_t pid = 0;
  /// Oldest first.
  std::vector<Entry> entries;
};

/// Adds the flight recorder's observer to `group`, so that the collectives
/// issued through it are recorded, and returns `group`; a group recorded
/// already is left as it is. ddp::init() returns recorded groups, so call it
/// only for a group you made otherwise.
/// \throws InvalidArgumentError when `group` is null.
std::shared_ptr<ProcessGroup> recorded(std::shared_ptr<ProcessGroup> group);

/// This process's recorded collectives, oldest first (at most kCapacity).
std::vector<Entry> entries();

/// `entries` as a table, one line per collective, oldest first, headed
/// "flight recorder of rank R: the last N collectives".
std::string format(const std::vector<Entry>& entries, int rank);

/// Reads the ring another process mapped to `path`; nullopt when the file
/// is missing, truncated, or not a flight recorder's.
std::optional<Record> read_file(const std::string& path);

}  // namespace flight_recorder
}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
