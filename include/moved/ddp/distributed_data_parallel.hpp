#pragma once
// The old path of <ddp/parallel/distributed_data_parallel.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/distributed_data_parallel.hpp> moved to <ddp/parallel/distributed_data_parallel.hpp>; include the new path (the old one will be removed)"
#include "ddp/parallel/distributed_data_parallel.hpp"  // IWYU pragma: export
