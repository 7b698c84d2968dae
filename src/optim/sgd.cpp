#include "ddp/optim/sgd.hpp"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/ScalarType.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/compat/torch_compat.hpp"

namespace ddp::optim {
namespace {

// The parameters of one param group that have a gradient, on one device and
// of one dtype, with their gradients: the lists of one set of calls.
struct SgdLists {
  c10::Device device;
  c10::ScalarType dtype;
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> grads;
};

// A group's parameters with a gradient, split by (device, dtype) in the
// order each pair first appears, each list in the group's order.
std::vector<SgdLists> sgd_lists_of(const std::vector<at::Tensor>& params) {
  std::vector<SgdLists> lists;
  for (const auto& p : params) {
    const at::Tensor& grad = p.grad();
    if (!grad.defined()) continue;  // as LibTorch: no gradient, no update
    auto same = [&](const SgdLists& l) {
      return l.device == p.device() && l.dtype == p.scalar_type();
    };
    auto found = std::find_if(lists.begin(), lists.end(), same);
    if (found == lists.end()) {
      lists.push_back(SgdLists{p.device(), p.scalar_type(), {}, {}});
      found = std::prev(lists.end());
    }
    found->params.push_back(p);
    found->grads.push_back(grad);
  }
  return lists;
}

// Note [Steps taken per parameter] (ddp/optim/sgd.hpp): a gradient that is
// not strided, or a parameter twice in one group.
bool needs_per_parameter_step(const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  for (const auto& group : groups) {
    std::unordered_set<const c10::TensorImpl*> seen;
    for (const auto& p : group.params()) {
      if (!seen.insert(p.unsafeGetTensorImpl()).second) return true;
      const at::Tensor& grad = p.grad();
      if (grad.defined() && grad.layout() != c10::kStrided) return true;
    }
  }
  return false;
}

}  // namespace

torch::Tensor SGD::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (needs_per_parameter_step(param_groups_)) {
    torch::optim::SGD::step(nullptr);  // the closure has run
    return loss;
  }
  // Note [Same operations as LibTorch's step] (ddp/optim/sgd.hpp): the
  // calls of torch::optim::SGD::step, in its order, one per list.
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    const double weight_decay = options.weight_decay();
    const double momentum = options.momentum();
    const double dampening = options.dampening();
    const bool nesterov = options.nesterov();
    for (auto& lists : sgd_lists_of(group.params())) {
      std::vector<at::Tensor> d_p = std::move(lists.grads);
      if (weight_decay != 0) {
        d_p = at::_foreach_add(d_p, lists.params, weight_decay);
      }
      if (momentum != 0) {
        // Every parameter's buffer, and apart the ones that existed (and
        // their d_p), which are the ones to decay and add to.
        std::vector<at::Tensor> bufs, kept, kept_d_p;
        bufs.reserve(d_p.size());
        for (size_t i = 0; i < d_p.size(); ++i) {
          const auto key = base::compat::optimizer_state_key(lists.params[i]);
          auto param_state = state_.find(key);
          if (param_state == state_.end()) {
            bufs.push_back(torch::clone(d_p[i]).detach());
            auto state = std::make_unique<torch::optim::SGDParamState>();
            state->momentum_buffer(bufs.back());
            state_[key] = std::move(state);
          } else {
            bufs.push_back(
                static_cast<torch::optim::SGDParamState&>(*param_state->second).momentum_buffer());
            kept.push_back(bufs.back());
            kept_d_p.push_back(d_p[i]);
          }
        }
        if (!kept.empty()) {  // the foreach operators refuse empty lists
          at::_foreach_mul_(kept, at::Scalar(momentum));
          at::_foreach_add_(kept, kept_d_p, 1 - dampening);
        }
        if (nesterov) {
          d_p = at::_foreach_add(d_p, bufs, momentum);
        } else {
          d_p = std::move(bufs);
        }
      }
      at::_foreach_add_(lists.params, d_p, -1 * options.lr());
    }
  }
  return loss;
}

}  // namespace ddp::optim
