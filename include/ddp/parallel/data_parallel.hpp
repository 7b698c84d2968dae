#pragma once

/// \file data_parallel.hpp
/// DataParallel: one process trains on several devices. The batch is split
/// along dimension 0, each device runs its replica of the module on its own
/// thread, the outputs are gathered on one device, and the gradients land
/// summed in the wrapped module's parameters (PyTorch's
/// torch.nn.DataParallel), with replicas kept from step to step.
///
/// \code
///   ddp::DataParallel model(Net(), ddp::DataParallelOptions().devices(
///       {torch::Device("cuda:0"), torch::Device("cuda:1")}));
///   torch::optim::SGD optimizer(model->parameters(), 0.1);  // the wrapped module's
///   optimizer.zero_grad();
///   torch::nll_loss(model->forward(x), y).backward();      // sums into Net's .grad
///   optimizer.step();
/// \endcode
///
/// Note [Persistent replicas]
/// The wrapped (primary) module lives on devices[0] and is replica 0
/// itself. Replicas 1.. are deep clones made once, at construction; each
/// forward copies the primary's parameters and buffers into them in place
/// (LibTorch's data_parallel() clones the module at every call instead).
/// Because the replicas' parameters are their own leaves, their gradients
/// are added into the primary's .grad when backward finishes (a callback
/// queued by a gradient hook), so that a plain optimizer over
/// `model->parameters()` sees the gradient of the whole batch.
///
/// Note [Buffers follow PyTorch's DataParallel]
/// Every forward gives each replica the primary's buffers (batch-norm
/// running statistics). Updates made during forward by replica 0 (the
/// primary itself, on the first chunk) are kept; those made by the other
/// replicas are discarded at the next forward. In training mode each
/// replica's batch norm normalizes with its own chunk's statistics, so a
/// model with batch norm does not compute exactly what one module on the
/// whole batch would (use SyncBatchNorm for that); in eval mode it does.
///
/// Note [Batches smaller than the device count]
/// The batch is split as torch::chunk(devices.size()) splits it: chunks of
/// ceil(batch / devices) rows, the last one smaller. When that gives fewer
/// chunks than devices (a batch of 2 on 3 devices, or 5 on 4), only the
/// first replicas run, as in PyTorch. An empty batch is an error.

#include <c10/core/Device.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ddp/parallel/wrapped_module.hpp"

namespace ddp::parallel {

namespace detail {
class ReplicaSet;
}  // namespace detail

/// How forward_backward() relates the chunks' losses to the whole batch's.
enum class LossReduction {
  /// The loss is a mean over the batch (PyTorch's default): chunk losses
  /// are weighted by their share of the batch.
  kMean,
  /// The loss is a sum over the batch: chunk losses are added.
  kSum,
};

/// Options of DataParallel.
struct DataParallelOptions {
  /// One replica per entry; a device may repeat (two CPU replicas). Empty:
  /// every CUDA device, or the CPU once when there is none. The module must
  /// live on the first.
  TORCH_ARG(std::vector<c10::Device>, devices) = {};
  /// Where forward() gathers the outputs; default: devices[0].
  TORCH_ARG(std::optional<c10::Device>, output_device) = std::nullopt;
  /// forward_backward() computes the loss on each replica's device and runs
  /// each replica's backward on its own thread, so that only scalar losses
  /// reach the output device (the pytorch-encoding package's balanced
  /// memory). Without it, the outputs are gathered and the loss computed on
  /// the output device.
  TORCH_ARG(bool, balanced_memory) = false;
  /// See LossReduction; used by balanced forward_backward().
  TORCH_ARG(LossReduction, loss_reduction) = LossReduction::kMean;
};

/// A loss of one output and its target (a scalar tensor).
using LossFunction =
    std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

/// Runs a module on several devices of one process; see the file comment.
class DataParallelImpl : public torch::nn::Module {
 public:
  /// Wraps `module` (Cloneable, e.g. any TORCH_MODULE of torch::nn, your
  /// own `Cloneable<...>`, or a torch::nn::Sequential: Note [A Sequential in
  /// DataParallel]), which must live on devices[0]. Its forward takes one
  /// Tensor and returns one (a Sequential too).
  /// \throws ConfigError for invalid options, a module elsewhere than
  ///   devices[0], or a module that cannot be cloned.
  explicit DataParallelImpl(WrappedModule module, DataParallelOptions options = {});

  ~DataParallelImpl() override;

  /// Splits `input` along dimension 0, runs each chunk on its replica (each
  /// on its own thread) and returns the outputs concatenated on the output
  /// device. Backward through the result leaves the gradient of the whole
  /// batch in the wrapped module's .grad.
  /// \throws InvalidArgumentError for an empty or 0-dimensional input, or
  ///   scalar outputs. When a replica's forward throws, its error naming the
  ///   replica (index and device) with the original message: a ddp error
  ///   keeps its type, any other exception becomes ddp::Error.
  torch::Tensor forward(const torch::Tensor& input);

  /// One training step's forward and backward: `loss_fn(output, target)`
  /// and its backward, on the gathered output or, with balanced_memory,
  /// per replica on its device and thread. Returns the batch's loss
  /// (detached, on the output device); the gradients are in the wrapped
  /// module's .grad. `target` is split like `input`. With balanced_memory,
  /// `loss_fn` runs on the replicas' threads, concurrently.
  /// \throws InvalidArgumentError when target's dimension 0 differs from
  ///   input's, a loss is not a scalar, or gradients are disabled; a
  ///   replica's error naming the replica when one throws (as forward()).
  torch::Tensor forward_backward(const torch::Tensor& input, const torch::Tensor& target,
                                 const LossFunction& loss_fn);

  /// The wrapped module (replica 0).
  std::shared_ptr<torch::nn::Module> module() const { return module_.ptr(); }
  /// Replica `index` (0: the wrapped module); the same object at every step.
  std::shared_ptr<torch::nn::Module> replica(size_t index) const;
  /// The devices, one per replica.
  const std::vector<c10::Device>& devices() const { return options_.devices(); }
  /// The options in force (devices and output device resolved).
  const DataParallelOptions& options() const { return options_; }
  /// Replicas that ran in the last forward (fewer than devices() for a
  /// small batch).
  size_t replicas_used() const;

 private:
  torch::nn::AnyModule module_;
  DataParallelOptions options_;
  std::shared_ptr<detail::ReplicaSet> replicas_;
};

/// Module holder for DataParallelImpl, LibTorch style.
TORCH_MODULE(DataParallel);

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
