#pragma once

// Evaluation shared by the examples: every rank scores a slice of the test
// set and the counts are summed, so evaluation takes 1/world of the time.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::examples {

/// Copies rank 0's buffers (batch-norm running statistics) to every rank, so
/// that every rank evaluates the model rank 0 would save. (DDP broadcasts
/// them before each forward, but each rank's last forward updated its own.)
inline void broadcast_buffers(torch::nn::Module& module, ProcessGroup& group) {
  broadcast_tensors(group, module.buffers(), 0);
}

/// The fraction of `images` that `model` classifies as `labels`. Rank r
/// scores rows r, r + world, r + 2 world, ...; one all-reduce sums the
/// counts, so every rank returns the accuracy on the whole set. Every rank
/// runs as many batches (of at most `batch_size`) as the largest slice
/// needs, so that a forward that communicates (FullyShardedDataParallel
/// gathers each unit) meets the same collectives on every rank. Each batch
/// goes to the device of the model's parameters (the data may stay on the
/// CPU). `forward` (default: model->forward) runs the model, e.g. under
/// mixed precision.
template <typename Model>
double sharded_accuracy(Model& model, const torch::Tensor& images, const torch::Tensor& labels,
                        ProcessGroup& group, int64_t batch_size = 1000,
                        std::function<torch::Tensor(const torch::Tensor&)> forward = nullptr) {
  if (!forward) forward = [&model](const torch::Tensor& x) { return model->forward(x); };
  const std::vector<torch::Tensor> parameters = model->parameters();
  const torch::Device device = parameters.empty() ? images.device() : parameters[0].device();
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor mine =
      torch::arange(group.rank(), images.size(0), group.size(),
                    torch::TensorOptions().dtype(torch::kLong).device(images.device()));
  const int64_t largest = (images.size(0) + group.size() - 1) / group.size();
  const int64_t batches = (largest + batch_size - 1) / batch_size;
  int64_t correct = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t begin = b * mine.size(0) / batches, end = (b + 1) * mine.size(0) / batches;
    if (begin == end) continue;  // a slice of fewer rows than batches (a tiny test set)
    torch::Tensor index = mine.slice(0, begin, end);
    torch::Tensor predicted = forward(images.index_select(0, index).to(device)).argmax(1);
    correct +=
        predicted.eq(labels.index_select(0, index).to(device)).sum().template item<int64_t>();
  }
  model->train();
  torch::Tensor counts =
      torch::tensor(std::vector<int64_t>{correct, mine.size(0)}, torch::kInt64);  // CPU: Gloo
  group.all_reduce(counts, ReduceOp::kSum);
  return static_cast<double>(counts[0].item<int64_t>()) /
         static_cast<double>(counts[1].item<int64_t>());
}

/// The sum of `value` over all ranks (float64, one collective).
inline double sum_across_ranks(double value, ProcessGroup& group) {
  torch::Tensor t = torch::tensor({value}, torch::kFloat64);
  group.all_reduce(t, ReduceOp::kSum);
  return t.item<double>();
}

}  // namespace ddp::examples
