#pragma once

/// \file powersgd_hook.hpp
/// PowerSGD (Vogels et al., NeurIPS 2019) as a DistributedDataParallel comm
/// hook, PyTorch's powerSGD_hook: each matrix-shaped gradient is sent as two
/// thin factors of rank r, with error feedback and warm start.
///
/// \code
///   auto hook = std::make_shared<ddp::PowerSgdHook>(
///       ddp::PowerSgdOptions().matrix_approximation_rank(2).start_iteration(100));
///   ddp::DistributedDataParallel model(
///       Net(), ddp::DistributedDataParallelOptions().comm_hook(hook), group);
/// \endcode

#include <ATen/core/Generator.h>
#include <torch/arg.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "ddp/parallel/comm_hook.hpp"

namespace ddp::parallel {

/// Options of PowerSgdHook, as PyTorch's PowerSGDState.
struct PowerSgdOptions {
  /// r: the rank of each gradient's approximation (PyTorch's
  /// matrix_approximation_rank). Higher is more exact and sends more.
  TORCH_ARG(int64_t, matrix_approximation_rank) = 1;
  /// Iterations reduced uncompressed (an averaging all-reduce) before
  /// compression starts (PyTorch's start_powerSGD_iter); at least 2 with
  /// error feedback or warm start, because DDP regroups its buckets after
  /// the first iteration.
  TORCH_ARG(int64_t, start_iteration) = 1000;
  /// An n x m gradient is compressed only when (n + m) * r * this rate is
  /// below n * m (PyTorch's min_compression_rate); others, and every tensor
  /// with fewer than 2 dimensions, are all-reduced uncompressed.
  TORCH_ARG(double, min_compression_rate) = 2;
  /// Add what compression lost in the previous iteration to this one's
  /// gradient before compressing (PyTorch's use_error_feedback).
  TORCH_ARG(bool, use_error_feedback) = true;
  /// Start each iteration's power iteration from the previous factor
  /// instead of a new random one (PyTorch's warm_start).
  TORCH_ARG(bool, warm_start) = true;
  /// Seed of the random initial factors, the same on every rank.
  TORCH_ARG(uint64_t, random_seed) = 0;
};

/// The PowerSGD comm hook. Per bucket and iteration, after start_iteration:
/// the uncompressed tensors are averaged by one all-reduce; for each
/// compressed n x m gradient M (plus its error), P = M Q is all-reduced,
/// orthonormalized, Q = M^T P is all-reduced and averaged, and P Q^T
/// replaces M; the difference is kept as the next iteration's error. Two
/// all-reduces of (n + m) r elements replace one of n m.
///
/// Note [PowerSGD's second collective]
/// Q needs the all-reduced P, so the second all-reduce is issued in the
/// Work::then() callback, on the thread that waits for the bucket: all P
/// all-reduces overlap backward, the Q all-reduces follow in bucket order at
/// the end of backward, identically on every rank.
class PowerSgdHook final : public CommHook {
 public:
  /// \throws ConfigError for a rank below 1, a negative compression rate, or
  ///   a start_iteration below 2 with error feedback or warm start.
  explicit PowerSgdHook(PowerSgdOptions options = {});

  Work reduce(ProcessGroup& group, const GradBucket& bucket) override;
  std::string name() const override { return "powersgd"; }

  /// The options in force.
  const PowerSgdOptions& options() const { return options_; }
  /// Iterations handed over so far (counted at each last bucket).
  int64_t iteration() const { return iteration_; }
  /// Bucket `index`'s error feedback: what compression left out of this
  /// rank's gradients in the last iteration, laid out as the bucket (zero
  /// for uncompressed tensors); undefined before compression starts.
  at::Tensor error(size_t index) const;
  /// Elements this rank has all-reduced through the hook so far.
  int64_t communicated_elements() const { return communicated_elements_; }

 private:
  // What the hook keeps per bucket; reset when the bucket's layout changes.
  struct BucketState {
    std::vector<std::vector<int64_t>> shapes;
    at::Tensor error;
    std::vector<at::Tensor> q;  // per compressed gradient, m x r
  };

  Work reduce_compressed(ProcessGroup& group, const GradBucket& bucket);
  BucketState& state_for(const GradBucket& bucket);
  at::Tensor random_factor(int64_t rows, int64_t rank, const at::TensorOptions& options);

  PowerSgdOptions options_;
  int64_t iteration_ = 0;
  int64_t communicated_elements_ = 0;
  std::map<size_t, BucketState> states_;
  at::Generator generator_;
};

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
