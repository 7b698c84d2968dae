// libFuzzer target: read_torch_file (ddp/formats/torch_file.hpp): the zip
// directory, LibTorch's zip reader and the unpickler. The tree it returns
// is written back, as an export would.
//
// A mutated zip mostly fails its CRC, so the pickle would rarely be
// reached. An input whose first byte is even is therefore a pickle: the
// target wraps it as data.pkl of an archive torch.save would write, with
// storages data/0 (16 bytes), data/1 (64) and data/2 (0). An odd first
// byte: the rest is the file as it is.

#include <caffe2/serialize/inline_container.h>

#include <string>

#include "ddp/formats/errors.hpp"
#include "ddp/formats/torch_file.hpp"
#include "reader_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string& path = ddp::fuzz::input_path(".pt");
  if ((data[0] & 1) == 0) {
    caffe2::serialize::PyTorchStreamWriter zip(path);
    zip.writeRecord("data.pkl", data + 1, size - 1);
    const std::string storages(64, '\x3f');
    zip.writeRecord("data/0", storages.data(), 16);
    zip.writeRecord("data/1", storages.data(), 64);
    zip.writeRecord("data/2", storages.data(), 0);
    zip.writeEndOfFile();
  } else {
    ddp::fuzz::write_input(path, data + 1, size - 1);
  }
  try {
    const ddp::formats::PyRef root = ddp::formats::read_torch_file(path);
    ddp::formats::write_torch_file(path + ".again", *root);
  } catch (const ddp::formats::FormatError&) {
  }
  return 0;
}
