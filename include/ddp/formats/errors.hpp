#pragma once

/// \file errors.hpp
/// The exception of ddp::formats (Note [One exception type per failure kind]
/// in ddp/base/errors.hpp); its exit code is in the one table, Note [Exit
/// codes] there. ddp::snapshot's functions that read or write these formats
/// (import_checkpoint(), export_checkpoint(), ...) report the same failures
/// as a SnapshotError with the same message.

#include "ddp/base/errors.hpp"

namespace ddp::formats {

/// A file in one of PyTorch's formats (torch.save's zip and pickle,
/// safetensors) that cannot be read or written: no such file, another
/// format, damaged, truncated or hostile content, a value the format cannot
/// hold. The message names the file, the position where one applies, and
/// what was expected there. Never a crash, and never an allocation larger
/// than the file justifies (Note [A hostile file is an error] in
/// ddp/formats/torch_file.hpp).
class FormatError : public base::ErrorOfKind<FormatError, base::ExitCode::kFormat> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

}  // namespace ddp::formats

namespace ddp {
using formats::FormatError;
}  // namespace ddp
