#pragma once
// The old path of <ddp/parallel/captured_step.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/captured_step.hpp> moved to <ddp/parallel/captured_step.hpp>; include the new path (the old one will be removed)"
#include "ddp/parallel/captured_step.hpp"  // IWYU pragma: export
