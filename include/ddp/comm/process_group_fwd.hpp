#pragma once

/// \file process_group_fwd.hpp
/// ProcessGroup declared, not defined, for headers that only pass a group
/// on (by reference or std::shared_ptr): a change to process_group.hpp then
/// rebuilds only the sources that call the group.

namespace ddp::comm {
class ProcessGroup;
}  // namespace ddp::comm

namespace ddp {
using comm::ProcessGroup;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
