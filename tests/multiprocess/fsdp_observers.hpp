#pragma once

// What the FSDP checks (fsdp_checks.cpp, fsdp_hybrid_checks.cpp) watch: observers of the
// collectives a step issues, and a probe that marks where each unit's
// backward starts.

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/dtype_name.hpp"
#include "comm/collective_name.hpp"
#include "ddp/comm/collective_observer.hpp"

namespace ddp::testing {

// The unit (its index, as text) whose collective of `kind` ("fsdp.gather",
// "fsdp.reduce", "fsdp.replicate": ShardedUnit's names, followed by the
// unit's index) is being issued; none for any other collective.
inline std::optional<std::string> issuing_unit(const std::string& kind) {
  const std::string label = comm::detail::current_collective_name().value_or("");
  if (label.rfind(kind + " ", 0) != 0) return std::nullopt;
  return label.substr(kind.size() + 1);
}

// Whether the collective being issued is one of a unit's `kind`.
inline bool issued_by_unit(const std::string& kind) { return issuing_unit(kind).has_value(); }

// Counts the reduce-scatters issued on the group it observes.
class ReduceScatterCounter : public comm::CollectiveObserver {
 public:
  std::unique_ptr<comm::ObservedCollective> on_started(
      const comm::CollectiveFacts& facts) override {
    if (std::string(facts.name) == "reduce_scatter") ++count;
    return nullptr;
  }
  int count = 0;
};

// The names (timeline::NameScope's, ddp's own) the all-gathers and
// reduce-scatters issued on the group carry.
class CollectiveNames : public comm::CollectiveObserver {
 public:
  std::unique_ptr<comm::ObservedCollective> on_started(
      const comm::CollectiveFacts& facts) override {
    const std::string name = facts.name;
    if (name == "all_gather" || name == "reduce_scatter") {
      seen.insert(name + " " + comm::detail::current_collective_name().value_or("(unnamed)"));
    }
    return nullptr;
  }
  std::set<std::string> seen;
};

// What happened in a backward, in order, on the main thread: "issue <u>"
// and "end <u>" of unit u's reduce-scatter (an observer), "backward <u>" when
// unit u's backward computation starts (a ProbedLinear's probe).
inline std::vector<std::string>* backward_events = nullptr;

class ReductionEvents : public comm::CollectiveObserver {
 public:
  std::unique_ptr<comm::ObservedCollective> on_started(
      const comm::CollectiveFacts& facts) override {
    const std::optional<std::string> unit = issuing_unit("fsdp.reduce");
    if (std::string(facts.name) != "reduce_scatter" || !unit || backward_events == nullptr) {
      return nullptr;
    }
    backward_events->push_back("issue " + *unit);
    return std::make_unique<Ended>(*unit);
  }

 private:
  struct Ended : comm::ObservedCollective {
    explicit Ended(std::string unit) : unit(std::move(unit)) {}
    void on_finished(const comm::CollectiveFacts&,
                     const comm::CollectiveOutcome&) noexcept override {
      if (backward_events) backward_events->push_back("end " + unit);
    }
    std::string unit;
  };
};

// The identity, whose backward notes that unit `unit`'s backward starts.
struct BackwardProbe : torch::autograd::Function<BackwardProbe> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               int64_t unit) {
    ctx->saved_data["unit"] = unit;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (backward_events) {
      backward_events->push_back("backward " + std::to_string(ctx->saved_data["unit"].toInt()));
    }
    return {grads[0], torch::Tensor()};
  }
};

struct ProbedLinearImpl : torch::nn::Module {
  ProbedLinearImpl(int64_t in, int64_t out, int64_t unit)
      : linear(register_module("linear", torch::nn::Linear(in, out))), unit(unit) {}
  torch::Tensor forward(const torch::Tensor& x) { return BackwardProbe::apply(linear(x), unit); }
  torch::nn::Linear linear;
  int64_t unit;
};
TORCH_MODULE(ProbedLinear);

// The dtypes of the all-gathers and reduce-scatters issued on the group.
class CollectiveDtypes : public comm::CollectiveObserver {
 public:
  std::unique_ptr<comm::ObservedCollective> on_started(
      const comm::CollectiveFacts& facts) override {
    const std::string name = facts.name;
    if ((name == "all_gather" || name == "reduce_scatter") && facts.dtype) {
      seen.insert(name + " " + base::detail::dtype_name(*facts.dtype));
    }
    return nullptr;
  }
  std::set<std::string> seen;
};

// Counts the units' all-gathers issued on the group it observes, apart for
// the forward and the backward (`in_backward`, set by the check).
class UnitGathers : public comm::CollectiveObserver {
 public:
  std::unique_ptr<comm::ObservedCollective> on_started(
      const comm::CollectiveFacts& facts) override {
    if (std::string(facts.name) == "all_gather" && issued_by_unit("fsdp.gather"))
      ++(*in_backward ? backward : forward);
    return nullptr;
  }
  explicit UnitGathers(const bool* in_backward) : in_backward(in_backward) {}
  const bool* in_backward;
  int forward = 0;
  int backward = 0;
};

// Counts the units' reduce-scatters issued while an all-reduce across the
// replicas was on its way (Note [Hybrid sharding]), on the groups it
// observes (the row's and the column's; one thread issues and waits).
class ReplicationsInFlight : public comm::CollectiveObserver {
 public:
  std::unique_ptr<comm::ObservedCollective> on_started(
      const comm::CollectiveFacts& /*facts*/) override {
    if (issued_by_unit("fsdp.reduce") && running > 0) ++overlapped;
    if (!issued_by_unit("fsdp.replicate")) return nullptr;
    ++replications;
    ++running;
    return std::make_unique<Ended>(running);
  }
  int replications = 0;
  int running = 0;
  int overlapped = 0;

 private:
  struct Ended : comm::ObservedCollective {
    explicit Ended(int& running) : running(running) {}
    void on_finished(const comm::CollectiveFacts& /*facts*/,
                     const comm::CollectiveOutcome& /*outcome*/) noexcept override {
      --running;
    }
    int& running;
  };
};

}  // namespace ddp::testing
