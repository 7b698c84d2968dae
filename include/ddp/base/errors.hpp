#pragma once

/// \file errors.hpp
/// The exceptions ddp throws, and their exit codes. Every message says what
/// was wrong, the offending value, and what to do about it. They are the
/// base layer (namespace ddp::base, below the communication layer), since
/// every layer and part throws them and the one table of exit codes must sit
/// below all of them.
///
/// Note [One exception type per failure kind]
/// Callers (and the launcher, which maps them to exit codes) need to tell a
/// mistake in the configuration from a rendezvous that never completed or a
/// collective that stalled, without parsing messages. Each kind therefore has
/// its own type and its own exit code; all derive from ddp::Error so a single
/// catch still works. The kinds every layer and part may throw are declared
/// here; a kind that only one part throws is declared by that part, in
/// ddp/<part>/errors.hpp and namespace ddp::<part>, and is also named in ddp
/// (ddp::SnapshotError is ddp::snapshot::SnapshotError). Its exit code stays
/// in the one table below, so that the codes stay unique.
///
/// Note [Exit codes]
/// ddp's programs (ddprun, the examples, the tools) exit with
/// exit_code_for(error) when an exception ends them:
///
///   type                      ExitCode              value  declared in
///   (no error)                kSuccess                  0
///   Error, any other          kFailure                  1  ddp/base/errors.hpp
///   (2 is unused: shells and many tools give it to a bad command line)
///   ConfigError               kConfig                   3  ddp/base/errors.hpp
///   RendezvousError           kRendezvous               4  ddp/base/errors.hpp
///   TimeoutError              kTimeout                  5  ddp/base/errors.hpp
///   CollectiveError           kCollective               6  ddp/base/errors.hpp
///   InvalidArgumentError      kInvalidArgument          7  ddp/base/errors.hpp
///   BackendUnavailableError   kBackendUnavailable       8  ddp/base/errors.hpp
///   SnapshotError             kSnapshot                 9  ddp/snapshot/errors.hpp
///   DataError                 kData                    10  ddp/data/errors.hpp
///   MetricsError              kMetrics                 11  ddp/training/errors.hpp
///   PlotError                 kPlot                    12  ddp/training/errors.hpp
///   IoError                   kIo                      13  ddp/base/errors.hpp
///   LaunchError               kLaunch                  14  ddp/launch/errors.hpp
///   FormatError               kFormat                  15  ddp/formats/errors.hpp
///
/// The values never change once released (scripts compare them); a new kind
/// takes the next free value and gets a row and an enumerator here, a class
/// in the header of the part that throws it (here if several do), and a case
/// in tests/base/errors_test.cpp.

#include <exception>
#include <stdexcept>
#include <string>

namespace ddp::base {

/// Exit codes that ddp's tools use for each failure kind, so that scripts and
/// the launcher can tell them apart (Note [Exit codes]).
enum class ExitCode : int {
  kSuccess = 0,
  kFailure = 1,
  kConfig = 3,
  kRendezvous = 4,
  kTimeout = 5,
  kCollective = 6,
  kInvalidArgument = 7,
  kBackendUnavailable = 8,
  kSnapshot = 9,
  kData = 10,
  kMetrics = 11,
  kPlot = 12,
  kIo = 13,
  kLaunch = 14,
  kFormat = 15,
};

/// Base of every exception ddp throws. Thrown as itself only when a failure
/// fits none of the kinds, those below and the parts' (e.g. DataParallel
/// rethrowing a replica's foreign exception with the replica named); its exit
/// code is kFailure.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  /// The exit code of this kind (Note [Exit codes]).
  virtual ExitCode exit_code() const noexcept { return ExitCode::kFailure; }
  /// Throws an exception of this same kind whose message is `prefix`
  /// followed by this one's: context is added without losing the kind.
  [[noreturn]] virtual void rethrow_with_prefix(const std::string& prefix) const {
    throw Error(prefix + what());
  }
};

/// The base of every kind, here and in the parts: the kind's type and exit
/// code, given once, give its exit_code() and rethrow_with_prefix().
template <typename Kind, ExitCode kCode>
class ErrorOfKind : public Error {
 public:
  /// An error of this kind with `message`.
  explicit ErrorOfKind(const std::string& message) : Error(message) {}
  /// `kCode`.
  ExitCode exit_code() const noexcept override { return kCode; }
  /// Throws a `Kind` with `prefix` before this message.
  [[noreturn]] void rethrow_with_prefix(const std::string& prefix) const override {
    throw Kind(prefix + what());
  }
};

/// A bad option or environment variable: a value that is missing, not a
/// number, out of range, or inconsistent with another value. Thrown when
/// options are validated (ddp::init, the constructors of DDP, SyncBatchNorm,
/// GradScaler, SnapshotManager, ...) and by ddprun for a bad command line.
class ConfigError : public ErrorOfKind<ConfigError, ExitCode::kConfig> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// The rendezvous failed: the master was unreachable, its port was taken, not
/// every rank joined within the rendezvous timeout, or the connection to the
/// rendezvous store was lost. Thrown by ddp::init, TcpStore and ddprun.
class RendezvousError : public ErrorOfKind<RendezvousError, ExitCode::kRendezvous> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// An operation (a collective, a store wait) did not finish within its
/// timeout. Thrown by Work::wait() and the collectives, and by
/// TcpStore::get()/wait().
class TimeoutError : public ErrorOfKind<TimeoutError, ExitCode::kTimeout> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// A collective failed for a reason other than a timeout: a peer closed its
/// connection, or the backend reported an error. Thrown by Work::wait() and
/// the collectives.
class CollectiveError : public ErrorOfKind<CollectiveError, ExitCode::kCollective> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// A call with arguments it cannot accept: a collective with an unsupported
/// dtype, mismatched sizes or a root out of range; a model that differs
/// between ranks; an input DataParallel cannot split; an index past the end
/// of a data set; a GradScaler or SyncBatchNorm call out of order.
class InvalidArgumentError : public ErrorOfKind<InvalidArgumentError, ExitCode::kInvalidArgument> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// The requested backend is not compiled into this build of ddp (for
/// example `nccl` against a CPU-only LibTorch), or the resources it needs
/// (shared memory) cannot be had. Thrown by ddp::init.
class BackendUnavailableError
    : public ErrorOfKind<BackendUnavailableError, ExitCode::kBackendUnavailable> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// A file or directory that cannot be created, opened, read or written,
/// outside the kinds that report their own files (SnapshotError, DataError,
/// MetricsError): a timeline, a launcher log or scratch directory. The
/// message names the path and the system's reason.
class IoError : public ErrorOfKind<IoError, ExitCode::kIo> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// Maps an exception to the exit code of its kind (kFailure for ddp::Error
/// itself and for any other exception).
ExitCode exit_code_for(const std::exception& error) noexcept;

}  // namespace ddp::base

namespace ddp {
using namespace base;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
