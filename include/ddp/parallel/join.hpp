#pragma once

/// \file join.hpp
/// Uneven inputs: ranks that run out of batches early leave the training
/// loop and shadow the collectives of the ranks still training, so that no
/// rank hangs (PyTorch's torch.distributed.algorithms.Join).
///
/// \code
///   ddp::DistributedDataParallel model(Net(), group);
///   ddp::Join join({model.get()});
///   for (auto& batch : my_batches) {   // a different count on each rank
///     optimizer.zero_grad();
///     torch::nll_loss(model->forward(batch.data), batch.target).backward();
///     optimizer.step();
///   }
///   join.join();   // shadows the others until every rank is done
/// \endcode
///
/// Note [Joining]
/// While a Join is alive, each iteration of a rank still training starts
/// with one small all-reduce (issued by the first joinable, e.g. DDP's
/// forward) that tells every rank how many ranks are still training,
/// whether they synchronize gradients in this iteration, and which of them
/// has the highest rank (the source of buffers). A rank that has called
/// join() answers that all-reduce with zeros, then issues what its
/// joinables would have issued in the iteration (DDP: the buffer broadcast
/// and one all-reduce of zeros per gradient bucket), so the collectives of
/// every rank still match. When a round finds no rank training, every rank
/// leaves; the last ranks to join were still training in the previous
/// round, and the highest of them is the source from which every joinable
/// copies its final state (DDP: parameters and buffers) to all ranks.

#include <torch/arg.h>

#include <memory>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::parallel {

class Join;

/// Options of Join, as PyTorch's keyword arguments.
struct JoinOptions {
  /// Off: the context does nothing, and every rank must run the same
  /// number of iterations.
  TORCH_ARG(bool, enable) = true;
  /// Make every rank throw CollectiveError as soon as one rank has joined,
  /// instead of shadowing it (PyTorch's throw_on_early_termination).
  TORCH_ARG(bool, throw_on_early_termination) = false;
  /// Average gradients over the initial world size (true: a joined rank
  /// counts as a rank with zero gradients) or over the ranks that
  /// contributed to the iteration (false). PyTorch's DDP join hook option
  /// of the same name, default true.
  TORCH_ARG(bool, divide_by_initial_world_size) = true;
};

/// What the ranks still training do in one iteration, as every rank learns
/// it from the round's all-reduce.
struct JoinRound {
  /// Ranks still training (0: every rank has joined).
  int active = 0;
  /// Whether they synchronize gradients in this iteration (false under
  /// no_sync()).
  bool sync = false;
  /// The highest rank still training: where buffers come from.
  int source = -1;
  /// The group's size.
  int world = 1;
};

/// A participant of a Join: something that issues collectives every
/// iteration (DistributedDataParallel). See Note [Joining].
class Joinable {
 public:
  virtual ~Joinable() = default;
  /// The group this object communicates over; every joinable of one Join
  /// shares one group.
  virtual ProcessGroup& join_process_group() = 0;
  /// On a rank that has joined, once per round in which others still train:
  /// issues what this object would have issued in that iteration.
  virtual void join_shadow(const JoinRound& round) = 0;
  /// On every rank, once every rank has joined: makes this object's state
  /// equal on every rank, copying it from rank `source`.
  virtual void join_finish(int source) = 0;

  /// The Join this object takes part in, or null.
  Join* active_join() const noexcept { return join_; }

 private:
  friend class Join;
  Join* join_ = nullptr;
};

/// The context for uneven inputs; see the file comment and Note [Joining].
class Join {
 public:
  /// Enters the context with `joinables` (not owned; they must outlive it).
  /// \throws InvalidArgumentError for an empty list, a null entry, a
  ///   joinable already in another Join, or joinables on different groups.
  explicit Join(std::vector<Joinable*> joinables, JoinOptions options = {});
  /// Calls join() if it has not been called and no exception is unwinding
  /// (an error is then written to stderr, since a destructor cannot throw),
  /// and leaves the context.
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  /// Called by a joinable at the start of each iteration on a rank still
  /// training, with whether the iteration synchronizes gradients. The
  /// first joinable's call runs the round's all-reduce; the others get its
  /// result. \throws CollectiveError with throw_on_early_termination when
  ///   a rank has joined.
  JoinRound notify(const Joinable& caller, bool sync);

  /// This rank has no more inputs: shadows the ranks still training until
  /// every rank has joined, then has every joinable copy its final state
  /// from the last rank to join. Returns that rank. Idempotent.
  /// \throws CollectiveError with throw_on_early_termination when another
  ///   rank is still training.
  int join();

  /// The options in force.
  const JoinOptions& options() const noexcept { return options_; }
  /// The last round this rank took part in.
  const JoinRound& last_round() const noexcept { return round_; }

 private:
  JoinRound exchange(bool active, bool sync);

  std::vector<Joinable*> joinables_;
  JoinOptions options_;
  ProcessGroup* group_ = nullptr;
  JoinRound round_;
  bool joined_ = false;
  int source_ = -1;
};

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
