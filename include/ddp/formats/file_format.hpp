#pragma once

/// \file file_format.hpp
/// Which of PyTorch's formats a file is in, told from its content, never
/// from its name or one byte (Note [A format told from the whole header]).

#include <string>

namespace ddp::formats {

/// The formats of a checkpoint file.
enum class FileFormat {
  kUnknown,      ///< None of those below.
  kTorchZip,     ///< torch.save's zip archive (PyTorch 1.6 and later).
  kTorchLegacy,  ///< torch.save's legacy pickle stream (_use_new_zipfile_serialization=False).
  kSafetensors,  ///< huggingface's safetensors.
};

/// Note [A format told from the whole header]
/// A safetensors file starts with its header's size, so its first byte can
/// be anything: 0x80 (a pickle's PROTO) for one header size in 256, "PK"
/// for one in 65,536. A format is therefore recognised by what only it
/// has: a zip archive by its local header signature and an end of central
/// directory that ends the file; torch.save's legacy format by the pickled
/// magic number it starts with; safetensors by a header of the declared
/// size, inside the file, that parses as a JSON object.
///
/// The format of the file at `path`; kUnknown also when it cannot be read.
FileFormat identify_file(const std::string& path);

/// "a safetensors file", ...: the format in words, for messages; for
/// kUnknown and kTorchLegacy what to do instead, and why `path` is not one
/// of the others.
std::string describe(FileFormat format, const std::string& path);

}  // namespace ddp::formats
