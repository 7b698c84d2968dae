#pragma once

/// \file error_file.hpp
/// Reporting a worker's fatal error to its launcher.
///
/// torchrun and ddprun give each worker TORCHELASTIC_ERROR_FILE; a worker
/// that fails writes its error there, and the launcher's summary names it.
///
/// \code
///   int main() {
///     try { train(); } catch (const std::exception& e) {
///       ddp::record_error(e);   // no-op when not under a launcher
///       throw;
///     }
///   }
/// \endcode

#include <exception>
#include <optional>
#include <string>

namespace ddp {

/// What a failed worker recorded.
struct RecordedError {
  std::string message;
  int rank = -1;
  /// Seconds since the epoch when it was recorded.
  double timestamp = 0;
};

/// Writes `error`'s message, this process's rank and the time to the file
/// named by TORCHELASTIC_ERROR_FILE (torchrun's JSON layout), if set.
/// Returns whether a file was written; never throws.
bool record_error(const std::exception& error) noexcept;

/// As record_error(), with the destination and rank given explicitly.
bool record_error_to(const std::string& path, const std::string& message, int rank) noexcept;

/// Reads an error file written by record_error() (or by torchrun's Python
/// workers); nullopt when it is missing or unreadable.
std::optional<RecordedError> read_error_file(const std::string& path);

}  // namespace ddp
