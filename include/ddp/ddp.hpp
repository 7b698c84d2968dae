#pragma once

/// \file ddp.hpp
/// Everything of ddp's public API in one include.

#include "ddp/environment.hpp"  // IWYU pragma: export
#include "ddp/errors.hpp"       // IWYU pragma: export
#include "ddp/init.hpp"         // IWYU pragma: export
#include "ddp/process_group.hpp"  // IWYU pragma: export
#include "ddp/work.hpp"         // IWYU pragma: export
