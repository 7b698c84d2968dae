#pragma once

// Internal: the unpickler of torch.save's data.pkl, apart from the zip
// archive around it (src/formats/torch_file_reader.cpp), which hands it the
// storages its persistent ids name.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include "ddp/formats/py_value.hpp"

namespace ddp::formats::detail {

/// The flat tensor of storage `key`: `numel` (0 or more) elements of
/// `dtype`, whose class the file names `type` ("torch.FloatStorage").
/// \throws FormatError saying why the archive cannot give it (the reader
///   adds the file and the pickle's byte).
using StorageLoader = std::function<at::Tensor(const std::string& key, at::ScalarType dtype,
                                               const std::string& type, int64_t numel)>;

/// The value tree `pickle` holds, bounded as Note [A hostile file is an
/// error] says; `path` and `record` ("data.pkl", ".metadata") name it in
/// messages.
/// \throws FormatError naming the file, the record, the byte and the
///   problem.
PyRef read_pickle(const std::string& path, const std::string& record, const std::string& pickle,
                  const StorageLoader& load_storage);

}  // namespace ddp::formats::detail
