#pragma once

/// \file errors.hpp
/// The exceptions ddp throws. Every message says what was wrong, the
/// offending value, and what to do about it.
///
/// Note [One exception type per failure kind]
/// Callers (and the launcher, which maps them to exit codes) need to tell a
/// mistake in the configuration from a rendezvous that never completed or a
/// collective that stalled, without parsing messages. Each kind therefore has
/// its own type; all derive from ddp::Error so a single catch still works.

#include <stdexcept>
#include <string>

namespace ddp {

/// Base of every exception ddp throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A bad option or environment variable: a value that is missing, not a
/// number, out of range, or inconsistent with another value.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// The rendezvous failed: the master was unreachable, its port was taken, or
/// not every rank joined within the rendezvous timeout.
class RendezvousError : public Error {
 public:
  using Error::Error;
};

/// An operation (a collective, a store wait) did not finish within its
/// timeout.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// A collective failed for a reason other than a timeout: a peer closed its
/// connection, or the engine reported an error.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

/// A collective was called with arguments it cannot accept: an unsupported
/// dtype, mismatched sizes, a root out of range.
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

/// The requested backend is not compiled into this build of ddp (for
/// example `nccl` against a CPU-only LibTorch).
class BackendUnavailableError : public Error {
 public:
  using Error::Error;
};

/// Exit codes that ddp's tools use for each failure kind, so that scripts and
/// the launcher can tell them apart.
enum class ExitCode : int {
  kSuccess = 0,
  kFailure = 1,
  kConfig = 3,
  kRendezvous = 4,
  kTimeout = 5,
  kCollective = 6,
  kInvalidArgument = 7,
  kBackendUnavailable = 8,
};

/// Maps an exception to the exit code of its kind (kFailure for any other).
ExitCode exitCodeFor(const std::exception& error) noexcept;

}  // namespace ddp
