#pragma once

/// \file snapshot_manager.hpp
/// Training-state snapshots: one call saves what a restart needs, one call at
/// start-up resumes from the newest valid snapshot.
///
/// \code
///   ddp::snapshot::SnapshotManager snapshots(
///       ddp::snapshot::SnapshotOptions("ckpt").keep_last(3), group);
///   ddp::snapshot::TrainingState state;
///   state.model = model.ptr().get();
///   state.optimizer = &optimizer;
///   snapshots.resume(state);            // false on a fresh start
///   for (; state.epoch < epochs; ++state.epoch, state.step_in_epoch = 0) {
///     for (; state.step_in_epoch < steps_per_epoch; ++state.step_in_epoch) {
///       train_step(model);
///       snapshots.save(state);
///     }
///   }
/// \endcode
///
/// Note [What a snapshot file is]
/// A snapshot is one little-endian file, `<prefix>-<sequence>.ddpsnap`, whose
/// 12-digit sequence number grows by one with every save in the directory:
///   header (64 bytes): magic "DDPSNAP1", format version (u32), header size
///     (u32), world size (u32), CRC-32 of the payload (u32), sequence (u64),
///     creation time in Unix milliseconds (i64), payload size (u64), 12 zero
///     bytes, CRC-32 of the 60 bytes before it (u32);
///   payload: records until its end, each a kind (u32: 1 tensor, 2 JSON), a
///     name (u32 length + bytes), then a tensor's dtype code (u32), rank
///     (u32), sizes (i64 each), byte count (u64) and raw bytes, or a JSON
///     text's byte count (u64) and bytes;
///   end marker "DDPSEND1", written after the payload.
/// Tensors are named model/param/<name>, model/buffer/<name>,
/// optim/g<group>/p<index>/<field>, extra/<name> and rng/rank<r>/<device>;
/// the one JSON record, "scalars", holds everything else. Reading parses only
/// these records (never torch::load, which deserializes TorchScript code),
/// after the checksums and the end marker have been verified.
///
/// Note [Sharded state in a snapshot]
/// With TrainingState::zero_optimizer or fully_sharded, each rank also writes
/// its shard as `<prefix>-<sequence>.shard-<rank>-of-<world>.ddpsnap` (the
/// same format: its pieces' optimizer state named by position, with
/// fully_sharded the pieces' parameter values, and the optimizer's
/// description), atomically, before rank 0 writes the main file; the main
/// file records which elements of which flattened parameter every shard
/// holds (Note [A shard's pieces] in ddp/parallel/sharded_state.hpp). With
/// fully_sharded the main file holds the model's buffers and not its
/// parameters, which live only in the shards. A main file therefore exists only once all its shards
/// are durable, and removing it (keep_last) removes them. On resume each rank reads only the shard
/// files that overlap the elements it now owns and cuts its state out of them by element, so the
/// job may resume at any world size (exact for the element-wise optimizers ZeRO supports).
///
/// Note [Writing is atomic]
/// Rank 0 writes `.<name>.tmp` in the directory, fsyncs it, renames it into
/// place and fsyncs the directory, so a reader sees either the previous set
/// of snapshots or the new complete file, never a partial one. The other
/// ranks wait for rank 0's outcome (a broadcast that doubles as a barrier),
/// so save() returns on every rank only once the file is durable, and fails
/// on every rank if rank 0 could not write it.
///
/// Note [An asynchronous save]
/// save_async() stops training only to copy the state. On the calling thread
/// it does all that involves the other ranks (settling the previous save, the
/// generator states' gather, the shards' layout, and one all_reduce that
/// agrees on the sequence number and on whether every rank got ready) and
/// copies every record into a staging buffer the manager owns: CPU memory,
/// pinned for CUDA tensors (non-blocking copies, then each device's stream
/// synchronized), reused while names, shapes and dtypes stay the same, so a
/// steady-state save allocates nothing. One background thread then writes the
/// copies with save()'s own code (Note [Writing is atomic], keep_last), so a
/// SIGKILL mid-write leaves the previous snapshots intact and resumable. With
/// sharded state each rank's thread writes its shard file and rank 0's writes
/// the main file once every rank has said in the store that its shard is
/// written (for at most the group's collective timeout; Note [Shards agreed
/// through the store] in src/snapshot/async_save.cpp). The background
/// thread runs no collective. A rank lost mid-save makes the others'
/// settling fail with a SnapshotError within that timeout, rank 0's naming
/// the rank whose shard never came (Note [A rank lost during a save]); no
/// main file of that save is written, and the snapshots before it stay
/// resumable.
/// The rule: at most one save is in flight. save(), save_async(), resume()
/// and wait() first wait for it and settle it, a collective: if a rank's write
/// failed, that rank rethrows its own error (the file and the cause), the
/// others throw a SnapshotError naming that rank, and nothing new starts. With
/// SnapshotOptions::skip_while_writing, save_async() instead saves nothing
/// and returns "" while any rank still writes (decided together by an
/// all_reduce). The destructor waits for the write and prints a failure that
/// was never reported on std::cerr. Memory: the buffer keeps a copy of what
/// this rank writes (rank 0: the state less its shards; each rank its shard)
/// for the manager's life.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/snapshot/errors.hpp"

namespace ddp::parallel {
class ZeroRedundancyOptimizer;
class FullyShardedState;
}  // namespace ddp::parallel

namespace ddp {
using comm::ProcessGroup;  // Note [One namespace per layer] in ddp/ddp.hpp
using parallel::FullyShardedState;
using parallel::ZeroRedundancyOptimizer;

namespace amp {
class GradScaler;
}  // namespace amp

namespace snapshot {

/// What a snapshot holds: pointers to the live objects (null parts are
/// neither saved nor restored) and plain values.
struct TrainingState {
  /// Parameters and buffers, by their (recursive) names.
  torch::nn::Module* model = nullptr;
  /// Per-parameter state and every param group's options. Supported: SGD,
  /// Adam, AdamW, RMSprop, Adagrad; parameters are matched by position.
  torch::optim::Optimizer* optimizer = nullptr;
  /// A sharded optimizer (ddp/parallel/zero_redundancy_optimizer.hpp), instead of
  /// `optimizer`: every rank saves its own shard (Note [Sharded state in a
  /// snapshot]), and resuming at another world size re-shards.
  ZeroRedundancyOptimizer* zero_optimizer = nullptr;
  /// A FullyShardedDataParallel model with its optimizer
  /// (ddp/parallel/fully_sharded_state.hpp), instead of `optimizer`: every
  /// rank saves its shard of the parameters and of the optimizer state, and
  /// resuming at another world size re-shards. Point `model` at the FSDP
  /// model's module() for its buffers.
  FullyShardedState* fully_sharded = nullptr;
  /// Its step count (the learning rates live in the optimizer's options).
  /// The schedule's own settings (StepLR's step size and gamma) are the
  /// program's constructor arguments and are not saved.
  torch::optim::LRScheduler* scheduler = nullptr;
  /// The epoch to resume in.
  int64_t epoch = 0;
  /// Steps already done in that epoch (meaningful at the same world size).
  int64_t step_in_epoch = 0;
  /// Samples of that epoch the whole job has consumed
  /// (DistributedSampler::global_position()): what a job re-formed at
  /// another world size resumes from (restore_global()). 0 in snapshots
  /// written before it existed.
  int64_t samples_in_epoch = 0;
  /// Sampler position, global step, ...; replaced wholesale on resume.
  std::map<std::string, int64_t> counters;
  /// Other tensors (a gradient scaler's scale and growth tracker, ...). On
  /// resume an entry of the same shape and dtype is overwritten in place,
  /// others become new CPU tensors; the map's keys become the snapshot's.
  std::map<std::string, at::Tensor> extra_tensors;
  /// A gradient scaler (ddp/amp/grad_scaler.hpp): its scale, growth tracker and
  /// factors. At opt level O2, also add MixedPrecision::master_weights() to
  /// extra_tensors.
  amp::GradScaler* grad_scaler = nullptr;
  /// User strings; replaced wholesale on resume.
  std::map<std::string, std::string> metadata;
  /// Whether the default CPU generator's state (and each CUDA device's,
  /// where available) is saved for every rank and restored on resume. All
  /// ranks must agree: saving gathers the states with a collective. A job
  /// resumed at another world size cannot take the saved states rank for
  /// rank; each rank's generators are seeded instead from rank 0's saved
  /// CPU state and the new rank (Note [Resuming at another world size]).
  bool include_rng = true;
};

/// Options of a SnapshotManager.
struct SnapshotOptions {
  /// Creates options for snapshots in `directory`.
  /* implicit */ SnapshotOptions(std::string directory = "") : directory_(std::move(directory)) {}
  /// Where snapshots live (created by the first save). Required; all ranks
  /// must see the same directory (a shared file system across nodes).
  TORCH_ARG(std::string, directory);
  /// How many snapshots save() keeps, newest first; at least 1.
  TORCH_ARG(int, keep_last) = 3;
  /// File name prefix: `<prefix>-<sequence>.ddpsnap`. Must not be empty,
  /// contain '/' or start with '.'.
  TORCH_ARG(std::string, prefix) = "snapshot";
  /// save_async() while any rank still writes the previous save: false
  /// waits for it, true saves nothing and returns "" (Note [An asynchronous
  /// save]).
  TORCH_ARG(bool, skip_while_writing) = false;
};

/// A snapshot file as read from disk, after its checksums were verified.
struct SnapshotFile {
  std::string path;                           ///< The file read.
  uint32_t format_version = 0;                ///< Format version of the file.
  uint32_t world_size = 0;                    ///< Ranks of the job that wrote it.
  uint64_t sequence = 0;                      ///< Its number in the directory.
  int64_t created_unix_ms = 0;                ///< When it was written.
  std::map<std::string, at::Tensor> tensors;  ///< Tensor records, by name (CPU).
  std::string scalars_json;                   ///< The "scalars" JSON record.
};

namespace detail {
struct AsyncSaves;
}  // namespace detail

/// Saves training states into a directory and resumes from them. Every
/// rank of `group` must call save(), save_async(), wait() and resume()
/// together.
class SnapshotManager {
 public:
  /// Validates `options` (ConfigError for an empty directory, keep_last < 1
  /// or a bad prefix).
  SnapshotManager(SnapshotOptions options, std::shared_ptr<ProcessGroup> group);
  /// Waits for an asynchronous save in flight; prints its failure on
  /// std::cerr if nothing reported it. Never throws.
  ~SnapshotManager();
  /// Moves the manager (and a save in flight) over.
  SnapshotManager(SnapshotManager&& other) noexcept;
  /// Waits for this manager's save in flight, then moves `other` over.
  SnapshotManager& operator=(SnapshotManager&& other) noexcept;

  /// Rank 0 writes `state` atomically (Note [Writing is atomic]) as the next
  /// sequence number, then deletes all but the newest keep_last snapshots and
  /// any leftover temporary files; the others wait for it. Returns the
  /// path of the new snapshot on every rank. Throws SnapshotError when the
  /// file cannot be written (on every rank) or the optimizer is unsupported.
  /// Waits first for a save_async() in flight, as wait() does.
  std::string save(const TrainingState& state);

  /// save() without stopping training for the write (Note [An asynchronous
  /// save]): copies `state` into the staging buffer, hands the copy to the
  /// background thread and returns the path the snapshot will have. Waits
  /// first for the save in flight and throws its failure (starting nothing);
  /// with SnapshotOptions::skip_while_writing, returns "" instead while any
  /// rank still writes. A collective. Throws SnapshotError on every rank
  /// when a rank cannot prepare the save.
  std::string save_async(const TrainingState& state);

  /// Waits for the save in flight and reports its outcome: a collective that
  /// throws the failure as save_async() does. Nothing in flight: returns.
  void wait();

  /// Whether this rank's background thread is still writing (not a
  /// collective; ranks other than 0 write only shards).
  bool save_in_flight() const;

  /// Loads the newest snapshot whose checksums verify into `state`; every
  /// rank reads the file itself and all ranks must pick the same one. Skips
  /// truncated or corrupt files with a warning on std::cerr naming the file
  /// and why. Returns false when there is none (empty or missing directory).
  /// Everything is checked before anything live changes: a snapshot that
  /// does not fit (another model, another optimizer) throws SnapshotError
  /// naming the first mismatch. Waits first for a save_async() in flight,
  /// as wait() does.
  bool resume(TrainingState& state);

  /// The files named like snapshots in the directory, newest first (their
  /// contents are not checked).
  std::vector<std::string> list() const;

  /// The options in use.
  const SnapshotOptions& options() const noexcept { return options_; }

 private:
  void settle();  // Note [An asynchronous save]

  std::shared_ptr<ProcessGroup> group_;
  SnapshotOptions options_;
  std::unique_ptr<detail::AsyncSaves> async_;
};

/// Reads and verifies one snapshot file (for tools and tests). Throws
/// SnapshotError naming the file and the problem: not a ddp snapshot, a
/// newer format, truncated, no end marker, a checksum mismatch.
SnapshotFile read_snapshot_file(const std::string& path);

/// Checks that `file` fits every non-null part of `state`, then restores it
/// (RNG states: those `rank` saved, or, when `world_size` is neither 0 nor
/// the file's, seeds derived from rank 0's and `rank`). Throws
/// SnapshotError naming the first mismatch, leaving `state` untouched.
void restore_training_state(const SnapshotFile& file, TrainingState& state, int rank = 0,
                            int world_size = 0);

/// What save() would write for `state`, taken by this process alone and
/// copied into memory (CPU tensors): this process's generator states as
/// rank 0's, world_size 1, path "(in memory)". restore_training_state()
/// takes it back (ddp::elastic::State commits this way).
/// \throws SnapshotError for a zero_optimizer or fully_sharded (their
///   shards live on every rank, so no one process holds them;
///   elastic::State commits them apart, Note [Sharded state in memory]) or
///   an unsupported optimizer.
SnapshotFile capture_training_state(const TrainingState& state);

/// The seed rank `rank` of a job resumed at another world size gives its
/// generators: a hash of rank 0's saved CPU generator state and `rank`.
uint64_t derived_rng_seed(const at::Tensor& rank0_cpu_state, int rank);

}  // namespace snapshot
}  // namespace ddp
