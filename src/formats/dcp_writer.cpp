// DcpFileWriter (ddp/formats/dcp.hpp): one rank's items, each a torch.save
// stream appended to __<rank>_<file>.distcp, as FileSystemWriter appends them.

#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/str.hpp"
#include "ddp/formats/dcp.hpp"
#include "ddp/formats/errors.hpp"
#include "formats/torch_stream.hpp"

namespace ddp::formats {

DcpFileWriter::DcpFileWriter(const std::string& directory, int rank, int file)
    : name_(dcp_file_name(rank, file)) {
  std::error_code ignored;
  std::filesystem::create_directories(directory, ignored);
  path_ = (std::filesystem::path(directory) / name_).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw FormatError("cannot write the distributed checkpoint file " + path_ + ": " +
                      std::strerror(errno));
  }
}

DcpFileWriter::~DcpFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(path_.c_str());  // never finished
}

namespace {

// Appends torch.save(value) to `fd`; returns its length.
uint64_t append_stream(int fd, const std::string& path, const PyValue& value) {
  uint64_t length = 0;
  int failure = 0;
  const detail::ByteSink sink = [&](const void* data, size_t size) -> size_t {
    size_t done = 0;
    while (failure == 0 && done < size) {
      const ssize_t n = ::write(fd, static_cast<const char*>(data) + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) failure = n < 0 ? errno : EIO;
      if (n > 0) done += static_cast<size_t>(n);
    }
    length += done;
    return failure == 0 ? size : 0;
  };
  try {
    detail::write_torch_stream(value, sink);
  } catch (const c10::Error& e) {
    if (failure == 0) throw FormatError("cannot write " + path + ": " + e.what_without_backtrace());
  } catch (const FormatError&) {
    if (failure == 0) throw;  // else the write's own cause, below
  }
  if (failure != 0) throw FormatError("cannot write " + path + ": " + std::strerror(failure));
  return length;
}

}  // namespace

void DcpFileWriter::add_tensor(const std::string& key, const std::vector<int64_t>& size,
                               const DcpBox& box, const at::Tensor& chunk) {
  if (box.offsets.size() != size.size() || chunk.sizes() != c10::IntArrayRef(box.sizes)) {
    throw FormatError(base::detail::str("cannot save ", key, ": a chunk of ", chunk.sizes(),
                                        " for the box of size ", c10::IntArrayRef(box.sizes),
                                        " of a tensor of ", c10::IntArrayRef(size)));
  }
  DcpItem item;
  item.key = key;
  item.is_tensor = true;
  item.dtype = chunk.scalar_type();
  item.size = size;
  item.box = box;
  item.location = {name_, written_, 0};
  item.location.length = append_stream(fd_, path_, *PyValue::of(chunk));
  written_ += item.location.length;
  items_.push_back(std::move(item));
}

void DcpFileWriter::add_object(const std::string& key, const PyValue& value) {
  DcpItem item;
  item.key = key;
  item.location = {name_, written_, 0};
  item.location.length = append_stream(fd_, path_, value);
  written_ += item.location.length;
  items_.push_back(std::move(item));
}

std::vector<DcpItem> DcpFileWriter::finish() {
  const int fd = fd_;
  fd_ = -1;
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  if (::close(fd) != 0 || !synced) {
    const std::string cause = std::strerror(synced ? errno : error);
    ::unlink(path_.c_str());
    throw FormatError("cannot write the distributed checkpoint file " + path_ + ": " + cause);
  }
  return std::move(items_);
}

}  // namespace ddp::formats
