#pragma once

// Internal: a GradScaler's state in a snapshot's "scalars" JSON record
// (used by src/snapshot/snapshot.cpp for TrainingState::grad_scaler).

#include <nlohmann/json.hpp>

#include <string>

#include "ddp/amp/grad_scaler.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot::detail {

inline nlohmann::json grad_scaler_to_json(const amp::GradScaler& scaler) {
  const amp::GradScalerState s = scaler.state();
  return {{"scale", s.scale},
          {"growth_tracker", s.growth_tracker},
          {"growth_factor", s.growth_factor},
          {"backoff_factor", s.backoff_factor},
          {"growth_interval", s.growth_interval}};
}

/// The saved state, checked against GradScaler's rules without touching
/// `live`. \throws SnapshotError naming `path` when it is missing or invalid.
inline amp::GradScalerState grad_scaler_from_json(const nlohmann::json& scalars,
                                                  const amp::GradScaler& live,
                                                  const std::string& path) {
  if (!scalars.contains("grad_scaler")) {
    throw SnapshotError(path + ": the snapshot holds no gradient scaler state");
  }
  const nlohmann::json& saved = scalars.at("grad_scaler");
  amp::GradScalerState state;
  state.scale = saved.at("scale").get<double>();
  state.growth_tracker = saved.at("growth_tracker").get<int64_t>();
  state.growth_factor = saved.at("growth_factor").get<double>();
  state.backoff_factor = saved.at("backoff_factor").get<double>();
  state.growth_interval = saved.at("growth_interval").get<int64_t>();
  try {
    amp::GradScaler(live).load_state(state);  // a copy: validation only
  } catch (const ConfigError& e) {
    throw SnapshotError(path + ": invalid gradient scaler state: " + e.what());
  }
  return state;
}

}  // namespace ddp::snapshot::detail
