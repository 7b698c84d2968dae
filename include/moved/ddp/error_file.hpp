#pragma once
// The old path of <ddp/comm/error_file.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/error_file.hpp> moved to <ddp/comm/error_file.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/error_file.hpp"  // IWYU pragma: export
