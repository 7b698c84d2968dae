#pragma once
// The old path of <ddp/comm/flight_recorder.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/flight_recorder.hpp> moved to <ddp/comm/flight_recorder.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/flight_recorder.hpp"  // IWYU pragma: export
