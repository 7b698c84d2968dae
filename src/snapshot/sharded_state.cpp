#include "snapshot/sharded_state.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_state.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/errors.hpp"
#include "snapshot/failure_message.hpp"
#include "snapshot/saved_parameters.hpp"
#include "snapshot/snapshot_directory.hpp"
#include "snapshot/snapshot_format.hpp"
#include "snapshot/snapshot_writing.hpp"

namespace ddp::snapshot::detail {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A piece of a parameter saved by one rank, as the local optimizer's
// parameter `index` there.
struct SavedPiece {
  int rank = 0;
  size_t index = 0;
  int64_t begin = 0;
  int64_t length = 0;
};

// Where the local optimizer holds piece j's tensor: its group and index.
struct Slot {
  size_t group = 0;
  size_t index = 0;
};

std::vector<Slot> slots_of(const torch::optim::Optimizer& optimizer) {
  std::vector<Slot> slots;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i) slots.push_back({g, i});
  }
  return slots;
}

// The local optimizer's parameters, group after group, then the pieces no
// optimizer steps (Note [Pieces outside the optimizer]): piece j's tensor
// is the j-th.
std::vector<at::Tensor> local_parameters(const parallel::ShardedState& sharded) {
  std::vector<at::Tensor> params;
  for (const auto& group : sharded.local_optimizer().param_groups()) {
    params.insert(params.end(), group.params().begin(), group.params().end());
  }
  const std::vector<at::Tensor> unstepped = sharded.unstepped_values();
  params.insert(params.end(), unstepped.begin(), unstepped.end());
  return params;
}

std::string state_prefix(const Slot& slot) {
  return optimizer_state_prefix(slot.group, slot.index);
}

// Slot `j` of a shard saved with optimizer `description` (its groups'
// "params" counts); none for a piece past them, which no optimizer stepped
// (Note [Pieces outside the optimizer]).
std::optional<Slot> saved_slot(const json& description, size_t j) {
  const json& groups = description.at("groups");
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto count = groups[g].at("params").get<size_t>();
    if (j < count) return Slot{g, j};
    j -= count;
  }
  return std::nullopt;
}

// Writes this rank's shard file atomically; returns its pieces as
// [parameter, begin, length] triples.
json write_shard(const std::string& directory, const std::string& main_name,
                 const parallel::ShardedState& sharded, uint64_t sequence) {
  const ShardRecords records = shard_records(sharded, RowsSaved::kFirst);
  write_shard_file(
      directory, main_name, NamedTensors(records.tensors.begin(), records.tensors.end()),
      records.scalars.dump(), sharded.group().rank(), sharded.group().size(), sequence);
  return records.scalars.at("pieces");
}

// The saved pieces to cut the run [begin, begin + length) out of (Note
// [Replicated shards]): of the copies of a piece, which the ranks at the
// same place of each row of `row_ranks` ranks hold, the first one at hand
// (the first row's when none is: the caller then names it). Without rows
// every overlapping piece is its only copy.
std::vector<SavedPiece> sources_of(const std::vector<SavedPiece>& saved, int64_t begin,
                                   int64_t length, int row_ranks, const ShardLookup& lookup) {
  std::vector<SavedPiece> chosen;
  std::map<std::tuple<int, int64_t, int64_t>, size_t> copy_of;  // (column, begin, length)
  for (const SavedPiece& old : saved) {  // in rank order: the first row first
    if (std::max(begin, old.begin) >= std::min(begin + length, old.begin + old.length)) continue;
    const auto [found, first] =
        copy_of.try_emplace({old.rank % row_ranks, old.begin, old.length}, chosen.size());
    if (first) {
      chosen.push_back(old);
    } else if (lookup(chosen[found->second].rank) == nullptr && lookup(old.rank) != nullptr) {
      chosen[found->second] = old;
    }
  }
  return chosen;
}

}  // namespace

parallel::ShardedState* sharded_part(const TrainingState& state) {
  const int parts = (state.optimizer != nullptr) + (state.zero_optimizer != nullptr) +
                    (state.fully_sharded != nullptr);
  if (parts > 1) {
    throw SnapshotError(
        "the training state has more than one of optimizer, zero_optimizer and fully_sharded; "
        "set the one in use (fully_sharded holds its optimizer)");
  }
  if (state.zero_optimizer != nullptr) return state.zero_optimizer;
  return state.fully_sharded;
}

const char* sharded_record_key(const parallel::ShardedState& sharded) {
  return dynamic_cast<const parallel::FullyShardedState*>(&sharded) != nullptr ? "fully_sharded"
                                                                               : "zero";
}

ShardRecords shard_records(const parallel::ShardedState& sharded, RowsSaved rows) {
  const torch::optim::Optimizer& optimizer = sharded.local_optimizer();
  ShardRecords records;
  json description = export_optimizer(optimizer, records.tensors);
  json pieces = json::array();
  auto mine = sharded.pieces();
  if (rows == RowsSaved::kFirst && !sharded.in_first_row()) {
    for (auto& piece : mine) piece.length = 0;  // Note [Replicated shards]
  }
  const std::vector<at::Tensor> locals = local_parameters(sharded);
  const std::vector<Slot> slots = slots_of(optimizer);
  for (size_t j = 0; j < mine.size(); ++j) {
    const auto& piece = mine[j];
    pieces.push_back({piece.parameter, piece.begin, piece.length});
    // Note [A shard's pieces]: only the piece's elements, not the padding.
    const int64_t local = locals.at(j).numel();
    const std::string prefix = j < slots.size() ? state_prefix(slots[j]) : "";
    for (auto it = records.tensors.lower_bound(prefix);
         !prefix.empty() && it != records.tensors.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      if (local != piece.length && it->second.numel() == local) {
        it->second = it->second.reshape({-1}).narrow(0, 0, piece.length);
      }
    }
    if (sharded.holds_values()) {
      records.tensors[base::detail::str("value/p", j)] =
          locals[j].detach().reshape({-1}).narrow(0, 0, piece.length);
    }
  }
  records.scalars = {
      {"optimizer", std::move(description)}, {"rank", sharded.group().rank()}, {"pieces", pieces}};
  return records;
}

json shards_record(const parallel::ShardedState& sharded, const std::vector<json>& pieces_by_rank) {
  json record = {
      {"world", pieces_by_rank.size()},
      {"kind", std::string(sharded_record_key(sharded)) == "zero" ? "ZeroRedundancyOptimizer"
                                                                  : "FullyShardedDataParallel"},
      {"numels", sharded.numels()},
      {"pieces", pieces_by_rank}};
  if (sharded.shard_size() != sharded.group().size()) record["shard_ranks"] = sharded.shard_size();
  if (!sharded.names().empty()) {
    record["names"] = sharded.names();
    record["shapes"] = sharded.shapes();
  }
  return record;
}

void check_sharded_group(const parallel::ShardedState& sharded, const ProcessGroup& group) {
  if (sharded.group().size() != group.size() || sharded.group().rank() != group.rank()) {
    throw SnapshotError(base::detail::str("the sharded state's process group (rank ",
                                          sharded.group().rank(), " of ", sharded.group().size(),
                                          ") is not the snapshot's (rank ", group.rank(), " of ",
                                          group.size(), "); give both the same group"));
  }
}

json save_shards(const snapshot::SnapshotOptions& options, ProcessGroup& group,
                 const parallel::ShardedState& sharded, uint64_t& sequence) {
  check_sharded_group(sharded, group);
  std::exception_ptr failure;
  if (group.rank() == 0) {
    try {
      sequence = next_snapshot_sequence(options);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (group.size() > 1) {  // 0: rank 0 failed
    at::Tensor chosen = at::full({1}, static_cast<int64_t>(sequence), at::kLong);
    group.broadcast(chosen, 0);
    sequence = static_cast<uint64_t>(chosen.item<int64_t>());
  }
  if (sequence == 0) {
    if (failure) std::rethrow_exception(failure);
    throw SnapshotError(base::detail::str("rank 0 could not number the next snapshot in ",
                                          options.directory(), "; its error says why"));
  }
  std::string mine;  // this rank's pieces
  const std::string main_name = snapshot_file_name(options.prefix(), sequence);
  try {
    mine = write_shard(options.directory(), main_name, sharded, sequence).dump();
  } catch (...) {
    failure = std::current_exception();
  }
  const auto [failed, cause] =
      comm::detail::first_failure(group, failure ? what_failed(failure) : std::string());
  if (failure) std::rethrow_exception(failure);  // its own cause; it wrote no shard
  if (failed >= 0) {
    // A save without every shard is none: this rank's shard gives its space back.
    std::error_code ignored;
    fs::remove(
        fs::path(options.directory()) / shard_file_name(main_name, group.rank(), group.size()),
        ignored);
    throw SnapshotError(base::detail::str("rank ", failed, " could not write its shard into ",
                                          options.directory(), ": ", cause));
  }
  const std::vector<std::string> everyone = group.size() > 1
                                                ? comm::detail::all_gather_bytes(group, mine)
                                                : std::vector<std::string>{mine};
  std::vector<json> pieces;
  for (const std::string& each : everyone) pieces.push_back(json::parse(each));
  return shards_record(sharded, pieces);
}

ShardImport prepare_shard_import(const std::string& main_path, const json& record,
                                 const parallel::ShardedState& sharded) {
  // Shard files, read as needed (Note [Sharded state in a snapshot]).
  const fs::path directory = fs::path(main_path).parent_path();
  const std::string main_name = fs::path(main_path).filename().string();
  std::map<int, snapshot::SnapshotFile> files;
  int old_world = 0;
  try {
    old_world = record.at("world").get<int>();
  } catch (const json::exception& e) {
    throw SnapshotError(main_path + ": malformed sharded-state record: " + e.what());
  }
  return prepare_shard_import(
      main_path, record, sharded, [&](int r) -> const snapshot::SnapshotFile* {
        auto found = files.find(r);
        if (found == files.end()) {
          found =
              files
                  .emplace(r, read_snapshot(
                                  (directory / shard_file_name(main_name, r, old_world)).string()))
                  .first;
        }
        return &found->second;
      });
}

ShardImport prepare_shard_import(const std::string& source, const json& record,
                                 const parallel::ShardedState& sharded, const ShardLookup& lookup) {
  auto fail = [&](const std::string& problem) { throw SnapshotError(source + ": " + problem); };
  const std::vector<at::Tensor> locals = local_parameters(sharded);
  const std::vector<Slot> slots = slots_of(sharded.local_optimizer());
  const size_t group_count = sharded.local_optimizer().param_groups().size();
  ShardImport result;
  try {
    const int old_world = record.at("world").get<int>();
    const int row_ranks = record.value("shard_ranks", old_world);
    if (row_ranks < 1 || old_world % row_ranks != 0)
      fail(base::detail::str("its sharded-state record has rows of ", row_ranks,
                             " ranks in a world of ", old_world));
    const size_t saved_count = record.at("numels").size();
    const std::vector<size_t> saved_index = match_saved_parameters(record, sharded, fail);
    // Every saved piece, by saved parameter.
    std::vector<std::vector<SavedPiece>> saved(saved_count);
    const json& ranks = record.at("pieces");
    if (!ranks.is_array() || static_cast<int>(ranks.size()) != old_world)
      fail(base::detail::str("its sharded-state record lists ", ranks.size(),
                             " shards for a world of ", old_world));
    for (int r = 0; r < old_world; ++r) {
      for (size_t i = 0; i < ranks[r].size(); ++i) {
        const auto triple = ranks[r][i].get<std::vector<int64_t>>();
        if (triple.size() != 3 || triple[0] < 0 || triple[0] >= static_cast<int64_t>(saved_count))
          fail("its sharded-state record has a malformed piece " + ranks[r][i].dump());
        saved[triple[0]].push_back({r, i, triple[1], triple[2]});
      }
    }

    // The shards, checked as first needed.
    std::map<int, json> descriptions;
    auto shard = [&](int r) -> const snapshot::SnapshotFile& {
      const snapshot::SnapshotFile* file = lookup(r);
      if (file == nullptr) fail(base::detail::str("rank ", r, "'s shard is not at hand"));
      if (descriptions.count(r) == 0) {
        json scalars = json::parse(file->scalars_json);
        if (scalars.at("rank").get<int>() != r || scalars.at("pieces") != ranks[r]) {
          fail(base::detail::str(file->path, " is not rank ", r, "'s shard of this snapshot"));
        }
        descriptions[r] = scalars.at("optimizer");
        if (descriptions[r].at("groups").size() != group_count) {
          fail(base::detail::str("its optimizer has ", descriptions[r].at("groups").size(),
                                 " param groups, this one has ", group_count,
                                 "; make the same groups as the job that saved it"));
        }
      }
      return *file;
    };

    std::vector<json> states(group_count, json::array());
    const auto mine = sharded.pieces();
    if (sharded.holds_values()) result.values.resize(mine.size());
    for (size_t j = 0; j < mine.size(); ++j) {
      const auto& piece = mine[j];
      const int64_t local = locals.at(j).numel();  // past the piece: zeros
      const bool stepped = j < slots.size();       // Note [Pieces outside the optimizer]
      const std::string target_prefix = stepped ? state_prefix(slots[j]) : "";
      if (sharded.holds_values()) result.values[j] = at::zeros({local}, locals[j].options());
      std::optional<json> entry;
      bool without_state = false;
      int64_t covered = 0;
      for (const SavedPiece& old : sources_of(saved[saved_index.at(piece.parameter)], piece.begin,
                                              piece.length, row_ranks, lookup)) {
        const int64_t lo = std::max(piece.begin, old.begin);
        const int64_t hi = std::min(piece.begin + piece.length, old.begin + old.length);
        if (lo >= hi) continue;
        covered += hi - lo;
        const snapshot::SnapshotFile& file = shard(old.rank);
        if (sharded.holds_values()) {
          const std::string key = base::detail::str("value/p", old.index);
          auto found = file.tensors.find(key);
          if (found == file.tensors.end() || found->second.numel() != old.length) {
            fail(base::detail::str(file.path, ": ", key, " is missing or not ", old.length,
                                   " elements"));
          }
          result.values[j]
              .narrow(0, lo - piece.begin, hi - lo)
              .copy_(found->second.reshape({-1}).narrow(0, lo - old.begin, hi - lo));
        }
        if (!stepped) continue;  // its values alone
        const std::optional<Slot> from = saved_slot(descriptions[old.rank], old.index);
        const json& old_entry =
            from ? descriptions[old.rank].at("groups").at(from->group).at("state").at(from->index)
                 : json(nullptr);  // saved outside the optimizer: no state
        if (old_entry.is_null()) {
          without_state = true;
          continue;
        }
        if (entry && *entry != old_entry) {
          fail(base::detail::str("the shards disagree on the state of parameter #", piece.parameter,
                                 ": ", entry->dump(), " and ", old_entry.dump()));
        }
        entry = old_entry;
        const std::string source_prefix = state_prefix(*from);
        for (auto it = file.tensors.lower_bound(source_prefix);
             it != file.tensors.end() && it->first.rfind(source_prefix, 0) == 0; ++it) {
          if (it->second.numel() != old.length) {
            fail(base::detail::str(file.path, ": ", it->first, " is ", describe_tensor(it->second),
                                   " for a piece of ", old.length, " elements"));
          }
          at::Tensor& state =
              result.tensors[target_prefix + it->first.substr(source_prefix.size())];
          if (!state.defined()) state = at::zeros({local}, it->second.options());
          state.narrow(0, lo - piece.begin, hi - lo)
              .copy_(it->second.reshape({-1}).narrow(0, lo - old.begin, hi - lo));
        }
      }
      if (covered != piece.length) {
        fail(base::detail::str("its shards hold ", covered, " of the ", piece.length,
                               " elements of parameter #", piece.parameter, " from element ",
                               piece.begin, " that this rank owns"));
      }
      if (entry && without_state) {
        fail(base::detail::str("parameter #", piece.parameter,
                               " has optimizer state in some shards and none in others"));
      }
      if (stepped) states.at(slots[j].group).push_back(entry ? *entry : json(nullptr));
    }
    for (int r = 0; descriptions.empty() && r < old_world; ++r) {  // no pieces: options only
      if (lookup(r) != nullptr) shard(r);
    }
    if (descriptions.empty()) fail("no shard is at hand");
    result.description = descriptions.begin()->second;
    for (size_t g = 0; g < group_count; ++g) {
      json& group = result.description.at("groups").at(g);
      group["params"] = states[g].size();
      group["state"] = std::move(states[g]);
    }
  } catch (const json::exception& e) {
    fail(std::string("malformed sharded-state record: ") + e.what());
  }
  check_optimizer(source + " (this rank's shard of the optimizer state)", result.description,
                  result.tensors, sharded.local_optimizer());
  return result;
}

void apply_shard_import(const ShardImport& import, parallel::ShardedState& sharded) {
  {
    torch::NoGradGuard no_grad;
    const std::vector<at::Tensor> locals = local_parameters(sharded);
    for (size_t j = 0; j < import.values.size(); ++j) {
      locals[j].copy_(import.values[j].view(locals[j].sizes()));
    }
  }
  import_optimizer(import.description, import.tensors, sharded.local_optimizer());
}

}  // namespace ddp::snapshot::detail
