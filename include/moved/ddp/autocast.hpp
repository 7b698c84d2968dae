#pragma once
// The old path of <ddp/amp/autocast.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/autocast.hpp> moved to <ddp/amp/autocast.hpp>; include the new path (the old one will be removed)"
#include "ddp/amp/autocast.hpp"  // IWYU pragma: export
