#pragma once
// The old path of <ddp/parallel/join.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/join.hpp> moved to <ddp/parallel/join.hpp>; include the new path (the old one will be removed)"
#include "ddp/parallel/join.hpp"  // IWYU pragma: export
