#pragma once

// Internal: a recorded collective as JSON, one form for both places that
// write it: the error file's extraInfo.flight_recorder (ddp::record_error)
// and the positions ddprun's agents exchange after a failure (Note
// [Reading a stall] in launch/stall_report.hpp).

#include <nlohmann/json.hpp>

#include "ddp/comm/flight_recorder.hpp"

namespace ddp::comm::flight_recorder::detail {

/// {"sequence", "group", "operation", "name", "dtype", "numel", "bytes",
///  "start_time", "duration", "state": "completed"|...}.
nlohmann::json entry_to_json(const Entry& entry);

/// The entry entry_to_json() wrote; missing or malformed fields take
/// Entry's defaults (an unknown state reads as issued).
Entry entry_from_json(const nlohmann::json& json);

}  // namespace ddp::comm::flight_recorder::detail
