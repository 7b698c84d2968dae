#include "formats/zip_directory.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <vector>

#include "base/str.hpp"
#include "ddp/formats/errors.hpp"

namespace ddp::formats::detail {
namespace {

// The signatures and fixed sizes of PKWARE's APPNOTE.TXT (sections 4.3.7,
// 4.3.12, 4.3.14-4.3.16).
constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50;
constexpr uint32_t kEnd = 0x06054b50, kEnd64 = 0x06064b50, kEnd64Locator = 0x07064b50;
constexpr uint64_t kLocalHeaderBytes = 30, kCentralHeaderBytes = 46, kEndBytes = 22;
constexpr uint64_t kEnd64Bytes = 56, kEnd64LocatorBytes = 20;
constexpr uint16_t kZip64Extra = 0x0001;

// The archive: the whole file, or `length` bytes of it from `base` (a
// torch.save stream inside a DCP file); offsets are the archive's own.
class ZipFile {
 public:
  ZipFile(const std::string& path, uint64_t base, uint64_t length)
      : path_(path), base_(base), in_(path, std::ios::binary) {
    if (!in_) fail(0, "no such file");
    in_.seekg(0, std::ios::end);
    const auto file_size = static_cast<uint64_t>(in_.tellg());
    if (base > file_size || (length != kToTheEnd && length > file_size - base)) {
      throw FormatError(base::detail::str("cannot read the zip archive ", path, ": its ", length,
                                          " bytes at byte ", base, " reach past the file's ",
                                          file_size));
    }
    size_ = length == kToTheEnd ? file_size - base : length;
  }
  uint64_t size() const { return size_; }
  // `n` bytes at `offset`, which must lie inside the archive.
  std::vector<unsigned char> read(uint64_t offset, uint64_t n, const char* what) {
    if (offset > size_ || n > size_ - offset) {
      fail(offset, base::detail::str(what, " of ", n, " bytes reaches past the file's ", size_));
    }
    std::vector<unsigned char> bytes(n);
    in_.seekg(static_cast<std::streamoff>(base_ + offset));
    if (n > 0 && !in_.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(n)))
      fail(offset, "a read failed");
    return bytes;
  }
  [[noreturn]] void fail(uint64_t at, const std::string& what) const {
    throw FormatError(base::detail::str("cannot read the zip archive ", path_, ": ", what,
                                        " (byte ", base_ + at, ")"));
  }

 private:
  const std::string& path_;
  const uint64_t base_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

// Little-endian fields of a byte buffer, bounds-checked.
struct Fields {
  const std::vector<unsigned char>& bytes;
  uint64_t number(size_t at, size_t width) const {
    uint64_t value = 0;
    for (size_t i = width; i-- > 0;) value = (value << 8) | bytes.at(at + i);
    return value;
  }
  uint16_t u16(size_t at) const { return static_cast<uint16_t>(number(at, 2)); }
  uint32_t u32(size_t at) const { return static_cast<uint32_t>(number(at, 4)); }
  uint64_t u64(size_t at) const { return number(at, 8); }
};

struct Directory {
  uint64_t offset = 0, size = 0, entries = 0;
};

Directory find_directory(ZipFile& file) {
  if (file.size() < kEndBytes) file.fail(0, "the file is shorter than an end of central directory");
  const uint64_t tail_start = file.size() - std::min(file.size(), kMaxEndRecordBytes);
  const std::vector<unsigned char> tail =
      file.read(tail_start, file.size() - tail_start, "the end of the archive");
  const Fields f{tail};
  if (const std::optional<size_t> found = find_end_record(tail)) {
    const uint64_t at = *found;
    Directory d{f.u32(at + 16), f.u32(at + 12), f.u16(at + 10)};
    if (d.offset != 0xffffffff && d.size != 0xffffffff && d.entries != 0xffff) return d;
    // ZIP64: the locator sits just before the end record and points at the
    // ZIP64 end record.
    const uint64_t end = tail_start + at;
    if (end < kEnd64LocatorBytes) file.fail(end, "a ZIP64 archive without its locator");
    const std::vector<unsigned char> locator =
        file.read(end - kEnd64LocatorBytes, kEnd64LocatorBytes, "the ZIP64 locator");
    if (Fields{locator}.u32(0) != kEnd64Locator)
      file.fail(end, "a ZIP64 archive without its locator");
    const uint64_t record_at = Fields{locator}.u64(8);
    const std::vector<unsigned char> record =
        file.read(record_at, kEnd64Bytes, "the ZIP64 end record");
    const Fields r{record};
    if (r.u32(0) != kEnd64) file.fail(record_at, "the ZIP64 end record has a wrong signature");
    return Directory{r.u64(48), r.u64(40), r.u64(32)};
  }
  file.fail(tail_start, "it has no end of central directory, so it is not a zip archive");
}

}  // namespace

std::optional<size_t> find_end_record(const std::vector<unsigned char>& tail) {
  if (tail.size() < kEndBytes) return std::nullopt;
  const Fields f{tail};
  for (size_t at = tail.size() - kEndBytes + 1; at-- > 0;) {
    if (f.u32(at) == kEnd && at + kEndBytes + f.u16(at + 20) == tail.size()) return at;
  }
  return std::nullopt;
}

std::map<std::string, ZipRecord> read_zip_directory(const std::string& path, uint64_t base,
                                                    uint64_t length) {
  ZipFile file(path, base, length);
  const Directory d = find_directory(file);
  if (d.entries > d.size / kCentralHeaderBytes) {
    file.fail(d.offset, base::detail::str("the directory claims ", d.entries, " records in ",
                                          d.size, " bytes"));
  }
  const std::vector<unsigned char> directory = file.read(d.offset, d.size, "the central directory");
  const Fields f{directory};
  std::map<std::string, ZipRecord> records;
  uint64_t at = 0;
  for (uint64_t i = 0; i < d.entries; ++i) {
    const uint64_t where = d.offset + at;
    if (directory.size() - at < kCentralHeaderBytes || f.u32(at) != kCentralHeader) {
      file.fail(where, base::detail::str("record ", i, " of ", d.entries,
                                         " has no central directory header"));
    }
    const uint16_t flags = f.u16(at + 8), method = f.u16(at + 10);
    uint64_t compressed = f.u32(at + 20), uncompressed = f.u32(at + 24);
    const uint64_t name_bytes = f.u16(at + 28), extra_bytes = f.u16(at + 30),
                   comment_bytes = f.u16(at + 32);
    uint64_t local = f.u32(at + 42);
    const uint64_t variable = name_bytes + extra_bytes + comment_bytes;
    if (directory.size() - at - kCentralHeaderBytes < variable) {
      file.fail(where,
                base::detail::str("record ", i, "'s name and fields reach past the directory"));
    }
    const std::string name(reinterpret_cast<const char*>(&directory[at + kCentralHeaderBytes]),
                           name_bytes);
    // ZIP64's extra field holds the 64-bit values of those set to all ones.
    for (uint64_t e = at + kCentralHeaderBytes + name_bytes;
         e + 4 <= at + kCentralHeaderBytes + name_bytes + extra_bytes;) {
      const uint16_t id = f.u16(e), n = f.u16(e + 2);
      if (e + 4 + n > at + kCentralHeaderBytes + name_bytes + extra_bytes) break;
      if (id == kZip64Extra) {
        uint64_t next = e + 4;
        for (uint64_t* value : {&uncompressed, &compressed, &local}) {
          if (*value == 0xffffffff && next + 8 <= e + 4 + n) *value = f.u64(next), next += 8;
        }
      }
      e += 4 + n;
    }
    if (method != 0 || (flags & 1) != 0 || compressed != uncompressed) {
      file.fail(where, "record " + name +
                           " is compressed or encrypted; torch.save stores its records "
                           "uncompressed");
    }
    const std::vector<unsigned char> header =
        file.read(local, kLocalHeaderBytes, ("the local header of " + name).c_str());
    const Fields h{header};
    if (h.u32(0) != kLocalHeader) file.fail(local, "record " + name + " has no local header");
    const uint64_t data = local + kLocalHeaderBytes + h.u16(26) + h.u16(28);
    if (data > file.size() || uncompressed > file.size() - data) {
      file.fail(local, base::detail::str("record ", name, " of ", uncompressed,
                                         " bytes reaches past the file's ", file.size()));
    }
    if (!records.emplace(name, ZipRecord{data, uncompressed}).second) {
      file.fail(where, "record " + name + " appears twice");
    }
    at += kCentralHeaderBytes + variable;
  }
  return records;
}

}  // namespace ddp::formats::detail
