#pragma once

// Note [Accounting for every sample]
// A job under ddprun --recovery memory promises that every sample of the
// epoch is trained exactly once (but for DistributedSampler's padding),
// whatever generation trained it. The tests check it from the toy
// trainer's --sample-log files (examples/common/sample_log.hpp), which each
// worker process writes itself, and not from the launchers' consoles: a
// launcher relays a worker's stdout and stderr through two pipes, and
// nothing orders a line of one after a line of the other, so slicing the
// batches (stdout) by the library's messages (stderr) can drop a batch that
// was trained (issue #57: 32 of 2,048 samples "missing" under load); and a
// SIGKILLed launcher loses what it had not relayed yet.
//
// From the logs:
// - the generations: each process's "generation" lines, ordered by their
//   start time, grouped into the job's generations (a new one begins where
//   the world size or first step changes, or a rank comes again);
// - the kept steps: each generation rolls back the steps after its first
//   one, so step S counts as the last generation that trained it trained it;
// - the expected batches: DistributedSampler's, for each rank of each
//   generation, from the samples the job had consumed at its first step.
// Each kept step must have a batch from every rank of its generation, each
// batch must be the sampler's, and the kept batches must hold every sample
// of the data set once, and more often only as the sampler's padding. A
// failure names the sample, the rank, generation and step that should have
// trained it, and keeps the logs and the launchers' outputs in a directory.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ddp::launch {

/// What the toy trainer's epoch 0 draws from.
struct SampleSchedule {
  int64_t samples = 2048;
  int64_t batch_size = 32;
  uint64_t seed = 7;
};

/// One rank's part of one generation, from one process's log.
struct RankGeneration {
  int pid = 0;
  int rank = 0;
  int world = 0;
  int64_t from_step = 0;
  int64_t start_ns = 0;
  std::map<int64_t, std::vector<int64_t>> batches;  // global step -> indices
};

/// A generation of the job: every rank's part, and where it began.
struct JobGeneration {
  int world = 0;
  int64_t from_step = 0;
  int64_t consumed = 0;                 // samples of the epoch taken before from_step
  std::map<int, RankGeneration> ranks;  // by rank
};

/// The generations the logs in a directory show, and what is wrong with
/// their samples.
class SampleAccount {
 public:
  /// Reads every samples-<pid>.log in `dir` and checks them against the
  /// schedule (Note [Accounting for every sample]).
  SampleAccount(const std::filesystem::path& dir, const SampleSchedule& schedule);

  const std::vector<JobGeneration>& generations() const { return generations_; }
  /// Each problem in one line: empty when every sample was trained once.
  const std::vector<std::string>& problems() const { return problems_; }
  /// How many times the kept steps trained a sample again (the padding).
  int64_t repeated() const { return repeated_; }
  /// The generations, their kept steps, and the problems, for a failure.
  std::string report() const;

 private:
  void read(const std::filesystem::path& dir);
  void group();
  void check();

  SampleSchedule schedule_;
  std::vector<RankGeneration> parts_;
  std::vector<JobGeneration> generations_;
  std::map<int64_t, size_t> kept_;  // step -> the generation that kept it
  std::vector<std::string> problems_;
  int64_t repeated_ = 0;
};

/// A directory for a test's sample logs and the launchers' outputs:
/// removed when the test passed, kept (and named in a failure) otherwise,
/// or always where DDP_KEEP_EVIDENCE is set (scripts/stress-elastic.sh).
class EvidenceDirectory {
 public:
  explicit EvidenceDirectory(const std::string& name);
  ~EvidenceDirectory();
  EvidenceDirectory(const EvidenceDirectory&) = delete;
  EvidenceDirectory& operator=(const EvidenceDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// Writes `text` to `name` in the directory; returns its path.
  std::string keep(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

}  // namespace ddp::launch
