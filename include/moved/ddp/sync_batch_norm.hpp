#pragma once
// The old path of <ddp/nn/sync_batch_norm.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/sync_batch_norm.hpp> moved to <ddp/nn/sync_batch_norm.hpp>; include the new path (the old one will be removed)"
#include "ddp/nn/sync_batch_norm.hpp"  // IWYU pragma: export
