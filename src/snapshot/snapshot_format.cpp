#include "snapshot/snapshot_format.hpp"

#include <ATen/ATen.h>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "base/dtype_name.hpp"
#include "base/str.hpp"
#include "ddp/snapshot/errors.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the snapshot format stores raw little-endian bytes");

namespace ddp::snapshot::detail {
namespace {

// Stable dtype codes of the file format (c10's enum values may change).
constexpr std::array<std::pair<uint32_t, c10::ScalarType>, 12> kDtypeCodes{
    {{1, c10::kFloat},
     {2, c10::kDouble},
     {3, c10::kHalf},
     {4, c10::kBFloat16},
     {5, c10::kLong},
     {6, c10::kInt},
     {7, c10::kShort},
     {8, c10::kChar},
     {9, c10::kByte},
     {10, c10::kBool},
     {11, c10::kComplexFloat},
     {12, c10::kComplexDouble}}};

constexpr size_t kMaxName = 4096;
constexpr uint32_t kMaxDims = 64;

std::string system_error() { return std::strerror(errno); }

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

// Header layout (little-endian, kSnapshotHeaderSize bytes).
struct Header {
  uint32_t version = kSnapshotFormatVersion;
  uint32_t header_size = kSnapshotHeaderSize;
  uint32_t world_size = 0;
  uint32_t payload_crc = 0;
  uint64_t sequence = 0;
  int64_t created_unix_ms = 0;
  uint64_t payload_size = 0;
};

std::array<unsigned char, kSnapshotHeaderSize> encode_header(const Header& h) {
  std::array<unsigned char, kSnapshotHeaderSize> bytes{};
  std::memcpy(bytes.data(), kSnapshotMagic, 8);
  std::memcpy(bytes.data() + 8, &h.version, 4);
  std::memcpy(bytes.data() + 12, &h.header_size, 4);
  std::memcpy(bytes.data() + 16, &h.world_size, 4);
  std::memcpy(bytes.data() + 20, &h.payload_crc, 4);
  std::memcpy(bytes.data() + 24, &h.sequence, 8);
  std::memcpy(bytes.data() + 32, &h.created_unix_ms, 8);
  std::memcpy(bytes.data() + 40, &h.payload_size, 8);
  uint32_t header_crc = crc32_update(0, bytes.data(), kSnapshotHeaderSize - 4);
  std::memcpy(bytes.data() + kSnapshotHeaderSize - 4, &header_crc, 4);
  return bytes;
}

// Bounds-checked cursor over the payload.
class Reader {
 public:
  Reader(const std::string& path, const unsigned char* data, size_t size)
      : path_(path), data_(data), size_(size) {}
  bool at_end() const { return offset_ == size_; }
  template <typename T>
  T get(const char* what) {
    T value;
    std::memcpy(&value, take(sizeof value, what), sizeof value);
    return value;
  }
  const unsigned char* take(uint64_t size, const char* what) {
    if (size > size_ - offset_) {
      fail(std::string("record runs past the payload's end reading ") + what);
    }
    const unsigned char* at = data_ + offset_;
    offset_ += size;
    return at;
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw SnapshotError(
        base::detail::str(path_, ": malformed snapshot payload at byte ", offset_, ": ", problem));
  }

 private:
  const std::string& path_;
  const unsigned char* data_;
  size_t size_;
  size_t offset_ = 0;
};

at::Tensor read_tensor(Reader& reader, const std::string& name) {
  uint32_t code = reader.get<uint32_t>("a dtype code");
  auto found = std::find_if(kDtypeCodes.begin(), kDtypeCodes.end(),
                            [&](const auto& entry) { return entry.first == code; });
  if (found == kDtypeCodes.end()) {
    reader.fail(base::detail::str("tensor '", name, "' has unknown dtype code ", code));
  }
  uint32_t dims = reader.get<uint32_t>("a rank");
  if (dims > kMaxDims)
    reader.fail(base::detail::str("tensor '", name, "' has ", dims, " dimensions"));
  std::vector<int64_t> sizes(dims);
  uint64_t numel = 1;
  for (auto& size : sizes) {
    size = reader.get<int64_t>("a size");
    if (size < 0 || (size > 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / size)) {
      reader.fail(base::detail::str("tensor '", name, "' has an impossible size ", size));
    }
    numel *= static_cast<uint64_t>(size);
  }
  uint64_t bytes = reader.get<uint64_t>("a byte count");
  uint64_t expected = numel * c10::elementSize(found->second);
  if (bytes != expected) {
    reader.fail(
        base::detail::str("tensor '", name, "' has ", bytes, " bytes, its shape needs ", expected));
  }
  const unsigned char* data = reader.take(bytes, "tensor data");
  at::Tensor tensor = at::empty(sizes, at::TensorOptions().dtype(found->second));
  if (bytes > 0) std::memcpy(tensor.data_ptr(), data, bytes);
  return tensor;
}

std::vector<unsigned char> read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw SnapshotError("cannot open snapshot " + path + ": " + system_error());
  std::vector<unsigned char> bytes;
  struct stat info;
  bool ok = ::fstat(fd, &info) == 0;
  if (ok) bytes.resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (ok && done < bytes.size()) {
    ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) ok = false;
    if (got <= 0) break;  // 0: the file shrank; what was read is judged below
    done += static_cast<size_t>(got);
  }
  std::string error = system_error();
  ::close(fd);
  if (!ok) throw SnapshotError("cannot read snapshot " + path + ": " + error);
  bytes.resize(done);
  return bytes;
}

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
  auto bytes = static_cast<const Bytef*>(data);
  while (size > 0) {  // zlib's length is a uInt: feed at most 1 GiB at a time
    uInt chunk = static_cast<uInt>(std::min<size_t>(size, size_t{1} << 30));
    crc = static_cast<uint32_t>(::crc32(crc, bytes, chunk));
    bytes += chunk;
    size -= chunk;
  }
  return crc;
}

SnapshotWriter::SnapshotWriter(std::string temp_path) : temp_path_(std::move(temp_path)) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create it: " + system_error());
  std::array<unsigned char, kSnapshotHeaderSize> placeholder{};  // filled in by commit()
  try {
    write_all(placeholder.data(), placeholder.size());
  } catch (...) {  // a full disk already: no destructor runs to remove the file
    ::close(fd_);
    ::unlink(temp_path_.c_str());
    throw;
  }
}

SnapshotWriter::~SnapshotWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void SnapshotWriter::fail(const std::string& what) const {
  throw SnapshotError("cannot write snapshot " + temp_path_ + ": " + what);
}

void SnapshotWriter::write_all(const void* data, size_t size) {
  auto bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::write(fd_, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) fail(system_error());
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

void SnapshotWriter::flush() {
  write_all(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void SnapshotWriter::put(const void* data, size_t size) {
  payload_crc_ = crc32_update(payload_crc_, data, size);
  payload_size_ += size;
  constexpr size_t kBufferSize = size_t{1} << 16;
  if (buffer_.size() + size > kBufferSize) flush();
  if (size >= kBufferSize) {
    write_all(data, size);
  } else {
    buffer_.append(static_cast<const char*>(data), size);
  }
}

void SnapshotWriter::put_string(const std::string& text) {
  put_u32(static_cast<uint32_t>(text.size()));
  put(text.data(), text.size());
}

std::string tensor_record_problem(const std::string& name, const at::Tensor& tensor) {
  if (name.size() > kMaxName) return "record name longer than 4096 bytes: " + name.substr(0, 64);
  if (!tensor.defined()) return "tensor '" + name + "' is undefined";
  if (tensor.layout() != c10::kStrided || tensor.is_quantized()) {
    return "tensor '" + name + "' is not a dense tensor";
  }
  auto found = std::find_if(kDtypeCodes.begin(), kDtypeCodes.end(), [&](const auto& entry) {
    return entry.second == tensor.scalar_type();
  });
  if (found == kDtypeCodes.end()) {
    return "tensor '" + name + "' has unsupported dtype " +
           base::detail::dtype_name(tensor.scalar_type());
  }
  return "";
}

void SnapshotWriter::add_tensor(const std::string& name, const at::Tensor& tensor) {
  if (std::string problem = tensor_record_problem(name, tensor); !problem.empty()) fail(problem);
  auto found = std::find_if(kDtypeCodes.begin(), kDtypeCodes.end(), [&](const auto& entry) {
    return entry.second == tensor.scalar_type();
  });
  at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
  put_u32(kRecordTensor);
  put_string(name);
  put_u32(found->first);
  put_u32(static_cast<uint32_t>(cpu.dim()));
  for (int64_t size : cpu.sizes()) put(&size, sizeof size);
  put_u64(cpu.nbytes());
  if (cpu.nbytes() > 0) put(cpu.data_ptr(), cpu.nbytes());
}

void SnapshotWriter::add_json(const std::string& name, const std::string& json_text) {
  put_u32(kRecordJson);
  put_string(name);
  put_u64(json_text.size());
  put(json_text.data(), json_text.size());
}

void SnapshotWriter::commit(const std::string& final_path, uint32_t world_size, uint64_t sequence) {
  flush();
  write_all(kSnapshotEndMarker, sizeof kSnapshotEndMarker);
  Header header;
  header.world_size = world_size;
  header.payload_crc = payload_crc_;
  header.sequence = sequence;
  header.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  header.payload_size = payload_size_;
  auto bytes = encode_header(header);
  if (::pwrite(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    fail("writing the header: " + system_error());
  }
  if (::fsync(fd_) != 0) fail("fsync: " + system_error());
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close: " + system_error());
  if (::rename(temp_path_.c_str(), final_path.c_str()) != 0) {
    fail("renaming it to " + final_path + ": " + system_error());
  }
  committed_ = true;
  auto slash = final_path.find_last_of('/');
  fsync_directory(slash == std::string::npos ? "." : final_path.substr(0, slash + 1));
}

std::string describe_tensor(const at::Tensor& tensor) {
  std::ostringstream text;
  text << tensor.sizes() << ' ' << base::detail::dtype_name(tensor.scalar_type());
  return text.str();
}

void fsync_directory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw SnapshotError("cannot open directory " + path + " to fsync it: " + system_error());
  int rc = ::fsync(fd);
  std::string error = system_error();
  ::close(fd);
  if (rc != 0) throw SnapshotError("cannot fsync directory " + path + ": " + error);
}

std::vector<unsigned char> seal_snapshot_payload(const unsigned char* payload, size_t size) {
  Header header;
  header.world_size = 1;
  header.sequence = 1;
  header.payload_size = size;
  header.payload_crc = crc32_update(0, payload, size);
  const auto head = encode_header(header);
  std::vector<unsigned char> file(head.begin(), head.end());
  file.insert(file.end(), payload, payload + size);
  return file;
}

snapshot::SnapshotFile read_snapshot(const std::string& path) {
  std::vector<unsigned char> file = read_whole_file(path);
  if (file.empty()) throw SnapshotError(path + " is not a ddp snapshot: the file is empty");
  if (file.size() < sizeof kSnapshotMagic || std::memcmp(file.data(), kSnapshotMagic, 8) != 0) {
    throw SnapshotError(path +
                        " is not a ddp snapshot: it does not start with the magic \"DDPSNAP1\"");
  }
  if (file.size() < kSnapshotHeaderSize) {
    throw SnapshotError(base::detail::str(path, ": snapshot is truncated: ", file.size(),
                                          " bytes, shorter than its header"));
  }
  Header h;
  std::memcpy(&h.version, file.data() + 8, 4);
  std::memcpy(&h.header_size, file.data() + 12, 4);
  std::memcpy(&h.world_size, file.data() + 16, 4);
  std::memcpy(&h.payload_crc, file.data() + 20, 4);
  std::memcpy(&h.sequence, file.data() + 24, 8);
  std::memcpy(&h.created_unix_ms, file.data() + 32, 8);
  std::memcpy(&h.payload_size, file.data() + 40, 8);
  if (h.version > kSnapshotFormatVersion || h.version == 0) {
    throw SnapshotError(base::detail::str(path, ": snapshot format version ", h.version,
                                          " is not supported (this build reads version 1)"));
  }
  uint32_t header_crc;
  std::memcpy(&header_crc, file.data() + kSnapshotHeaderSize - 4, 4);
  if (h.header_size != kSnapshotHeaderSize ||
      crc32_update(0, file.data(), kSnapshotHeaderSize - 4) != header_crc) {
    throw SnapshotError(path + ": snapshot header is corrupt (header checksum mismatch)");
  }
  uint64_t expected = kSnapshotHeaderSize + sizeof kSnapshotEndMarker;
  if (h.payload_size > file.size() || expected + h.payload_size > file.size()) {
    throw SnapshotError(base::detail::str(path, ": snapshot is truncated: ", file.size(),
                                          " bytes, the header announces ",
                                          expected + h.payload_size));
  }
  expected += h.payload_size;
  const unsigned char* end_marker = file.data() + kSnapshotHeaderSize + h.payload_size;
  if (std::memcmp(end_marker, kSnapshotEndMarker, sizeof kSnapshotEndMarker) != 0) {
    throw SnapshotError(path + ": snapshot has no end marker (the write did not complete)");
  }
  if (file.size() != expected) {
    throw SnapshotError(base::detail::str(path, ": snapshot is corrupt: ", file.size(),
                                          " bytes, the header announces ", expected));
  }
  const unsigned char* payload = file.data() + kSnapshotHeaderSize;
  uint32_t crc = crc32_update(0, payload, h.payload_size);
  if (crc != h.payload_crc) {
    throw SnapshotError(path + ": snapshot payload is corrupt: its checksum is " + hex32(crc) +
                        ", the header records " + hex32(h.payload_crc));
  }
  snapshot::SnapshotFile result;
  result.path = path;
  result.format_version = h.version;
  result.world_size = h.world_size;
  result.sequence = h.sequence;
  result.created_unix_ms = h.created_unix_ms;
  Reader reader(path, payload, h.payload_size);
  bool have_scalars = false;
  while (!reader.at_end()) {
    uint32_t kind = reader.get<uint32_t>("a record kind");
    uint32_t name_size = reader.get<uint32_t>("a name length");
    if (name_size > kMaxName)
      reader.fail(base::detail::str("record name of ", name_size, " bytes"));
    auto name_bytes = reader.take(name_size, "a name");
    std::string name(reinterpret_cast<const char*>(name_bytes), name_size);
    if (kind == kRecordTensor) {
      at::Tensor tensor = read_tensor(reader, name);
      if (!result.tensors.emplace(name, std::move(tensor)).second) {
        reader.fail("tensor record '" + name + "' appears twice");
      }
    } else if (kind == kRecordJson) {
      uint64_t size = reader.get<uint64_t>("a JSON length");
      auto text = reader.take(size, "JSON text");
      if (name != "scalars" || have_scalars) reader.fail("unexpected JSON record '" + name + "'");
      result.scalars_json.assign(reinterpret_cast<const char*>(text), size);
      have_scalars = true;
    } else {
      reader.fail(base::detail::str("unknown record kind ", kind));
    }
  }
  if (!have_scalars) throw SnapshotError(path + ": snapshot has no \"scalars\" record");
  return result;
}

}  // namespace ddp::snapshot::detail
