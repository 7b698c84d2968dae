#pragma once
// The old path of <ddp/parallel/comm_hook.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/comm_hook.hpp> moved to <ddp/parallel/comm_hook.hpp>; include the new path (the old one will be removed)"
#include "ddp/parallel/comm_hook.hpp"  // IWYU pragma: export
