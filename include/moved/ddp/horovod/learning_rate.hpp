#pragma once
// The old path of <ddp/hvd/learning_rate.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/horovod/learning_rate.hpp> moved to <ddp/hvd/learning_rate.hpp>; include the new path (the old one will be removed)"
#include "ddp/hvd/learning_rate.hpp"  // IWYU pragma: export
