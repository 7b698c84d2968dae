// DcpReader (ddp/formats/dcp.hpp): any box of a saved tensor, assembled
// from the chunks that overlap it, each chunk a torch.save stream read by
// read_torch_archive (src/formats/torch_stream.hpp).

#include <ATen/ATen.h>
#include <c10/util/ArrayRef.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "base/str.hpp"
#include "ddp/formats/dcp.hpp"
#include "ddp/formats/errors.hpp"
#include "formats/torch_stream.hpp"

namespace ddp::formats {

namespace {

// `t` narrowed to `box`, whose offsets are relative to `t`'s first element.
at::Tensor narrow_to(at::Tensor t, const std::vector<int64_t>& offsets,
                     const std::vector<int64_t>& sizes) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    t = t.narrow(static_cast<int64_t>(d), offsets[d], sizes[d]);
  }
  return t;
}

}  // namespace

DcpReader::DcpReader(std::string directory)
    : directory_(std::move(directory)), metadata_(read_dcp_metadata(directory_)) {}

at::Tensor DcpReader::read(const std::string& key) {
  const auto found = metadata_.tensors.find(key);
  if (found == metadata_.tensors.end()) {
    throw FormatError("the distributed checkpoint " + directory_ + " has no tensor " + key);
  }
  DcpBox whole;
  whole.offsets.assign(found->second.size.size(), 0);
  whole.sizes = found->second.size;
  return read(key, whole);
}

at::Tensor DcpReader::read(const std::string& key, const DcpBox& box) {
  auto fail = [&](const std::string& what) -> FormatError {
    return FormatError("cannot read " + key + " from the distributed checkpoint " + directory_ +
                       ": " + what);
  };
  const auto found = metadata_.tensors.find(key);
  if (found == metadata_.tensors.end()) throw fail("it holds no such tensor");
  const DcpTensor& tensor = found->second;
  const size_t dims = tensor.size.size();
  if (!box.inside(tensor.size)) {
    throw fail(base::detail::str("the box at ", c10::IntArrayRef(box.offsets), " of size ",
                                 c10::IntArrayRef(box.sizes), " lies outside its size ",
                                 c10::IntArrayRef(tensor.size)));
  }
  if (key != cached_key_) cached_chunks_.clear(), cached_key_ = key;
  at::Tensor result = at::empty(box.sizes, at::TensorOptions(tensor.dtype));
  // Which elements some chunk gave: chunks may overlap, and must cover.
  at::Tensor covered = at::zeros(box.sizes, at::kBool);
  for (size_t c = 0; c < tensor.chunks.size(); ++c) {
    const DcpBox& chunk = tensor.chunks[c].box;
    std::vector<int64_t> from(dims), to(dims), sizes(dims);
    bool overlaps = true;
    for (size_t d = 0; d < dims && overlaps; ++d) {
      const int64_t begin = std::max(box.offsets[d], chunk.offsets[d]);
      const int64_t end =
          std::min(box.offsets[d] + box.sizes[d], chunk.offsets[d] + chunk.sizes[d]);
      overlaps = begin < end;
      from[d] = begin - chunk.offsets[d];
      to[d] = begin - box.offsets[d];
      sizes[d] = end - begin;
    }
    if (!overlaps || chunk.numel() == 0) continue;
    auto cached = cached_chunks_.find(c);
    if (cached == cached_chunks_.end()) {
      const DcpLocation& place = tensor.chunks[c].location;
      const std::string file = (std::filesystem::path(directory_) / place.file).string();
      const PyRef value = detail::read_torch_archive(file, place.offset, place.length);
      if (value->kind != PyValue::Kind::kTensor || value->tensor.scalar_type() != tensor.dtype ||
          value->tensor.sizes() != c10::IntArrayRef(chunk.sizes)) {
        throw fail(base::detail::str(
            "its chunk at ", c10::IntArrayRef(chunk.offsets), " (", place.file, " byte ",
            place.offset, ") holds a ", value->type_name(),
            value->kind == PyValue::Kind::kTensor
                ? base::detail::str(" of ", value->tensor.scalar_type(), " ", value->tensor.sizes())
                : std::string(),
            ", not the ", tensor.dtype, " ", c10::IntArrayRef(chunk.sizes), " the metadata says"));
      }
      cached = cached_chunks_.emplace(c, value->tensor).first;
    }
    narrow_to(result, to, sizes).copy_(narrow_to(cached->second, from, sizes));
    narrow_to(covered, to, sizes).fill_(true);
  }
  if (!covered.all().item<bool>()) {
    throw fail(base::detail::str("no chunk holds some of the elements in the box at ",
                                 c10::IntArrayRef(box.offsets), " of size ",
                                 c10::IntArrayRef(box.sizes)));
  }
  return result;
}

PyRef DcpReader::read_object(const std::string& key) {
  const auto found = metadata_.objects.find(key);
  if (found == metadata_.objects.end()) {
    throw FormatError("the distributed checkpoint " + directory_ + " has no value " + key);
  }
  const DcpLocation& place = found->second;
  return detail::read_torch_archive((std::filesystem::path(directory_) / place.file).string(),
                                    place.offset, place.length);
}

}  // namespace ddp::formats
