#pragma once

/// \file runtime.hpp
/// Horovod's process-wide entry points: `hvd::init()`, `hvd::rank()`,
/// `hvd::size()`, `hvd::local_rank()`, `hvd::local_size()`.
///
/// \code
///   ddp::hvd::init();                        // under ddprun, torchrun, mpirun or srun
///   if (ddp::hvd::rank() == 0) std::cout << ddp::hvd::size() << " ranks\n";
/// \endcode
///
/// Note [One default group per process]
/// Horovod keeps one communicator per process; so does ddp::hvd: init()
/// starts a ddp::ProcessGroup (or adopts yours) and the other functions and
/// the defaults of DistributedOptimizer, broadcast_parameters and
/// broadcast_optimizer_state use it. Everything here also takes an explicit
/// group, for programs that hold several.

#include <memory>

#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::hvd {

/// Starts the process group (ddp::init(options)) and makes it the default.
/// Calling it again returns the group already started.
/// \throws what ddp::init() throws.
std::shared_ptr<ProcessGroup> init(const InitOptions& options = {});

/// Makes an existing group the default (replacing any earlier one).
/// \throws ConfigError when `group` is null.
void init(std::shared_ptr<ProcessGroup> group);

/// Forgets the default group (it is destroyed once nothing else holds it).
void shutdown();

/// Whether init() has been called (and shutdown() has not).
bool is_initialized();

/// The default group.
/// \throws ConfigError when init() has not been called.
std::shared_ptr<ProcessGroup> process_group();

/// This process's rank in the default group (Horovod's hvd.rank()).
int rank();
/// The number of processes (hvd.size()).
int size();
/// This process's rank on its node (hvd.local_rank()).
int local_rank();
/// The number of processes on this node (hvd.local_size()).
int local_size();

namespace detail {
/// `group` when given, else the default group; `who` names the caller in
/// the error when neither exists.
std::shared_ptr<ProcessGroup> group_or_default(std::shared_ptr<ProcessGroup> group,
                                               const char* who);
}  // namespace detail

}  // namespace ddp::hvd
