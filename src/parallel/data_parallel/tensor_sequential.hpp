#pragma once

// Internal: a torch::nn::Sequential as DataParallel's replicas need it, with
// one non-templated forward(Tensor) -> Tensor, so that an AnyModule can hold
// it and clone it per device.

#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>

#include <memory>
#include <utility>

#include "ddp/parallel/wrapped_module.hpp"

namespace ddp::parallel::detail {

// Note [A Sequential in DataParallel]
// DataParallel splits one tensor and concatenates one tensor, so the
// Sequential it replicates is Tensor -> Tensor. TensorSequentialImpl is a
// shallow copy of the user's Sequential: the same entries, so the same
// parameter and buffer tensors (the user's optimizer steps what
// DataParallel's backward fills), under the same names. clone() keeps the
// type, as AnyModule's clone per device requires.
class TensorSequentialImpl : public torch::nn::SequentialImpl {
 public:
  explicit TensorSequentialImpl(torch::nn::SequentialImpl& entries) {
    // A Sequential registers each entry as a child under its name, in order.
    const auto names = entries.named_children().keys();
    size_t index = 0;
    for (auto entry = entries.begin(); entry != entries.end(); ++entry) {
      push_back(names.at(index++), *entry);
    }
  }

  torch::Tensor forward(torch::Tensor input) {
    return torch::nn::SequentialImpl::forward(std::move(input));
  }

  std::shared_ptr<torch::nn::Module> clone(
      const torch::optional<torch::Device>& device = torch::nullopt) const override {
    auto copy = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(
        torch::nn::SequentialImpl::clone(device));
    return std::make_shared<TensorSequentialImpl>(*copy);
  }
};

/// `module` as an AnyModule: itself, or a Sequential through
/// TensorSequentialImpl.
inline torch::nn::AnyModule as_tensor_module(const WrappedModule& module) {
  if (!module.sequential()) return module.any_module();
  return torch::nn::AnyModule(std::make_shared<TensorSequentialImpl>(*module.sequential()));
}

}  // namespace ddp::parallel::detail
