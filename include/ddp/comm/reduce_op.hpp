#pragma once

/// \file reduce_op.hpp
/// How a reduction combines the ranks' values: the `op` of
/// ProcessGroup::all_reduce() and reduce_scatter(), apart from the group so
/// that a declaration that takes one needs no ProcessGroup.

namespace ddp::comm {

/// How a reduction combines the ranks' values.
enum class ReduceOp {
  kSum,      ///< Element-wise sum.
  kAverage,  ///< Sum divided by the world size (integers: truncated).
  kMin,      ///< Element-wise minimum.
  kMax,      ///< Element-wise maximum.
  kProduct,  ///< Element-wise product.
};

/// The name of a reduction ("sum", "average", ...).
const char* to_string(ReduceOp op) noexcept;

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
