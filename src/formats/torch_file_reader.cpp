// read_torch_file and read_torch_archive: torch.save's zip archive, its
// directory checked first (src/formats/zip_directory.hpp), its records read
// through LibTorch's PyTorchStreamReader, its pickle through
// src/formats/pickle_reader.hpp.

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "base/str.hpp"
#include "ddp/formats/errors.hpp"
#include "ddp/formats/file_format.hpp"
#include "ddp/formats/torch_file.hpp"
#include "formats/pickle_reader.hpp"
#include "formats/torch_stream.hpp"
#include "formats/zip_directory.hpp"

namespace ddp::formats {

using detail::ZipRecord;

namespace {

// `size` bytes of a file from `base`, as LibTorch's zip reader reads them.
class FileWindow final : public caffe2::serialize::ReadAdapterInterface {
 public:
  FileWindow(const std::string& path, uint64_t base, uint64_t size)
      : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)), base_(base), size_(size) {
    if (fd_ < 0) throw FormatError("cannot read the checkpoint " + path + ": cannot open it");
  }
  FileWindow(const FileWindow&) = delete;
  FileWindow& operator=(const FileWindow&) = delete;
  ~FileWindow() override { ::close(fd_); }
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= size_) return 0;
    n = std::min<uint64_t>(n, size_ - pos);
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd_, static_cast<char*>(buf) + done, n - done,
                                  static_cast<off_t>(base_ + pos + done));
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

 private:
  int fd_;
  uint64_t base_, size_;
};

}  // namespace

PyRef read_torch_file(const std::string& path) {
  const FileFormat format = identify_file(path);
  if (format != FileFormat::kTorchZip) {
    throw FormatError("cannot read the checkpoint " + path + ": " + describe(format, path));
  }
  return detail::read_torch_archive(path, 0, detail::kToTheEnd);
}

namespace detail {

PyRef read_torch_archive(const std::string& path, uint64_t base, uint64_t length) {
  const std::map<std::string, ZipRecord> records = read_zip_directory(path, base, length);
  if (length == kToTheEnd) length = std::filesystem::file_size(path) - base;
  // torch.save names every record <archive>/...; data.pkl holds the pickle.
  std::string archive;
  for (const auto& [name, record] : records) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      archive = name.substr(0, slash + 1);
    }
  }
  for (const auto& [name, record] : records) {
    const size_t slash = name.find('/');
    const std::string rest = slash == std::string::npos ? name : name.substr(slash + 1);
    if (rest == "constants.pkl" || rest.rfind("code/", 0) == 0) {
      throw FormatError("cannot read the checkpoint " + path +
                        ": it is a TorchScript archive (torch.jit.save; it has " + name +
                        "); load it with torch::jit::load instead");
    }
  }
  if (archive.empty()) {
    throw FormatError("cannot read the checkpoint " + path +
                      ": the zip archive has no <archive>/data.pkl, so torch.save did not "
                      "write it");
  }
  try {
    caffe2::serialize::PyTorchStreamReader zip(std::make_shared<FileWindow>(path, base, length));
    auto [data, size] = zip.getRecord("data.pkl");
    const std::string pickle(static_cast<const char*>(data.get()), size);
    // A storage's byte count is compared with its record before anything
    // is allocated.
    const StorageLoader load_storage = [&](const std::string& key, at::ScalarType dtype,
                                           const std::string& type, int64_t numel) {
      const std::string record = "data/" + key;
      const auto found = records.find(archive + record);
      if (found == records.end()) {
        throw FormatError("the archive has no record " + record);
      }
      int64_t needed = 0;
      if (__builtin_mul_overflow(numel, static_cast<int64_t>(c10::elementSize(dtype)), &needed) ||
          static_cast<uint64_t>(needed) != found->second.size) {
        throw FormatError(::ddp::base::detail::str("record ", record, " holds ", found->second.size,
                                                   " bytes, its ", type, " of ", numel,
                                                   " elements needs another number"));
      }
      auto [bytes, count] = zip.getRecord(record);  // LibTorch adds <archive>/
      if (count != static_cast<size_t>(needed))
        throw FormatError("record " + record + " changed size while read");
      // The record's own buffer becomes the storage, as torch.load does: no
      // second copy of every tensor (docs/benchmarks.md, checkpoint files).
      const c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<int64_t>(count),
                                 std::move(bytes), /*allocator=*/nullptr, /*resizable=*/false);
      return at::empty({0}, at::TensorOptions(dtype)).set_(storage, 0, {numel}, {1});
    };
    return read_pickle(path, "data.pkl", pickle, load_storage);
  } catch (const c10::Error& e) {
    throw FormatError("cannot read the checkpoint " + path + ": " + e.what_without_backtrace());
  }
}

}  // namespace detail
}  // namespace ddp::formats
