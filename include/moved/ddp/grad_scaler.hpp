#pragma once
// The old path of <ddp/amp/grad_scaler.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/grad_scaler.hpp> moved to <ddp/amp/grad_scaler.hpp>; include the new path (the old one will be removed)"
#include "ddp/amp/grad_scaler.hpp"  // IWYU pragma: export
