#pragma once

/// \file data.hpp
/// Data for distributed training in one include (namespace ddp::data,
/// library ddp::data): the idx reader, Fashion-MNIST, DistributedSampler and
/// DataError.

#include "ddp/data/distributed_sampler.hpp"  // IWYU pragma: export
#include "ddp/data/errors.hpp"               // IWYU pragma: export
#include "ddp/data/fashion_mnist.hpp"        // IWYU pragma: export
#include "ddp/data/idx.hpp"                  // IWYU pragma: export
