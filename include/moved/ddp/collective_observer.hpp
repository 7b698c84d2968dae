#pragma once
// The old path of <ddp/comm/collective_observer.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/collective_observer.hpp> moved to <ddp/comm/collective_observer.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/collective_observer.hpp"  // IWYU pragma: export
