// libFuzzer target: read_idx (ddp/data/idx.hpp) on any bytes, plain and,
// when they start with gzip's magic, gzipped.

#include "ddp/data/errors.hpp"
#include "ddp/data/idx.hpp"
#include "reader_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ddp::fuzz::read_input<ddp::data::DataError>(
      "-idx3-ubyte", data, size, [](const auto& path) { (void)ddp::data::read_idx(path); });
}
