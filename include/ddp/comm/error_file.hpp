#pragma once

/// \file error_file.hpp
/// Reporting a worker's fatal error to its launcher.
///
/// torchrun and ddprun give each worker TORCHELASTIC_ERROR_FILE; a worker
/// that fails writes its error there, in torchrun's JSON schema, and the
/// launcher's summary names it. No decorator is needed (torchrun's Python
/// needs `@record`): ddp::init() installs record_uncaught_errors(), so an
/// exception that escapes main() is recorded before the process aborts. A
/// program that catches its exceptions records them itself:
///
/// \code
///   int main() {
///     try { train(); } catch (const std::exception& e) {
///       ddp::record_error(e);   // no-op when not under a launcher
///       return static_cast<int>(ddp::exit_code_for(e));
///     }
///     return 0;
///   }
/// \endcode

#include <exception>
#include <optional>
#include <string>

namespace ddp::comm {

/// What a failed worker recorded.
struct RecordedError {
  std::string message;
  int rank = -1;
  /// Seconds since the epoch when it was recorded.
  double timestamp = 0;
  /// The exit code of the error's kind (ddp::ExitCode), torchrun's
  /// "errorCode"; 0 when the file has none.
  int error_code = 0;
};

/// Writes `error`'s message, the exit code of its kind, this process's rank
/// and the time to the file named by TORCHELASTIC_ERROR_FILE, if set:
/// {"message": {"message": ..., "errorCode": ..., "extraInfo":
/// {"timestamp": ..., "flight_recorder": [...], ...}}}, torchrun's schema,
/// where "flight_recorder" lists the process's last collectives
/// (ddp/comm/flight_recorder.hpp), when it issued any. Returns whether a file was
/// written; never throws.
bool record_error(const std::exception& error) noexcept;

/// As record_error(), with the destination, rank and error code given
/// explicitly.
bool record_error_to(const std::string& path, const std::string& message, int rank,
                     int error_code = 1) noexcept;

/// Installs (once) a std::terminate handler that records the exception
/// escaping main() with record_error() before the previous handler runs
/// (which aborts). ddp::init() calls it.
void record_uncaught_errors() noexcept;

/// Reads an error file written by record_error() (or by torchrun's Python
/// workers); nullopt when it is missing or unreadable.
std::optional<RecordedError> read_error_file(const std::string& path);

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
