#pragma once
// The old path of <ddp/comm/init.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/init.hpp> moved to <ddp/comm/init.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/init.hpp"  // IWYU pragma: export
