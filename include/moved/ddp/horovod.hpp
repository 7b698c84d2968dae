#pragma once
// The old path of <ddp/hvd.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/horovod.hpp> moved to <ddp/hvd.hpp>; include the new path (the old one will be removed)"
#include "ddp/hvd.hpp"  // IWYU pragma: export
