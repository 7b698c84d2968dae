#pragma once

/// \file base.hpp
/// The base layer in one include (namespace ddp::base, whose names are also
/// ddp's): ddp::Error, the kinds of error every layer and part throws, and
/// ddp::ExitCode, the one table of exit codes (Note [Exit codes]); and
/// ddp::blas_in_use(), the BLAS LibTorch's matrix products run on, and
/// ddp::allocator_in_use(), the host allocator its tensors come from.

#include "ddp/base/allocator.hpp"  // IWYU pragma: export
#include "ddp/base/blas.hpp"       // IWYU pragma: export
#include "ddp/base/errors.hpp"     // IWYU pragma: export
