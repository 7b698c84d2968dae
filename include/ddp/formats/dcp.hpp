#pragma once

/// \file dcp.hpp
/// PyTorch's Distributed Checkpoint (torch.distributed.checkpoint, "DCP")
/// on a file system, read and written without Python: a directory with a
/// `.metadata` file and one `__<rank>_<n>.distcp` file per writing rank.
/// ddp::snapshot maps a training state to and from it
/// (ddp/snapshot/distributed_checkpoint.hpp).
///
/// Note [The DCP subset ddp speaks]
/// DCP saves a flat dict: a key per tensor ("model.0.weight",
/// "optim.state.0.weight.exp_avg") and per other value
/// ("optim.param_groups.0.lr"). `.metadata` is a pickle (Python's default
/// protocol) of torch.distributed.checkpoint.metadata.Metadata: for each
/// tensor its dtype, size and chunks (boxes: offsets and sizes per
/// dimension, one or more per rank that saved part of it); for every item
/// where its bytes lie (file, offset, length); and planner_data, each key's
/// path in the nested dict it was flattened from. Every item is a
/// torch.save stream at its offset: a tensor chunk's elements, or any other
/// value pickled. ddp reads what FileSystemWriter writes (PyTorch 2.x, one
/// or several files per rank) and writes the same, one file per rank.
/// Refused by name: another storage layout (`storage_data` other than
/// FileSystemWriter's), a dtype torch.save has no storage class for, a
/// chunk outside its tensor, an item file outside the directory. The
/// metadata is read with the bounds of Note [A hostile file is an error]
/// (ddp/formats/torch_file.hpp) and calls nothing: the dataclasses are
/// read as data.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ddp/formats/py_value.hpp"

namespace ddp::formats {

/// A box of a tensor: an offset and a size in each dimension (none for a
/// 0-d tensor).
struct DcpBox {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  int64_t numel() const;
  /// Whether the box lies inside a tensor of `size` (as many dimensions,
  /// offsets and sizes 0 or more, without overflow).
  bool inside(const std::vector<int64_t>& size) const;
};

/// Where an item's torch.save stream lies: `length` bytes at `offset` of
/// `file`, a name in the checkpoint's directory.
struct DcpLocation {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
};

/// A saved chunk of a tensor.
struct DcpChunk {
  DcpBox box;
  DcpLocation location;
};

/// A tensor of the checkpoint: its dtype and full size, and its chunks.
struct DcpTensor {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> size;
  std::vector<DcpChunk> chunks;
};

/// What `.metadata` says.
struct DcpMetadata {
  std::map<std::string, DcpTensor> tensors;
  /// The values that are not tensors, each a pickled object.
  std::map<std::string, DcpLocation> objects;
  /// Each key's path in the nested state dict (strings, and integers for
  /// list positions), where the file gives one.
  std::map<std::string, std::vector<PyRef>> paths;
};

/// The name of the metadata file in a checkpoint's directory.
inline constexpr const char* kDcpMetadataFile = ".metadata";
/// The name of rank `rank`'s file number `file`: `__<rank>_<file>.distcp`.
inline std::string dcp_file_name(int rank, int file = 0) {
  return "__" + std::to_string(rank) + "_" + std::to_string(file) + ".distcp";
}

/// Reads `directory`/.metadata.
/// \throws FormatError naming the file and what does not fit Note [The DCP
///   subset ddp speaks].
DcpMetadata read_dcp_metadata(const std::string& directory);

/// Reads tensors and values of one checkpoint, any part of a tensor from the
/// chunks that hold it (at any other sharding than the one it was saved
/// with). Reads each item's stream when asked; keeps the chunks of the last
/// tensor read.
class DcpReader {
 public:
  /// \throws FormatError as read_dcp_metadata().
  explicit DcpReader(std::string directory);

  const DcpMetadata& metadata() const { return metadata_; }
  bool has_tensor(const std::string& key) const { return metadata_.tensors.count(key) > 0; }
  bool has_object(const std::string& key) const { return metadata_.objects.count(key) > 0; }

  /// The elements of tensor `key` inside `box` (contiguous, the saved
  /// dtype).
  /// \throws FormatError naming the key: no such tensor, a box outside it,
  ///   elements no chunk holds, a chunk whose stream is not a tensor of the
  ///   metadata's dtype and size.
  at::Tensor read(const std::string& key, const DcpBox& box);
  /// The whole tensor `key`.
  at::Tensor read(const std::string& key);
  /// The value `key` that is not a tensor.
  /// \throws FormatError naming the key when there is none.
  PyRef read_object(const std::string& key);

 private:
  std::string directory_;
  DcpMetadata metadata_;
  std::string cached_key_;
  std::map<size_t, at::Tensor> cached_chunks_;
};

/// An item one rank wrote, for the metadata.
struct DcpItem {
  std::string key;
  bool is_tensor = false;
  at::ScalarType dtype = at::kFloat;  ///< Tensors: dtype, size and box.
  std::vector<int64_t> size;
  DcpBox box;
  DcpLocation location;
};

/// One file of a checkpoint, `__<rank>_<file>.distcp`. A file not
/// finished (a write failed, a full disk) is removed with the writer, so
/// that a failed save gives its space back.
class DcpFileWriter {
 public:
  /// \throws FormatError when the file cannot be created.
  DcpFileWriter(const std::string& directory, int rank, int file = 0);
  ~DcpFileWriter();
  DcpFileWriter(const DcpFileWriter&) = delete;
  DcpFileWriter& operator=(const DcpFileWriter&) = delete;

  /// Appends `chunk`, the elements inside `box` of tensor `key` of full
  /// size `size`.
  /// \throws FormatError for a chunk that is not the box's shape, or a
  ///   failed write.
  void add_tensor(const std::string& key, const std::vector<int64_t>& size, const DcpBox& box,
                  const at::Tensor& chunk);
  /// Appends the value `key` that is not a tensor.
  void add_object(const std::string& key, const PyValue& value);
  /// Flushes and fsyncs the file; returns what it holds.
  /// \throws FormatError when that fails (the file is then removed).
  std::vector<DcpItem> finish();

 private:
  std::string path_;
  std::string name_;
  int fd_ = -1;
  uint64_t written_ = 0;
  std::vector<DcpItem> items_;
};

/// Writes `directory`/.metadata (atomically: a reader sees none or all of
/// it) for the items every rank wrote, with each key's path in the nested
/// state dict. Written last, after every rank's finish().
/// \throws FormatError for a tensor whose items disagree on its dtype or
///   size, or a failed write.
void write_dcp_metadata(const std::string& directory, const std::vector<DcpItem>& items,
                        const std::map<std::string, std::vector<PyRef>>& paths);

}  // namespace ddp::formats
