#pragma once
// The old path of <ddp/hvd/runtime.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/horovod/runtime.hpp> moved to <ddp/hvd/runtime.hpp>; include the new path (the old one will be removed)"
#include "ddp/hvd/runtime.hpp"  // IWYU pragma: export
