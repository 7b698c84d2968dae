#pragma once
// The old path of <ddp/base/errors.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/errors.hpp> moved to <ddp/base/errors.hpp>; include the new path (the old one will be removed)"
#include "ddp/base/errors.hpp"  // IWYU pragma: export
