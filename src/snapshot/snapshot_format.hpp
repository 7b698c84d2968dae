#pragma once

// Internal: the on-disk snapshot format (Note [What a snapshot file is] in
// ddp/snapshot.hpp): writing records to a file atomically, reading and
// verifying one.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot::detail {

inline constexpr char kSnapshotMagic[8] = {'D', 'D', 'P', 'S', 'N', 'A', 'P', '1'};
inline constexpr char kSnapshotEndMarker[8] = {'D', 'D', 'P', 'S', 'E', 'N', 'D', '1'};
inline constexpr uint32_t kSnapshotFormatVersion = 1;
inline constexpr uint32_t kSnapshotHeaderSize = 64;
inline constexpr uint32_t kRecordTensor = 1;
inline constexpr uint32_t kRecordJson = 2;

/// CRC-32 (zlib's) of `size` bytes, continuing from `crc`.
uint32_t crc32_update(uint32_t crc, const void* data, size_t size);

/// A whole snapshot file around `payload` (records, then the end marker,
/// as SnapshotWriter lays them out): the header with its sizes and CRCs
/// for that payload, world size 1, sequence 1. For the fuzz target, which
/// mutates payloads that the CRCs would otherwise stop at the header.
std::vector<unsigned char> seal_snapshot_payload(const unsigned char* payload, size_t size);

/// Writes one snapshot to a temporary file and renames it into place.
///
/// Note [The header is written last]
/// The payload is streamed (tensors are not copied into one buffer), so its
/// size and checksum are known only at the end: the writer reserves the
/// header, streams the records, appends the end marker, then fills in the
/// header, fsyncs, and only then renames. A writer that dies at any point
/// leaves only the temporary file, which readers never look at.
class SnapshotWriter {
 public:
  /// Creates (truncating) `temp_path`; throws SnapshotError on failure.
  explicit SnapshotWriter(std::string temp_path);
  /// Closes and removes the temporary file unless commit() succeeded.
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  /// Appends a tensor record (copied to a contiguous CPU tensor first).
  void add_tensor(const std::string& name, const at::Tensor& tensor);
  /// Appends a JSON record.
  void add_json(const std::string& name, const std::string& json_text);
  /// Writes the end marker and the header, fsyncs, renames the file to
  /// `final_path` and fsyncs the directory.
  void commit(const std::string& final_path, uint32_t world_size, uint64_t sequence);

 private:
  void put(const void* data, size_t size);  // buffered, counted, checksummed
  void put_u32(uint32_t value) { put(&value, sizeof value); }
  void put_u64(uint64_t value) { put(&value, sizeof value); }
  void put_string(const std::string& text);
  void flush();
  void write_all(const void* data, size_t size);  // straight to the file
  [[noreturn]] void fail(const std::string& what) const;

  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  std::string buffer_;
  uint64_t payload_size_ = 0;
  uint32_t payload_crc_ = 0;
};

/// What keeps `tensor` from being a record named `name` (too long a name,
/// undefined, not dense, a dtype the format lacks), or "" when nothing does.
std::string tensor_record_problem(const std::string& name, const at::Tensor& tensor);

/// Reads and verifies one snapshot file (ddp::snapshot::read_snapshot_file).
snapshot::SnapshotFile read_snapshot(const std::string& path);

/// "[3, 4] float32": a tensor's shape and dtype, for messages.
std::string describe_tensor(const at::Tensor& tensor);

/// fsyncs the directory `path` so that a rename or unlink in it is durable.
void fsync_directory(const std::string& path);

}  // namespace ddp::snapshot::detail
