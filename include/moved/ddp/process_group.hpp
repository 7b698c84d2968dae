#pragma once
// The old path of <ddp/comm/process_group.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/process_group.hpp> moved to <ddp/comm/process_group.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/process_group.hpp"  // IWYU pragma: export
