#pragma once
// The old path of <ddp/comm/tcp_store.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake).
#pragma GCC warning \
    "<ddp/tcp_store.hpp> moved to <ddp/comm/tcp_store.hpp>; include the new path (the old one will be removed)"
#include "ddp/comm/tcp_store.hpp"  // IWYU pragma: export
