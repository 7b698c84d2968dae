#pragma once

/// \file base.hpp
/// The base layer in one include (namespace ddp::base, whose names are also
/// ddp's): ddp::Error, the kinds of error every layer and part throws, and
/// ddp::ExitCode, the one table of exit codes (Note [Exit codes]).

#include "ddp/base/errors.hpp"  // IWYU pragma: export
