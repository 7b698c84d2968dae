#pragma once

/// \file machine_peak.hpp
/// What this machine can do, measured with what LibTorch runs on here: the
/// denominators of model FLOPs utilization (MFU) and of a memory-bound
/// kernel's share of bandwidth.
///
/// \code
///   double forward_flops = 0;
///   {
///     ddp::training::FlopCounter counter;
///     model->forward(x);
///     forward_flops = counter.flops();
///   }
///   // ... an epoch of `steps` steps on every rank, its figures in `done` ...
///   const ddp::training::MachinePeak peak = ddp::training::measure_machine_peak();
///   const double mfu = ddp::training::model_flops_utilization(
///       3 * forward_flops * steps * group->size(), done.seconds, peak, peak.cores);
/// \endcode
///
/// Note [Measured on one core, quiet]
/// Each figure is one core's, taken on the calling thread with LibTorch's
/// intra-op threads set to 1 for the measurement (and set back): the
/// single-precision matrix product through the BLAS in use (ddp::base::
/// blas_in_use()), best of several 1024^3 products, and the memory
/// bandwidth of a += s b in place (12 bytes an element, through ATen's
/// vectorized kernel) over arrays far beyond any cache: in place, as an
/// optimizer's step is, so that no write-allocate traffic goes uncounted
/// (STREAM's triad into a third array moves 16 bytes for the 12 it counts).
/// Measure while the other ranks of this machine wait (before they start,
/// or at a barrier): a core shared with another rank's work measures less
/// than its peak and overstates MFU.

#include <cstdint>

namespace ddp::comm {
class ProcessGroup;
}  // namespace ddp::comm

namespace ddp::training {

/// One core's measured limits, and the cores this process may run on.
struct MachinePeak {
  double sgemm_gflops_per_core = 0;  ///< fp32 matrix product, one thread
  double memory_gbs_per_core = 0;    ///< memory bandwidth, one thread
  int cores = 0;                     ///< CPUs in this process's affinity mask
};

/// Measures one core's limits (Note [Measured on one core, quiet]); under
/// a second (0.2-0.8 s here).
MachinePeak measure_machine_peak();

/// The same, measured by rank 0 of `group` while the other ranks wait (the
/// quiet measurement of Note [Measured on one core, quiet]) and given to
/// every rank; a collective.
MachinePeak measure_machine_peak(comm::ProcessGroup& group);

/// Model FLOPs over `seconds` x `cores` x the per-core sgemm rate: the
/// share of the machine's arithmetic that did the model's work. `flops` is
/// every rank's on the `cores` given (a job of several machines passes their
/// cores summed).
/// \throws ConfigError for negative flops, seconds <= 0, cores < 1, or a peak
///   that was not measured.
double model_flops_utilization(double flops, double seconds, const MachinePeak& peak, int cores);

/// `bytes` moved in `seconds` over one core's memory bandwidth: a
/// memory-bound kernel's share of what one core can move.
/// \throws ConfigError as model_flops_utilization() does.
double bandwidth_utilization(double bytes, double seconds, const MachinePeak& peak);

}  // namespace ddp::training
