#include "ddp/errors.hpp"

namespace ddp {

// Every kind derives from Error directly, so the order of the checks does
// not matter; a kind derived from another kind would have to come first.
ExitCode exit_code_for(const std::exception& error) noexcept {
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
  if (dynamic_cast<const SnapshotError*>(&error)) return ExitCode::kSnapshot;
  if (dynamic_cast<const DataError*>(&error)) return ExitCode::kData;
  if (dynamic_cast<const MetricsError*>(&error)) return ExitCode::kMetrics;
  if (dynamic_cast<const PlotError*>(&error)) return ExitCode::kPlot;
  if (dynamic_cast<const IoError*>(&error)) return ExitCode::kIo;
  if (dynamic_cast<const LaunchError*>(&error)) return ExitCode::kLaunch;
  return ExitCode::kFailure;
}

}  // namespace ddp
