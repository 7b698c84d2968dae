#include "ddp/nn/checkpoint.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/parallel/fully_sharded_units.hpp"

namespace ddp::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kWho = "ddp::nn::checkpoint";

// The generators' states, taken where a forward starts.
struct GeneratorStates {
  at::Tensor cpu;
  std::vector<std::pair<c10::Device, at::Tensor>> devices;
};

at::Tensor state_of(const at::Generator& generator) {
  at::Generator handle = generator;  // a handle to the same generator
  std::lock_guard<std::mutex> lock(handle.mutex());
  return handle.get_state();
}

void restore(const at::Generator& generator, const at::Tensor& state) {
  at::Generator handle = generator;
  std::lock_guard<std::mutex> lock(handle.mutex());
  handle.set_state(state);
}

// Whether `tensors` holds `tensor` itself (not an equal one).
bool holds(const std::vector<at::Tensor>& tensors, const at::Tensor& tensor) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const at::Tensor& t) { return t.is_same(tensor); });
}

// The states of the CPU generator and of `devices`' default generators.
GeneratorStates take_states(const std::vector<c10::Device>& devices) {
  GeneratorStates states;
  states.cpu = state_of(at::globalContext().defaultGenerator(c10::DeviceType::CPU));
  for (const auto& device : devices) {
    states.devices.emplace_back(device, state_of(at::globalContext().defaultGenerator(device)));
  }
  return states;
}

// The CUDA devices `inputs` are on, each once.
std::vector<c10::Device> cuda_devices(const std::vector<at::Tensor>& inputs) {
  std::vector<c10::Device> devices;
  for (const auto& input : inputs) {
    if (input.defined() && input.is_cuda() &&
        std::find(devices.begin(), devices.end(), input.device()) == devices.end()) {
      devices.push_back(input.device());
    }
  }
  return devices;
}

void put_states(const GeneratorStates& states) {
  restore(at::globalContext().defaultGenerator(c10::DeviceType::CPU), states.cpu);
  for (const auto& [device, state] : states.devices) {
    restore(at::globalContext().defaultGenerator(device), state);
  }
}

// Sets the generators to `saved` for a scope, then back to what they were,
// so that a recompute leaves the program's random stream as it found it.
class GeneratorsAt {
 public:
  explicit GeneratorsAt(const GeneratorStates& saved) : now_(take_states(devices_of(saved))) {
    put_states(saved);
  }
  ~GeneratorsAt() { put_states(now_); }
  GeneratorsAt(const GeneratorsAt&) = delete;
  GeneratorsAt& operator=(const GeneratorsAt&) = delete;

 private:
  static std::vector<c10::Device> devices_of(const GeneratorStates& states) {
    std::vector<c10::Device> devices;
    for (const auto& [device, state] : states.devices) devices.push_back(device);
    return devices;
  }
  GeneratorStates now_;
};

// Puts `buffers` back as they were when a scope ends: what a recompute
// updates (BatchNorm's running statistics) is updated once, in the forward.
class BuffersKept {
 public:
  explicit BuffersKept(const std::vector<at::Tensor>& buffers) : buffers_(buffers) {
    torch::NoGradGuard no_grad;
    for (const auto& b : buffers_) values_.push_back(b.defined() ? b.clone() : b);
  }
  ~BuffersKept() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < buffers_.size(); ++i) {
      // Through .data(): the version stays, which the recomputed graph
      // checks (BatchNorm saves its running statistics).
      if (values_[i].defined()) buffers_[i].data().copy_(values_[i]);
    }
  }
  BuffersKept(const BuffersKept&) = delete;
  BuffersKept& operator=(const BuffersKept&) = delete;

 private:
  const std::vector<at::Tensor>& buffers_;
  std::vector<at::Tensor> values_;
};

// What the backward needs besides the saved inputs.
struct CheckpointState : torch::CustomClassHolder {
  CheckpointedFunction function;
  std::vector<bool> input_requires_grad;
  std::vector<at::Tensor> parameters;  // the leaves themselves, not activations
  std::vector<at::Tensor> buffers;     // put back after the recompute
  GeneratorStates generators;
  // The sharded forward the function ran in, for its recompute (Note
  // [Checkpointed units]); null when none.
  std::shared_ptr<const parallel::detail::ShardedForwardRef> sharded;
};

std::vector<at::Tensor> run_checked(const CheckpointedFunction& function,
                                    const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> outputs = function(inputs);
  if (outputs.empty()) {
    throw ConfigError(base::detail::str(
        kWho,
        ": the function returned no tensor; return the tensors the rest of the forward "
        "reads."));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined()) {
      throw ConfigError(base::detail::str(kWho, ": output ", i,
                                          " of the function is an undefined tensor; return "
                                          "only defined tensors."));
    }
  }
  return outputs;
}

class CheckpointNode : public torch::autograd::Function<CheckpointNode> {
 public:
  // `tensors`: the inputs, then the parameters (so that the node has an
  // edge to each parameter's gradient accumulator).
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors,
                               const c10::intrusive_ptr<CheckpointState>& state) {
    const size_t count = state->input_requires_grad.size();
    const std::vector<at::Tensor> inputs(tensors.begin(), tensors.begin() + count);
    std::vector<at::Tensor> outputs;
    {
      parallel::detail::CheckpointedRun run;
      state->sharded = run.sharded_forward();
      outputs = run_checked(state->function, inputs);
    }
    variable_list not_differentiable;
    for (const auto& output : outputs) {
      if (!output.is_floating_point() && !output.is_complex()) not_differentiable.push_back(output);
    }
    ctx->mark_non_differentiable(not_differentiable);
    ctx->save_for_backward(inputs);
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto state =
        c10::static_intrusive_pointer_cast<CheckpointState>(ctx->saved_data["state"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    // Under create_graph (a gradient penalty) the recompute hangs off the
    // inputs themselves, so that the gradients it gives are functions of
    // them that a second backward follows into the outer graph; otherwise
    // off detached copies, leaves of a graph of its own.
    const bool create_graph = torch::GradMode::is_enabled();
    std::vector<at::Tensor> inputs;
    for (size_t i = 0; i < saved.size(); ++i) {
      const bool wants = state->input_requires_grad[i];
      if (!saved[i].defined() || (create_graph && wants)) {
        inputs.push_back(saved[i]);
      } else {
        inputs.push_back(saved[i].detach().requires_grad_(wants));
      }
    }
    std::vector<at::Tensor> outputs;
    {
      GeneratorsAt generators(state->generators);
      BuffersKept buffers(state->buffers);
      parallel::detail::CheckpointedRun run(state->sharded);
      torch::AutoGradMode grad_mode(true);
      outputs = run_checked(state->function, inputs);
    }
    variable_list roots, root_grads;
    for (size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grad_outputs[i]);
      }
    }
    variable_list wrt;
    std::vector<size_t> slots;  // where each of wrt's gradients goes
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (state->input_requires_grad[i]) {
        wrt.push_back(inputs[i]);
        slots.push_back(i);
      }
    }
    for (size_t p = 0; p < state->parameters.size(); ++p) {
      wrt.push_back(state->parameters[p]);
      slots.push_back(inputs.size() + p);
    }
    // One per argument of forward(): the tensors, and none for the state.
    variable_list grads(inputs.size() + state->parameters.size() + 1);
    if (roots.empty() || wrt.empty()) return grads;
    const variable_list found = torch::autograd::grad(roots, wrt, root_grads, create_graph,
                                                      create_graph, /*allow_unused=*/true);
    for (size_t k = 0; k < found.size(); ++k) grads[slots[k]] = found[k];
    return grads;
  }
};

}  // namespace

std::vector<at::Tensor> trainable_parameters(const torch::nn::Module& module) {
  std::vector<at::Tensor> result;
  for (const auto& p : module.parameters()) {
    if (!p.requires_grad()) continue;
    if (!holds(result, p)) result.push_back(p);
  }
  return result;
}

std::vector<at::Tensor> detail::checkpoint_function(const CheckpointedFunction& function,
                                                    const std::vector<at::Tensor>& inputs,
                                                    const std::vector<at::Tensor>& parameters,
                                                    const std::vector<at::Tensor>& buffers) {
  if (!torch::GradMode::is_enabled()) return run_checked(function, inputs);
  auto state = c10::make_intrusive<CheckpointState>();
  state->function = function;
  bool any = false;
  for (const auto& input : inputs) {
    const bool wants = input.defined() && input.requires_grad();
    state->input_requires_grad.push_back(wants);
    any = any || wants;
  }
  for (size_t p = 0; p < parameters.size(); ++p) {
    if (!parameters[p].defined()) {
      throw ConfigError(base::detail::str(kWho, ": parameter ", p,
                                          " is an undefined tensor; pass the tensors the "
                                          "function reads."));
    }
    if (!parameters[p].requires_grad()) continue;  // frozen: no edge, no gradient
    // Each tensor once: a second edge to its accumulator would add its
    // gradient twice (a tied weight listed under two names, an input).
    if (holds(inputs, parameters[p]) || holds(state->parameters, parameters[p])) continue;
    state->parameters.push_back(parameters[p]);
    any = true;
  }
  if (!any) {
    throw ConfigError(base::detail::str(
        kWho, ": neither the ", inputs.size(), " input(s) nor the ", parameters.size(),
        " parameter(s) require grad, so the function's own parameters would get no gradient; "
        "pass the trainable tensors the function reads as `parameters` (checkpoint(module, x) "
        "does), or run it without checkpoint under torch::NoGradGuard."));
  }
  state->buffers = buffers;
  state->generators = take_states(cuda_devices(inputs));
  variable_list tensors = inputs;
  tensors.insert(tensors.end(), state->parameters.begin(), state->parameters.end());
  // As a TensorList: a std::vector argument would not count as tensors.
  return CheckpointNode::apply(at::TensorList(tensors), state);
}

}  // namespace ddp::nn
