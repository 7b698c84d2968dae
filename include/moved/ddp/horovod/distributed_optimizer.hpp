#pragma once
// The old path of <ddp/hvd/distributed_optimizer.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/horovod/distributed_optimizer.hpp> moved to <ddp/hvd/distributed_optimizer.hpp>; include the new path (the old one will be removed)"
#include "ddp/hvd/distributed_optimizer.hpp"  // IWYU pragma: export
