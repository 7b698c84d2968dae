#include "ddp/errors.hpp"

namespace ddp {

ExitCode exitCodeFor(const std::exception& error) noexcept {
  if (dynamic_cast<const ConfigError*>(&error)) return ExitCode::kConfig;
  if (dynamic_cast<const RendezvousError*>(&error)) return ExitCode::kRendezvous;
  if (dynamic_cast<const TimeoutError*>(&error)) return ExitCode::kTimeout;
  if (dynamic_cast<const CollectiveError*>(&error)) return ExitCode::kCollective;
  if (dynamic_cast<const InvalidArgumentError*>(&error)) {
    return ExitCode::kInvalidArgument;
  }
  if (dynamic_cast<const BackendUnavailableError*>(&error)) {
    return ExitCode::kBackendUnavailable;
  }
  return ExitCode::kFailure;
}

}  // namespace ddp
