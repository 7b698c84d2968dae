#pragma once

/// \file formats.hpp
/// PyTorch's file formats without Python, in one include (namespace
/// ddp::formats): torch.save's zip archive and pickle as a value tree
/// (read_torch_file, write_torch_file, PyValue), safetensors
/// (read_safetensors, write_safetensors), the format a file is in
/// (identify_file), and FormatError. Library ddp::formats; ddp::snapshot
/// maps these files to and from a training state.

#include "ddp/formats/dcp.hpp"               // IWYU pragma: export
#include "ddp/formats/errors.hpp"            // IWYU pragma: export
#include "ddp/formats/file_format.hpp"       // IWYU pragma: export
#include "ddp/formats/py_value.hpp"          // IWYU pragma: export
#include "ddp/formats/safetensors_file.hpp"  // IWYU pragma: export
#include "ddp/formats/torch_file.hpp"        // IWYU pragma: export
