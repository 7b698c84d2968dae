// SnapshotManager's asynchronous saves (Note [An asynchronous save] in
// ddp/snapshot/snapshot_manager.hpp): save_async(), wait(), and the settling
// of a save in flight that save(), resume() and wait() begin with.

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <thread>
#include <utility>
#include <vector>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "snapshot/async_saves.hpp"
#include "snapshot/failure_message.hpp"
#include "snapshot/rng_states.hpp"
#include "snapshot/sharded_state.hpp"
#include "snapshot/snapshot_directory.hpp"
#include "snapshot/snapshot_writing.hpp"
#include "snapshot/staging_buffer.hpp"
#include "snapshot/state_records.hpp"

namespace ddp::snapshot {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using detail::NamedTensors;

// Note [Shards agreed through the store]
// Rank 0's main file of an asynchronous sharded save may only be written
// once every rank's shard is. Each rank's background thread says so in the
// rendezvous store, not by a file rank 0 looks for: on node-local disks
// rank 0 never sees another node's files. The protocol, named here once:
// after its shard file is renamed into place, rank r sets
//   ddp/snapshot/<prefix>/<sequence>/<attempt>/shard-<r>  =  "written"
// ("failed" when it could not write it); rank 0's background thread polls
// those keys until each is set, the save is abandoned, or the group's
// collective timeout (the job's) passes, and deletes them when done.
// <attempt> counts the manager's save_async() calls (alike on every rank):
// a save that failed keeps its sequence number for the next, and the keys
// rank 0 never read (it gave up first) must not answer for the retry. A
// group without a store (one built by hand) falls back to polling the
// files, which needs one shared directory.
std::string shard_key(const std::string& prefix, uint64_t sequence, uint64_t attempt, int rank) {
  return base::detail::str("ddp/snapshot/", prefix, "/", sequence, "/", attempt, "/shard-", rank);
}
constexpr char kShardWritten[] = "written", kShardFailed[] = "failed";

// Rank 0's sequence number and the lowest rank that `failed` (-1: none),
// on every rank: one all_reduce (max of the sequence, which the other
// ranks give as 0, and of world - rank of each rank that failed).
std::pair<uint64_t, int> agree_on_save(ProcessGroup& group, uint64_t sequence, bool failed) {
  if (group.size() == 1) return {sequence, failed ? 0 : -1};
  at::Tensor agreed = at::tensor({static_cast<int64_t>(group.rank() == 0 ? sequence : 0),
                                  failed ? int64_t{group.size() - group.rank()} : int64_t{0}});
  group.all_reduce(agreed, ReduceOp::kMax);
  const int64_t worst = agreed[1].item<int64_t>();
  return {static_cast<uint64_t>(agreed[0].item<int64_t>()),
          worst == 0 ? -1 : static_cast<int>(group.size() - worst)};
}

// Whether any rank's background thread still writes; a collective.
bool any_rank_writing(ProcessGroup& group, bool writing) {
  if (group.size() == 1) return writing;
  at::Tensor any = at::full({1}, writing ? int64_t{1} : int64_t{0}, at::kLong);
  group.all_reduce(any, ReduceOp::kMax);
  return any.item<int64_t>() != 0;
}

// Rank 0's background thread: waits until every other rank's shard of
// `main_name` is written (Note [Shards agreed through the store]).
void await_shards(const std::shared_ptr<c10d::Store>& store, const std::string& directory,
                  const std::string& prefix, const std::string& main_name, uint64_t sequence,
                  uint64_t attempt, int world, std::chrono::milliseconds timeout,
                  const detail::BackgroundWriter& writer) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (int r = 1; r < world; ++r) {
    const fs::path file = fs::path(directory) / detail::shard_file_name(main_name, r, world);
    const std::string key = shard_key(prefix, sequence, attempt, r);
    while (true) {
      std::error_code error;
      if (store ? store->check({key}) : fs::exists(file, error)) break;
      if (writer.abandoned()) {
        throw SnapshotError(base::detail::str("gave ", main_name, " up: a rank's shard failed"));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw SnapshotError(base::detail::str(
            "cannot write snapshot ", (fs::path(directory) / main_name).string(), ": rank ", r,
            " did not report its shard (", store ? "store key " + key : "file " + file.string(),
            ") within the collective timeout of ", timeout.count(),
            " ms; the snapshots before it are intact (is rank ", r, " alive?)"));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    if (store) {
      const std::vector<uint8_t> value = store->get(key);
      store->deleteKey(key);
      if (std::string(value.begin(), value.end()) != kShardWritten) {
        throw SnapshotError(base::detail::str("gave ", main_name, " up: rank ", r,
                                              " could not write its shard (its error says why)"));
      }
    }
  }
}

}  // namespace

detail::AsyncSaves::~AsyncSaves() {
  std::exception_ptr failure = unreported;
  if (pending) failure = writer.wait_all();
  if (failure) {
    std::cerr << "ddp: error: the asynchronous save of " << path
              << " failed, and no save, save_async, resume or wait came after it to report it: "
              << detail::what_failed(failure) << std::endl;
  }
}

SnapshotManager::~SnapshotManager() = default;
SnapshotManager::SnapshotManager(SnapshotManager&& other) noexcept = default;
SnapshotManager& SnapshotManager::operator=(SnapshotManager&& other) noexcept = default;

bool SnapshotManager::save_in_flight() const { return async_ && async_->writer.busy(); }

void SnapshotManager::wait() { settle(); }

void SnapshotManager::settle() {
  if (!async_ || !async_->pending) return;
  detail::AsyncSaves& saves = *async_;
  saves.pending = false;
  // Note [A rank lost during a save]
  // When a rank dies mid-save, the collective that settles the save fails
  // at once on the others ("connection closed"). That is not yet the save's
  // outcome: rank 0's background thread still waits for the lost rank's
  // shard until the collective timeout and then names it (Note [Shards
  // agreed through the store]). So the failed collective waits for this
  // rank's writer and reports both, and no main file of the lost save is
  // ever written without every shard.
  std::string cause;  // the lowest failing rank's message
  auto agree = [&](const std::exception_ptr& mine_failed) {
    try {
      auto [rank, message] = comm::detail::first_failure(
          *group_, mine_failed ? detail::what_failed(mine_failed) : std::string());
      cause = std::move(message);
      return rank;
    } catch (const std::exception& lost) {
      const std::exception_ptr outcome = saves.writer.wait_all();
      saves.unreported = nullptr;
      throw SnapshotError(base::detail::str(
          "the asynchronous save of ", saves.path, " could not be settled, a rank is lost (",
          lost.what(), "); this rank's part: ",
          outcome ? detail::what_failed(outcome) : std::string("written")));
    }
  };
  std::exception_ptr mine;
  int failed = -1;
  if (saves.sharded) {  // the shards first: rank 0's main file waits for them
    mine = saves.writer.wait_shard();
    saves.unreported = mine;
    failed = agree(mine);
    if (failed >= 0) saves.writer.abandon();
  }
  std::exception_ptr outcome = saves.writer.wait_all();
  if (failed < 0) {  // else rank 0's main part only gave up
    mine = outcome;
    saves.unreported = mine;
    failed = agree(mine);
  }
  saves.unreported = nullptr;
  if (failed >= 0 && !saves.shard_path.empty() && !mine) {
    // A save without every shard is none: this rank's gives its space back.
    std::error_code ignored;
    fs::remove(saves.shard_path, ignored);
  }
  if (mine) std::rethrow_exception(mine);
  if (failed >= 0) {
    throw SnapshotError(base::detail::str(
        "the asynchronous save of ", saves.path, " failed on rank ", failed, " (", cause,
        "); the snapshots before it are intact, and the next save may be tried"));
  }
}

std::string SnapshotManager::save_async(const TrainingState& state) {
  if (!async_) async_ = std::make_unique<detail::AsyncSaves>();
  detail::AsyncSaves& saves = *async_;
  if (options_.skip_while_writing() && saves.pending &&
      any_rank_writing(*group_, saves.writer.busy())) {
    return "";
  }
  settle();
  const parallel::ShardedState* sharded = detail::sharded_part(state);
  detail::TensorMap rng;
  if (state.include_rng) rng = detail::gather_rng_states(*group_);  // a collective: every rank
  const int rank = group_->rank(), world = group_->size();
  const uint64_t attempt = ++saves.attempts;
  std::exception_ptr failure;

  // This rank's shard, and every rank's pieces for the main file's record.
  NamedTensors shard_tensors;
  std::string shard_text;
  std::vector<std::string> pieces;
  if (sharded != nullptr) {
    std::string mine;  // empty if it failed
    try {
      detail::check_sharded_group(*sharded, *group_);
      detail::ShardRecords records = detail::shard_records(*sharded, detail::RowsSaved::kFirst);
      shard_text = records.scalars.dump();
      mine = records.scalars.at("pieces").dump();
      shard_tensors =
          saves.shard_staging.stage(NamedTensors(records.tensors.begin(), records.tensors.end()));
      saves.writer.ready();
    } catch (...) {
      failure = std::current_exception();
      mine.clear();
    }
    pieces =
        world > 1 ? comm::detail::all_gather_bytes(*group_, mine) : std::vector<std::string>{mine};
  }

  // Rank 0: the sequence number and the main file's records.
  uint64_t sequence = 0;
  NamedTensors main_tensors;
  std::string main_text;
  const bool every_piece =
      std::none_of(pieces.begin(), pieces.end(), [](const std::string& p) { return p.empty(); });
  if (rank == 0 && !failure && every_piece) {  // else the rank that failed says so below
    try {
      sequence = detail::next_snapshot_sequence(options_);
      json record;
      if (sharded != nullptr) {
        std::vector<json> parsed;
        for (const std::string& p : pieces) parsed.push_back(json::parse(p));
        record = detail::shards_record(*sharded, parsed);
        detail::remove_shard_files(options_, sequence);  // no other rank writes yet
      }
      detail::StateRecords records = detail::state_records(state, rng, record, world);
      main_text = detail::scalars_text(records.scalars);
      main_tensors = saves.main_staging.stage(records.tensors);
      saves.writer.ready();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const auto [agreed, failed] = agree_on_save(*group_, sequence, failure != nullptr);
  if (failed >= 0) {
    if (failure) std::rethrow_exception(failure);
    throw SnapshotError(
        base::detail::str("rank ", failed, " could not prepare an asynchronous save into ",
                          options_.directory(), " (its error says why); nothing was started"));
  }

  // Hand the staged copies to the background thread.
  sequence = agreed;
  const std::string main_name = detail::snapshot_file_name(options_.prefix(), sequence);
  detail::BackgroundWriter::Task shard_task, main_task;
  if (sharded != nullptr) {
    shard_task = [directory = options_.directory(), prefix = options_.prefix(), main_name,
                  tensors = std::move(shard_tensors), text = std::move(shard_text), rank, world,
                  sequence, attempt, store = rank == 0 ? nullptr : group_->rendezvous_store()] {
      auto report = [&](const char* outcome) {
        if (store)
          store->set(shard_key(prefix, sequence, attempt, rank),
                     std::vector<uint8_t>(outcome, outcome + std::strlen(outcome)));
      };
      try {
        detail::write_shard_file(directory, main_name, tensors, text, rank, world, sequence);
      } catch (...) {
        report(kShardFailed);
        throw;
      }
      report(kShardWritten);
    };
  }
  if (rank == 0) {
    main_task = [options = options_, main_name, tensors = std::move(main_tensors),
                 text = std::move(main_text), world, sequence, attempt,
                 with_shards = sharded != nullptr, &writer = saves.writer,
                 store = group_->rendezvous_store(), timeout = group_->collective_timeout()] {
      if (with_shards) {
        await_shards(store, options.directory(), options.prefix(), main_name, sequence, attempt,
                     world, timeout, writer);
      }
      detail::write_main_file(options, tensors, text, world, sequence);
    };
  }
  saves.path = detail::snapshot_path(options_, sequence);
  saves.sharded = sharded != nullptr;
  saves.shard_path =
      sharded == nullptr
          ? std::string()
          : (fs::path(options_.directory()) / detail::shard_file_name(main_name, rank, world))
                .string();
  if (shard_task || main_task) saves.writer.start(std::move(shard_task), std::move(main_task));
  saves.pending = true;
  return saves.path;
}

}  // namespace ddp::snapshot
