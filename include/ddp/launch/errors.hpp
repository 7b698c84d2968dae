#pragma once

/// \file errors.hpp
/// The exceptions of ddp::launch (Note [One exception type per failure kind] in
/// ddp/base/errors.hpp). Each kind's exit code is in the one table,
/// Note [Exit codes] there. The names are also ddp's (ddp::LaunchError).

#include "ddp/base/errors.hpp"

namespace ddp::launch {

/// The launcher (ddprun) could not do its own work, for a reason that is
/// neither a bad option, a rendezvous failure nor a timeout: a worker
/// process could not be started (no pipe, fork failed), or no free port
/// could be found for the workers.
class LaunchError : public base::ErrorOfKind<LaunchError, base::ExitCode::kLaunch> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

}  // namespace ddp::launch

namespace ddp {
// Also ddp's names, as every kind's was when ddp/base/errors.hpp declared them all.
using launch::LaunchError;
}  // namespace ddp
