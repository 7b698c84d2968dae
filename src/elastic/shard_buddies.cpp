#include "elastic/shard_buddies.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/snapshot/errors.hpp"
#include "elastic/commit_layout.hpp"
#include "snapshot/optimizer_state.hpp"
#include "snapshot/sharded_state.hpp"

namespace ddp::elastic::detail {
namespace {

using nlohmann::json;
using snapshot::SnapshotFile;

// A shard as bytes, to travel through a collective: the length of a JSON
// header (u64), the header {"scalars": text, "tensors": [[name, dtype,
// sizes], ...]}, then each tensor's bytes in the header's order.
std::string pack_shard(const SnapshotFile& shard) {
  size_t payload = 0;
  for (const auto& entry : shard.tensors) payload += entry.second.nbytes();
  const std::string header =
      json{{"scalars", shard.scalars_json}, {"tensors", tensor_layout(shard)}}.dump();
  const uint64_t header_size = header.size();
  std::string bytes;
  bytes.reserve(sizeof header_size + header.size() + payload);
  bytes.append(reinterpret_cast<const char*>(&header_size), sizeof header_size);
  bytes.append(header);
  for (const auto& entry : shard.tensors) {
    const at::Tensor tensor = entry.second.contiguous();
    bytes.append(static_cast<const char*>(tensor.data_ptr()), tensor.nbytes());
  }
  return bytes;
}

// The header of packed shard bytes; `payload` (if given) becomes where the
// tensors' bytes start.
json shard_header(const std::string& bytes, const std::string& what, size_t* payload = nullptr) {
  uint64_t header_size = 0;
  if (bytes.size() >= sizeof header_size)
    std::memcpy(&header_size, bytes.data(), sizeof header_size);
  if (bytes.size() < sizeof header_size || bytes.size() - sizeof header_size < header_size) {
    throw SnapshotError(base::detail::str(what, " arrived truncated (", bytes.size(),
                                          " bytes); the ranks run different ddp builds?"));
  }
  if (payload != nullptr) *payload = sizeof header_size + header_size;
  return json::parse(bytes.substr(sizeof header_size, header_size));
}

SnapshotFile unpack_shard(const std::string& bytes, const std::string& what) {
  size_t offset = 0;
  const json header = shard_header(bytes, what, &offset);
  SnapshotFile shard =
      allocate_from_layout(header.at("scalars").get<std::string>(), header.at("tensors"));
  shard.path = what;
  shard.world_size = 1;
  for (auto& entry : shard.tensors) {  // in the layout's (the map's) order
    at::Tensor& tensor = entry.second;
    if (bytes.size() - offset < tensor.nbytes()) {
      throw SnapshotError(base::detail::str(what, " arrived truncated (", bytes.size(),
                                            " bytes); the ranks run different ddp builds?"));
    }
    std::memcpy(tensor.data_ptr(), bytes.data() + offset, tensor.nbytes());
    offset += tensor.nbytes();
  }
  return shard;
}

std::string shard_name(int owner, int64_t commit) {
  return base::detail::str("(rank ", owner, "'s shard of commit ", commit, ", in memory)");
}

// The old ranks whose shards rank `rank` keeps (Note [Sharded state in memory]).
std::set<int> kept_by(int rank, int size, int old_world) {
  if (size != old_world) {  // a new partition: it may overlap any old shard
    std::set<int> all;
    for (int s = 0; s < old_world; ++s) all.insert(s);
    return all;
  }
  return {rank, (rank + size - 1) % size};
}

}  // namespace

ShardCommit commit_shards(const parallel::ShardedState& sharded, int64_t commit) {
  ProcessGroup& group = sharded.group();
  const int rank = group.rank(), size = group.size();
  snapshot::detail::ShardRecords records =
      snapshot::detail::shard_records(sharded, snapshot::detail::RowsSaved::kEvery);
  SnapshotFile own;
  own.path = shard_name(rank, commit);
  own.world_size = 1;
  own.scalars_json = records.scalars.dump();
  for (const auto& [name, tensor] : records.tensors) {
    own.tensors.emplace(name, tensor.detach().to(at::kCPU).contiguous().clone());
  }
  ShardCommit result;
  result.commit = commit;
  std::vector<json> pieces(static_cast<size_t>(size));
  if (size == 1) {
    pieces[0] = records.scalars.at("pieces");
  } else {
    // Note [Sharded state in memory]: without point-to-point messages, every
    // rank's shard reaches every rank; each keeps only its buddy's.
    const std::vector<std::string> everyone =
        comm::detail::all_gather_bytes(group, pack_shard(own));
    for (int r = 0; r < size; ++r) {
      const std::string what = shard_name(r, commit);
      pieces[static_cast<size_t>(r)] =
          json::parse(
              shard_header(everyone[static_cast<size_t>(r)], what).at("scalars").get<std::string>())
              .at("pieces");
    }
    const int buddy = (rank + size - 1) % size;
    result.shards.emplace(
        buddy, unpack_shard(everyone[static_cast<size_t>(buddy)], shard_name(buddy, commit)));
  }
  result.record = snapshot::detail::shards_record(sharded, pieces);
  result.shards.emplace(rank, std::move(own));
  return result;
}

ShardCommit sync_shards(ProcessGroup& group, const ShardCommit* mine, const json& record,
                        int64_t commit) {
  const int rank = group.rank(), size = group.size();
  const int old_world = record.at("world").get<int>();
  json held = json::array();
  if (mine != nullptr && mine->commit == commit) {
    for (const auto& entry : mine->shards) held.push_back(entry.first);
  }
  std::vector<std::set<int>> holds(static_cast<size_t>(size));
  const std::vector<std::string> everyone = comm::detail::all_gather_bytes(group, held.dump());
  for (int r = 0; r < size; ++r) {
    for (const auto& s : json::parse(everyone[static_cast<size_t>(r)])) {
      holds[static_cast<size_t>(r)].insert(s.get<int>());
    }
  }
  // Every rank finds the same lost shard, before anything moves.
  std::vector<int> source(static_cast<size_t>(old_world), -1);
  for (int s = 0; s < old_world; ++s) {
    for (int r = size - 1; r >= 0; --r) {
      if (holds[static_cast<size_t>(r)].count(s) != 0) source[static_cast<size_t>(s)] = r;
    }
    if (source[static_cast<size_t>(s)] < 0) {
      throw SnapshotError(base::detail::str(
          "commit ", commit, " in memory lost rank ", s, "'s ",
          record.value("kind", "ZeroRedundancyOptimizer"), " shard: ranks ", s, " and ",
          (s + 1) % old_world, " of ", old_world,
          ", which held its only copies, both failed; a sharded job that may lose two "
          "neighbouring ranks must resume from snapshot files (SnapshotManager)"));
    }
  }
  ShardCommit result;
  result.commit = commit;
  result.record = record;
  const std::set<int> wanted = kept_by(rank, size, old_world);
  for (int s = 0; s < old_world; ++s) {
    const int root = source[static_cast<size_t>(s)];
    bool someone_lacks = false;
    for (int r = 0; r < size; ++r) {
      someone_lacks = someone_lacks || (kept_by(r, size, old_world).count(s) != 0 &&
                                        holds[static_cast<size_t>(r)].count(s) == 0);
    }
    if (someone_lacks) {
      const std::string bytes = comm::detail::broadcast_bytes(
          group, rank == root ? pack_shard(mine->shards.at(s)) : std::string(), root);
      if (wanted.count(s) != 0 && holds[static_cast<size_t>(rank)].count(s) == 0) {
        result.shards.emplace(s, unpack_shard(bytes, shard_name(s, commit)));
      }
    }
    if (wanted.count(s) != 0 && holds[static_cast<size_t>(rank)].count(s) != 0) {
      result.shards.emplace(s, mine->shards.at(s));
    }
  }
  return result;
}

void restore_shards(const ShardCommit& shards, parallel::ShardedState& sharded) {
  const snapshot::detail::ShardImport import = snapshot::detail::prepare_shard_import(
      base::detail::str("commit ", shards.commit, " in memory"), shards.record, sharded,
      [&](int r) -> const SnapshotFile* {
        auto found = shards.shards.find(r);
        return found == shards.shards.end() ? nullptr : &found->second;
      });
  snapshot::detail::apply_shard_import(import, sharded);
}

}  // namespace ddp::elastic::detail
