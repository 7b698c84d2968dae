#pragma once

// Internal: a zip archive's central directory, read and checked before
// LibTorch's PyTorchStreamReader (miniz) reads any record (Note [A hostile
// file is an error] in ddp/formats/torch_file.hpp). miniz allocates a
// record's declared size before it reads it, so a 100-byte file could claim
// terabytes; here every record must be stored uncompressed, as torch.save
// writes it, and lie wholly inside the file.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp::formats::detail {

/// How many of a file's last bytes can hold its end of central directory
/// record (22 bytes and a comment of up to 65,535).
inline constexpr uint64_t kMaxEndRecordBytes = 22 + 0xffff;

/// Where in `tail` (a file's last bytes, at most kMaxEndRecordBytes) the end
/// of central directory record starts whose comment ends the file, or
/// nullopt: the test of a zip archive's end, for identify_file() too.
std::optional<size_t> find_end_record(const std::vector<unsigned char>& tail);

/// One checked record of the archive.
struct ZipRecord {
  uint64_t data_offset = 0;  ///< Where its bytes start in the file.
  uint64_t size = 0;         ///< Its bytes (stored: compressed = uncompressed).
};

/// `length` for an archive that ends where its file ends.
inline constexpr uint64_t kToTheEnd = ~uint64_t{0};

/// The records of the zip archive at `path` by name (the archive's own
/// names, such as "archive/data.pkl"), each checked as above; ZIP64
/// archives (torch.save's files above 4 GiB) included. The archive is the
/// `length` bytes of the file from `base` (a torch.save stream inside a
/// DCP file), its offsets counted from `base`.
/// \throws FormatError naming `path`, the byte and the problem: no end of
///   central directory, a directory or record outside the file, a
///   compressed or encrypted record, a name given twice.
std::map<std::string, ZipRecord> read_zip_directory(const std::string& path, uint64_t base = 0,
                                                    uint64_t length = kToTheEnd);

}  // namespace ddp::formats::detail
