// Reading idx files (MNIST's format), plain or gzipped.
//
// Note [Never trust the header]
// Every size in an idx header is checked before it is acted on: the element
// count is bounded by kMaxIdxElements, and the data is read in chunks into a
// buffer that grows only as bytes actually arrive, so a corrupted header that
// claims gigabytes never makes the reader allocate them. Non-regular files
// (FIFOs, devices) are refused so that a read can never block.

#include "ddp/data/idx.hpp"
#include "base/str.hpp"
#include "ddp/data/errors.hpp"

#include <torch/torch.h>
#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

namespace ddp::data {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& problem,
                       const std::string& fix) {
  throw DataError("idx file '" + path + "': " + problem + ". " + fix);
}

constexpr const char* kRedownload = "Download the file again; it is damaged or not an idx file";

std::string hex_bytes(const unsigned char* bytes, size_t n) {
  std::ostringstream out;
  static const char* digits = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out << ' ';
    out << digits[bytes[i] >> 4] << digits[bytes[i] & 0xf];
  }
  return out.str();
}

// A file read either directly or through zlib, chosen by its first two bytes.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path) {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      const int error = errno;
      if (error == ENOENT)
        fail(path, "no such file", "Check the path (and the dataset root directory)");
      fail(path, std::string("cannot be accessed: ") + std::strerror(error),
           "Check the path and its permissions");
    }
    if (!S_ISREG(info.st_mode))
      fail(path, "is not a regular file (a directory, device or pipe)",
           "Pass the path of an idx file");
    plain_ = std::fopen(path.c_str(), "rb");
    if (plain_ == nullptr)
      fail(path, std::string("cannot be opened: ") + std::strerror(errno),
           "Check the file's permissions");
    unsigned char magic[2] = {0, 0};
    const size_t got = std::fread(magic, 1, 2, plain_);
    gzipped_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!gzipped_) {
      std::rewind(plain_);
      return;
    }
    std::fclose(plain_);
    plain_ = nullptr;
    gz_ = gzopen(path.c_str(), "rb");
    if (gz_ == nullptr) fail(path, "cannot be opened as gzip", "Check the file's permissions");
    gzbuffer(gz_, 1 << 17);  // Larger than the default 8 KiB: fewer syscalls.
  }
  ~ByteSource() {
    if (plain_ != nullptr) std::fclose(plain_);
    if (gz_ != nullptr) gzclose(gz_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  bool gzipped() const { return gzipped_; }

  // Reads up to `n` bytes; fewer only at the end of the data.
  size_t read(void* out, size_t n) {
    auto* bytes = static_cast<unsigned char*>(out);
    size_t total = 0;
    while (total < n) {
      const size_t want = std::min<size_t>(n - total, size_t{1} << 30);
      size_t got = 0;
      if (gz_ != nullptr) {
        const int result = gzread(gz_, bytes + total, static_cast<unsigned>(want));
        if (result < 0) fail_gzip();
        got = static_cast<size_t>(result);
      } else {
        got = std::fread(bytes + total, 1, want, plain_);
        if (got < want && std::ferror(plain_))
          fail(path_, std::string("read error: ") + std::strerror(errno),
               "Check the disk and the file");
      }
      total += got;
      if (got < want) break;
    }
    return total;
  }

  // What zlib says about an early end of a gzipped file, for messages.
  std::string end_note() {
    if (gz_ == nullptr) return "";
    int code = Z_OK;
    gzerror(gz_, &code);
    return code == Z_BUF_ERROR ? " (the gzip stream itself is cut short)" : "";
  }

 private:
  [[noreturn]] void fail_gzip() {
    int code = Z_OK;
    const char* message = gzerror(gz_, &code);
    fail(path_, std::string("corrupt gzip data (zlib: ") + (message ? message : "unknown") + ")",
         kRedownload);
  }

  std::string path_;
  std::FILE* plain_ = nullptr;
  gzFile gz_ = nullptr;
  bool gzipped_ = false;
};

struct IdxType {
  unsigned char code;
  const char* name;
  at::ScalarType dtype;
  size_t bytes;
};

constexpr IdxType kTypes[] = {
    {0x08, "uint8", at::kByte, 1},    {0x09, "int8", at::kChar, 1},
    {0x0B, "int16", at::kShort, 2},   {0x0C, "int32", at::kInt, 4},
    {0x0D, "float32", at::kFloat, 4}, {0x0E, "float64", at::kDouble, 8},
};

// The most dimensions accepted: more than any real data set uses, and far
// below the 255 a corrupted byte can claim.
constexpr int kMaxDims = 16;

uint32_t big_endian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Converts big-endian elements of `width` bytes to this machine's order.
void to_host_order(unsigned char* data, size_t count, size_t width) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  (void)data, (void)count, (void)width;
#else
  for (size_t i = 0; i < count; ++i, data += width) std::reverse(data, data + width);
#endif
}

std::string shape_text(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? " x " : "") << dims[i];
  return dims.empty() ? "a scalar" : out.str();
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  ByteSource source(path);
  const std::string kind = source.gzipped() ? "gzipped file" : "file";

  unsigned char magic[4] = {0, 0, 0, 0};
  const size_t magic_bytes = source.read(magic, 4);
  if (magic_bytes < 4)
    fail(path,
         base::detail::str(
             "not an idx file: the ", kind, " holds only ", magic_bytes, " bytes (",
             magic_bytes ? hex_bytes(magic, magic_bytes) : "empty",
             "), an idx file starts with a 4-byte magic number 00 00 <type> <dimensions>"),
         kRedownload);
  if (magic[0] != 0 || magic[1] != 0)
    fail(path,
         "not an idx file: bad magic number " + hex_bytes(magic, 4) +
             " (an idx file starts with 00 00 <type> <dimensions>, e.g. 00 00 08 03 for images)",
         "Pass an idx file such as train-images-idx3-ubyte(.gz)");
  const IdxType* type = nullptr;
  for (const IdxType& candidate : kTypes)
    if (candidate.code == magic[2]) type = &candidate;
  if (type == nullptr)
    fail(path,
         "unknown type code 0x" + hex_bytes(magic + 2, 1) + " in magic number " +
             hex_bytes(magic, 4) +
             " (known: 08 uint8, 09 int8, 0b int16, 0c int32, 0d float32, 0e float64)",
         kRedownload);
  const int ndims = magic[3];
  if (ndims > kMaxDims)
    fail(path,
         base::detail::str("declares ", ndims, " dimensions, more than the ", kMaxDims,
                           " supported"),
         kRedownload);

  std::vector<unsigned char> header(4 * static_cast<size_t>(ndims));
  const size_t header_bytes = source.read(header.data(), header.size());
  if (header_bytes < header.size())
    fail(
        path,
        base::detail::str("truncated header: ", ndims, " dimensions need ", header.size(),
                          " bytes after the magic number, found ", header_bytes, source.end_note()),
        kRedownload);
  std::vector<int64_t> dims(ndims);
  int64_t count = 1;
  // Zero dimensions count as 1 here: [0, 2^32-1, 2^32-1] holds no element,
  // but its strides would still overflow int64.
  int64_t bound = 1;
  for (int d = 0; d < ndims; ++d) {
    dims[d] = big_endian32(header.data() + 4 * d);
    // bound <= 2^31 and dims[d] < 2^32, so the product cannot overflow int64.
    count *= dims[d];
    bound *= std::max<int64_t>(dims[d], 1);
    if (bound > kMaxIdxElements) {
      std::vector<int64_t> shown(dims.begin(), dims.begin() + d + 1);
      const bool has_zero = std::count(shown.begin(), shown.end(), 0) > 0;
      fail(path,
           base::detail::str(
               "implausible dimensions ", shape_text(shown), d + 1 < ndims ? " x ..." : "",
               ": more than ", kMaxIdxElements, " elements",
               has_zero ? " (counting empty dimensions as 1, as their strides do)" : ""),
           kRedownload);
    }
  }

  // See Note [Never trust the header]: grow the buffer as data arrives.
  const size_t expected = static_cast<size_t>(count) * type->bytes;
  std::vector<unsigned char> data;
  while (data.size() < expected) {
    const size_t before = data.size();
    // Doubling from 64 KiB: few reads for real files, little zeroing for
    // a damaged one that claims much more than it holds.
    const size_t want = std::min(std::max(before, size_t{1} << 16), expected - before);
    data.resize(before + want);
    const size_t got = source.read(data.data() + before, want);
    if (got < want) {
      const size_t found = before + got;
      fail(path,
           base::detail::str("truncated data: ", shape_text(dims), " ", type->name,
                             " elements: expected ", expected, " bytes of data, found ", found,
                             source.end_note()),
           kRedownload);
    }
  }
  unsigned char probe[4096];
  size_t extra = 0;
  // Counting stops at 64 MiB so that a decompression bomb cannot keep us busy.
  constexpr size_t kCountLimit = size_t{64} << 20;
  for (size_t got; extra < kCountLimit && (got = source.read(probe, sizeof probe)) > 0;)
    extra += got;
  if (extra > 0)
    fail(path,
         base::detail::str("trailing garbage: ", extra >= kCountLimit ? "at least " : "", extra,
                           " bytes after the ", expected, " bytes of data that ", shape_text(dims),
                           " ", type->name, " elements need"),
         "Check that the header's dimensions match the data, or download the file again");

  to_host_order(data.data(), static_cast<size_t>(count), type->bytes);
  at::Tensor result = at::empty(dims, at::TensorOptions().dtype(type->dtype));
  if (expected > 0) std::memcpy(result.data_ptr(), data.data(), expected);
  return result;
}

}  // namespace ddp::data
