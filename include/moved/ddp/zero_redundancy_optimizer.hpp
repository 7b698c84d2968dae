#pragma once
// The old path of <ddp/parallel/zero_redundancy_optimizer.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/zero_redundancy_optimizer.hpp> moved to <ddp/parallel/zero_redundancy_optimizer.hpp>; include the new path (the old one will be removed)"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"  // IWYU pragma: export
