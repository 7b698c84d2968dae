// libFuzzer target: a ddp snapshot file's reader (Note [What a snapshot
// file is] in ddp/snapshot/snapshot_manager.hpp) on any bytes.

#include "ddp/snapshot/errors.hpp"
#include "reader_fuzz.hpp"
#include "snapshot/snapshot_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ddp::fuzz::read_input<ddp::snapshot::SnapshotError>(
      ".ddpsnap", data, size,
      [](const auto& path) { (void)ddp::snapshot::detail::read_snapshot(path); });
}
