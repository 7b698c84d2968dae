#pragma once
// The old path of <ddp/comm/work.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/work.hpp> moved to <ddp/comm/work.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/work.hpp"  // IWYU pragma: export
