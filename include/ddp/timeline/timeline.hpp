#pragma once

/// \file timeline.hpp
/// A timeline of every collective ddp issues (DistributedDataParallel's
/// buckets, DistributedOptimizer's fusion buffers, broadcasts, your own
/// all-reduces), written as Chrome trace-event JSON that Perfetto
/// (ui.perfetto.dev) and chrome://tracing open. Horovod's HOROVOD_TIMELINE.
///
/// \code
///   auto group = ddp::init();
///   ddp::timeline::start(*group, ddp::timeline::TimelineOptions("/tmp/trace-%r.json"));
///   train();
///   ddp::timeline::stop();                // optional: the file is always valid
/// \endcode
/// or, with no code change, run under `DDP_TIMELINE=/tmp/trace-%r.json`.
///
/// Note [What the timeline records]
/// One "X" (complete) event per collective per rank: `pid` is the rank, `ts`
/// the start in microseconds since the Unix epoch (so that ranks line up),
/// `dur` the time until the rank saw it complete (its Work's wait()
/// returned; for a Work never waited on, until it was destroyed, with
/// `"waited": false`), `tid` a lane: collectives in flight at the same time
/// get different lanes, so that no two events on a lane overlap. `name` is
/// the innermost NameScope's name ("ddp.bucket 3", "hvd.allreduce 0",
/// "hvd.broadcast_parameters", ...) or, for a collective issued outside any
/// scope, the operation ("all_reduce(sum)", "broadcast", ...). `args` holds
/// the operation, reduction, root, dtype, element count and bytes (of the
/// input tensor). A collective is recorded once, however many backends it
/// passes through (`auto` hands it to Gloo or NCCL).
///
/// Note [The file is valid JSON at every moment]
/// The file is one JSON array. Each event is written with one pwrite() that
/// replaces the closing "]" with ",event]", straight into the kernel's page
/// cache: no user-space buffer, no flush to forget. A process that is killed
/// (even by SIGKILL) or crashes therefore leaves a complete, parseable file
/// holding every event written so far; only a power loss can cost the tail.
/// Each rank writes its own file; merge() joins them into one trace.

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp {
using comm::ProcessGroup;

namespace timeline {

/// Options of ddp::timeline::start().
struct TimelineOptions {
  /// Records into `path` (see path()).
  /* implicit */ TimelineOptions(std::string path);
  /// The file each rank writes: "%r" is replaced by the rank; a path
  /// without "%r" is a prefix, and rank r writes `<path><r>.json` (so
  /// "/tmp/tl-" gives /tmp/tl-0.json, /tmp/tl-1.json, ...). The directory
  /// must exist.
  TORCH_ARG(std::string, path);
};

/// The environment variable that starts the timeline without code: when it
/// is set (to a path as TimelineOptions::path), the first ddp::init() of
/// the process starts recording with its rank. Read through
/// ddp::capture_environment(), like every variable ddp reads.
inline constexpr const char* kEnvironmentVariable = "DDP_TIMELINE";

/// Adds the timeline's observer to `group`, so that the collectives issued
/// through it are recorded while a timeline is recorded, and returns
/// `group`; a group recorded already is left as it is. ddp::init() returns
/// recorded groups, so call it only for a group you made otherwise.
/// Collectives an backend hands on to another inside are part of the outer
/// one and recorded once.
/// \throws InvalidArgumentError when `group` is null.
std::shared_ptr<ProcessGroup> recorded(std::shared_ptr<ProcessGroup> group);

/// Starts recording the collectives of this process (those issued through
/// groups from ddp::init() or recorded()), as rank group.rank().
/// Calling it again with the same path does nothing.
/// \throws ConfigError when another timeline is already being recorded;
///   IoError when the file cannot be created (names the path and the
///   reason).
void start(const ProcessGroup& group, const TimelineOptions& options);

/// Stops recording and closes the file (which is complete already).
/// Collectives still in flight are not recorded. Safe to call when idle.
void stop();

/// Whether a timeline is being recorded.
bool recording() noexcept;

/// The file being recorded into ("" when none).
std::string current_path();

/// Complete events written since start(), for tests and logs.
int64_t events_written();

/// The file rank `rank` writes for `path` (see TimelineOptions::path).
std::string path_for_rank(const std::string& path, int rank);

/// Joins several ranks' timelines into one file that shows every rank.
/// \throws InvalidArgumentError naming an input that is missing or not a
///   JSON array; IoError when `output` cannot be written.
void merge(const std::vector<std::string>& inputs, const std::string& output);

/// Names the collectives this thread issues while the scope is alive
/// (an inner scope's name wins), e.g. `NameScope scope("eval metrics");`.
/// Costs nothing measurable when no timeline is recorded.
class NameScope {
 public:
  /// Names collectives issued while alive `name`.
  explicit NameScope(std::string name);
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;

 private:
  std::string name_;
};

}  // namespace timeline
}  // namespace ddp
