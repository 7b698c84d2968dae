// write_torch_file: a pickle of the subset (Note [The pickle subset ddp
// speaks]) in a zip archive laid out as torch.save lays it out.

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>

#include "ddp/formats/errors.hpp"
#include "ddp/formats/torch_file.hpp"
#include "formats/atomic_file.hpp"
#include "formats/pickle_protocol.hpp"
#include "formats/pickle_writer.hpp"
#include "formats/torch_stream.hpp"

namespace ddp::formats {
namespace {

using Kind = PyValue::Kind;
using detail::ByteSink;
using detail::PickleOp;
using detail::PickleWriter;
using detail::storage_types;

const char* storage_type_of(at::ScalarType dtype) {
  for (const auto& [name, type] : storage_types()) {
    if (type == dtype) return name;
  }
  throw FormatError(std::string("cannot export a tensor of dtype ") + c10::toString(dtype) +
                    ": torch.save has no storage class for it");
}

// Pickles one value tree, collecting the tensors whose storages become the
// archive's data/<index> records.
class TorchPickler final : public PickleWriter {
 public:
  std::vector<at::Tensor> storages;

 protected:
  void tensor(const at::Tensor& live) override {
    at::Tensor t = live.detach().to(at::kCPU).contiguous();
    if (t.storage_offset() != 0 || t.storage().nbytes() != t.nbytes()) t = t.clone();
    const std::string key = std::to_string(storages.size());
    storages.push_back(t);
    global("torch._utils", "_rebuild_tensor_v2");
    op(PickleOp::kMark);
    op(PickleOp::kMark);  // the persistent id of its storage
    string("storage");
    global("torch", storage_type_of(t.scalar_type()));
    string(key);
    string("cpu");
    integer(t.numel());
    op(PickleOp::kTuple);
    op(PickleOp::kBinPersId);
    integer(0);  // storage offset
    tuple_of(t.sizes().vec());
    tuple_of(t.strides().vec());
    op(PickleOp::kNewFalse);               // requires_grad
    global("collections", "OrderedDict");  // no backward hooks
    op(PickleOp::kEmptyTuple);
    op(PickleOp::kReduce);
    op(PickleOp::kTuple);
    op(PickleOp::kReduce);
  }
};

// The archive of `pickler`'s bytes and storages, through `sink`.
void write_archive(const TorchPickler& pickler, const ByteSink& sink) {
  caffe2::serialize::PyTorchStreamWriter zip(sink);
  zip.writeRecord("data.pkl", pickler.bytes().data(), pickler.bytes().size());
  zip.writeRecord("byteorder", "little", 6);
  for (size_t i = 0; i < pickler.storages.size(); ++i) {
    const at::Tensor& t = pickler.storages[i];
    zip.writeRecord("data/" + std::to_string(i), t.data_ptr(), t.nbytes());
  }
  zip.writeEndOfFile();
}

}  // namespace

namespace detail {

// Note [A write the archive writer never sees fail]
// LibTorch's PyTorchStreamWriter throws once its sink writes short, and its
// destructor then finishes the archive (writeEndOfFile), which writes again
// and throws again: thrown during unwinding, that second error calls
// std::terminate, so a full disk aborted every rank before any catch could
// name the file. The archive writer is therefore given a sink that never
// writes short: after the real sink's first failure it drops the rest, the
// writer finishes as if all went well, and the failure is thrown here after
// it. The callers' sinks keep the cause (errno, the file) for the message.
void write_torch_stream(const PyValue& root, const ByteSink& sink) {
  TorchPickler pickler;
  pickler.dump(root);
  bool failed = false;
  const ByteSink never_short = [&](const void* data, size_t size) -> size_t {
    if (!failed && sink(data, size) != size) failed = true;
    return size;
  };
  write_archive(pickler, never_short);
  if (failed) throw FormatError("a write failed; nothing after it was written");
}

}  // namespace detail

void write_torch_file(const std::string& path, const PyValue& root) {
  detail::write_atomically(path, "the checkpoint",
                           [&](const ByteSink& sink) { detail::write_torch_stream(root, sink); });
}

}  // namespace ddp::formats
