#pragma once
// The old path of <ddp/hvd/broadcast.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/horovod/broadcast.hpp> moved to <ddp/hvd/broadcast.hpp>; include the new path (the old one will be removed)"
#include "ddp/hvd/broadcast.hpp"  // IWYU pragma: export
