#pragma once
// The old path of <ddp/comm/observer_factory.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/observer_factory.hpp> moved to <ddp/comm/observer_factory.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/observer_factory.hpp"  // IWYU pragma: export
