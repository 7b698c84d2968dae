#pragma once

// Internal: how every rank of a DistributedDataParallel learns why an
// iteration failed when the ranks disagree.
//
// Note [Naming a mismatch on every rank]
// When ranks disagree (a parameter used on some ranks only, without
// find_unused_parameters; a rank that skipped a backward; ranks that run
// different numbers of iterations), the rank that notices can name the
// cause, but its peers only see a collective that never completes: they
// time out, or fail when the other process exits, with nothing to say why
// (PyTorch's "Expected to have finished reduction in the prior iteration").
// So each DDP keeps a board in the rendezvous store (ProcessGroup::
// rendezvous_store(), its own connection), written only when something is
// wrong or a rank leaves, never in a healthy iteration:
//   error/<rank>    the message of a mismatch a rank detected itself;
//   skipped/<rank>  the first training forward whose backward it skipped;
//   left/<rank>     how many iterations it ran before its DDP was destroyed;
//   read/<rank>     that it has read the board after a failure.
// A rank whose collective fails reads the board and throws a message
// naming the other ranks' reports, the iteration and its own collective.
// Rank 0 hosts the store, so when rank 0 detects a mismatch it waits (at
// most twice the collective timeout: a peer that started its collective
// later than rank 0 noticed times out later too) until every other rank has
// read the board, reported its own error or left, before it throws and takes
// the store down.

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace c10d {
class Store;
}  // namespace c10d

namespace ddp::parallel::detail {

class MismatchBoard {
 public:
  /// A board for one DDP: enabled when `group` has a rendezvous store and
  /// more than one rank. DDPs must be constructed in the same order on
  /// every rank (their construction is collective), which numbers them.
  explicit MismatchBoard(ProcessGroup& group);
  ~MismatchBoard();

  /// Posts `message`, the mismatch this rank detected, before it throws.
  void report_error(const std::string& message);
  /// Notes (once) that this rank skipped the backward of training forward
  /// `iteration`.
  void note_skipped_backward(int64_t iteration);
  /// Notes that this rank's DDP is going away after `iterations` training
  /// forwards, `synchronized` of them reduced. Never throws.
  void note_left(int64_t iterations, int64_t synchronized) noexcept;

  /// Throws the error that replaces `failure` of `what` (e.g. "the gradient
  /// collectives") in training forward `iteration`: InvalidArgumentError
  /// naming the other ranks' reports if there are any, else TimeoutError or
  /// CollectiveError with what the board could tell. Call it from the
  /// handler that caught `failure` (without a board it rethrows that).
  [[noreturn]] void explain(const Error& failure, const std::string& what, int64_t iteration);

 private:
  std::string key(const char* kind, int rank) const;
  bool has(const std::string& key);
  std::string read(const std::string& key);
  void post(const std::string& key, const std::string& value);

  c10::intrusive_ptr<c10d::Store> store_;  // null: disabled
  int rank_ = 0;
  int world_ = 1;
  std::chrono::milliseconds timeout_;
  std::string prefix_;
  bool skipped_noted_ = false;
  bool reported_ = false;
};

}  // namespace ddp::parallel::detail
