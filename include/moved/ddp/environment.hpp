#pragma once
// The old path of <ddp/comm/environment.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/environment.hpp> moved to <ddp/comm/environment.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/environment.hpp"  // IWYU pragma: export
