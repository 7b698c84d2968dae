// libFuzzer target: a ddp snapshot file's reader (Note [What a snapshot
// file is] in ddp/snapshot/snapshot_manager.hpp).
//
// A mutated file mostly fails its header's CRCs, so the records would
// rarely be reached. An input whose first byte is even is therefore a
// payload (the records and the end marker): the target seals it into a
// file with a valid header (seal_snapshot_payload). An odd first byte: the
// rest is the file as it is.

#include <string>
#include <vector>

#include "ddp/snapshot/errors.hpp"
#include "reader_fuzz.hpp"
#include "snapshot/snapshot_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<unsigned char> file(data + 1, data + size);
  if ((data[0] & 1) == 0) file = ddp::snapshot::detail::seal_snapshot_payload(data + 1, size - 1);
  return ddp::fuzz::read_input<ddp::snapshot::SnapshotError>(
      ".ddpsnap", file.data(), file.size(),
      [](const auto& path) { (void)ddp::snapshot::detail::read_snapshot(path); });
}
