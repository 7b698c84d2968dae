#pragma once
// The old path of <ddp/comm/broadcast_tensors.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/broadcast_tensors.hpp> moved to <ddp/comm/broadcast_tensors.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/broadcast_tensors.hpp"  // IWYU pragma: export
