#include "snapshot/snapshot_writing.hpp"

#include <filesystem>
#include <string>

#include "ddp/snapshot/errors.hpp"
#include "snapshot/snapshot_directory.hpp"
#include "snapshot/snapshot_format.hpp"

namespace ddp::snapshot::detail {
namespace {

namespace fs = std::filesystem;

// Writes `tensors` and `scalars_text` into `directory`/.<name>.tmp and
// renames it to `name` (Note [Writing is atomic]).
void write_records_file(const std::string& directory, const std::string& name,
                        const NamedTensors& tensors, const std::string& scalars_text,
                        int world_size, uint64_t sequence) {
  SnapshotWriter writer((fs::path(directory) / ("." + name + ".tmp")).string());
  for (const auto& [key, tensor] : tensors) writer.add_tensor(key, tensor);
  writer.add_json("scalars", scalars_text);
  writer.commit((fs::path(directory) / name).string(), static_cast<uint32_t>(world_size), sequence);
}

}  // namespace

std::string snapshot_path(const snapshot::SnapshotOptions& options, uint64_t sequence) {
  return (fs::path(options.directory()) / snapshot_file_name(options.prefix(), sequence)).string();
}

std::string write_main_file(const snapshot::SnapshotOptions& options, const NamedTensors& tensors,
                            const std::string& scalars_text, int world_size, uint64_t sequence) {
  write_records_file(options.directory(), snapshot_file_name(options.prefix(), sequence), tensors,
                     scalars_text, world_size, sequence);
  // Keep the newest keep_last snapshots; remove temporary files of writers
  // that died before their rename (Note [Writing is atomic]).
  prune_snapshots(options);
  fsync_directory(options.directory());
  return snapshot_path(options, sequence);
}

void write_shard_file(const std::string& directory, const std::string& main_name,
                      const NamedTensors& tensors, const std::string& scalars_text, int rank,
                      int world, uint64_t sequence) {
  // Rank 0 makes the directory where it picks the sequence; on a node-local
  // disk of another node nobody has.
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) {
    throw SnapshotError("cannot create snapshot directory " + directory + " for rank " +
                        std::to_string(rank) + "'s shard: " + error.message());
  }
  write_records_file(directory, shard_file_name(main_name, rank, world), tensors, scalars_text,
                     world, sequence);
}

}  // namespace ddp::snapshot::detail
