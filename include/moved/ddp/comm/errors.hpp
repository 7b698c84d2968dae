#pragma once
// The old path of <ddp/base/errors.hpp>, kept so that old includes compile
// (Note [Moved headers] in cmake/DdpLibrary.cmake). The kinds were
// ddp::comm's; the using-directive keeps ddp::comm::ConfigError and the rest
// naming them (ddp::ConfigError is the spelling to use).
#pragma GCC warning \
    "<ddp/comm/errors.hpp> moved to <ddp/base/errors.hpp>; include the new path (the old one will be removed)"
#include "ddp/base/errors.hpp"  // IWYU pragma: export

namespace ddp::comm {
using namespace base;
}  // namespace ddp::comm
