#pragma once
// The old path of <ddp/parallel/powersgd_hook.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/powersgd_hook.hpp> moved to <ddp/parallel/powersgd_hook.hpp>; include the new path (the old one will be removed)"
#include "ddp/parallel/powersgd_hook.hpp"  // IWYU pragma: export
