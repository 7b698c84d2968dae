#pragma once

// Internal: dtype names as PyTorch users write them (float32, not Float).

#include <c10/core/ScalarType.h>

#include <string>

namespace ddp::base::detail {

inline std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Byte:
      return "uint8";
    case c10::ScalarType::Bool:
      return "bool";
    default:
      return c10::toString(dtype);
  }
}

}  // namespace ddp::base::detail
