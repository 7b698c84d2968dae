#pragma once

/// \file broadcast_tensors.hpp
/// Copying a list of tensors from one rank to all, in as few collectives as
/// possible: what DistributedDataParallel does with a model's state at
/// construction and its buffers before each forward, and what
/// hvd::broadcast_parameters and the examples' evaluation use.

#include <ATen/core/Tensor.h>

#include <vector>

namespace ddp::comm {

class ProcessGroup;

/// Overwrites `tensors` on every rank with `root`'s values, in place. The
/// tensors may have any of the dtypes the collectives carry, mixed, and any
/// strides; gradients are not recorded. One broadcast per device carries
/// them all (Note [One collective for all buffers] in the source). Every
/// rank must pass tensors of the same dtypes and shapes, in the same order.
/// Does nothing in a group of one.
/// \throws InvalidArgumentError when `root` is not a rank of the group.
void broadcast_tensors(ProcessGroup& group, const std::vector<at::Tensor>& tensors, int root = 0);

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
