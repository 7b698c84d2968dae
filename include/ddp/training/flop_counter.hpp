#pragma once

/// \file flop_counter.hpp
/// Counts the floating-point operations of the matrix products LibTorch
/// runs, as PyTorch's torch.utils.flop_counter.FlopCounterMode does: the
/// model FLOPs that MFU (model FLOPs utilization) is taken over.
///
/// \code
///   ddp::training::FlopCounter counter;
///   torch::Tensor loss = torch::nll_loss(model->forward(x), y);
///   loss.backward();
///   const double step_flops = counter.flops();  // forward and backward
/// \endcode
///
/// Note [What a FlopCounter counts]
/// The products that carry a model's arithmetic, 2 FLOPs a multiply-add:
/// mm, addmm, bmm, baddbmm, addbmm, addmv (and their in-place forms), mv,
/// dot; convolution (forward,
/// and convolution_backward for each gradient it computes); the fused
/// attention kernels (scaled dot-product attention's flash and efficient
/// forms, forward and backward). A product made of others is counted once,
/// at the outermost (addbmm, which LibTorch's CPU kernel runs as one addmm_
/// a batch, is one addbmm). Element-wise work (activations,
/// norms, the optimizer) is not model FLOPs and is not counted, as in
/// PyTorch's counter and in MFU as PaLM defines it. The operators are seen
/// through LibTorch's RecordFunction observers on the calling thread and the
/// threads that take over its state (autograd's, at::parallel_for's): one
/// counter a process at a time.

#include <cstdint>
#include <map>
#include <string>

namespace ddp::training {

/// Counts matrix-product FLOPs from construction to destruction (Note [What
/// a FlopCounter counts]).
class FlopCounter {
 public:
  /// Starts counting.
  /// \throws ConfigError when another FlopCounter of this process counts.
  FlopCounter();
  /// Stops counting.
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  /// FLOPs counted so far.
  double flops() const;
  /// FLOPs counted so far by operator ("aten::mm": 1.2e9, ...).
  std::map<std::string, double> flops_by_operator() const;
  /// Forgets what was counted; counting goes on.
  void reset();

 private:
  uint64_t handle_;
};

}  // namespace ddp::training
