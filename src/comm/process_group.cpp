#include "ddp/comm/process_group.hpp"

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <vector>

#include "base/dtype_name.hpp"
#include "base/str.hpp"
#include "comm/collective_observation.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/collective_observer.hpp"

namespace ddp::comm {
namespace {

bool is_supported_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Half:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
      return true;
    default:
      return false;
  }
}

void check_tensor(const char* collective, const char* role, const at::Tensor& tensor) {
  const std::string where = std::string(collective) + ": the " + role + " tensor";
  if (!tensor.defined()) {
    throw InvalidArgumentError(where + " is undefined; pass an allocated tensor.");
  }
  if (tensor.is_sparse() || tensor.layout() != c10::kStrided) {
    throw InvalidArgumentError(base::detail::str(where, " is not dense (layout ", tensor.layout(),
                                                 "); convert it with .to_dense()."));
  }
  if (!tensor.is_contiguous()) {
    throw InvalidArgumentError(base::detail::str(
        where, " is not contiguous (sizes ", tensor.sizes(), ", strides ", tensor.strides(),
        "); pass tensor.contiguous() and copy the result back."));
  }
  if (!is_supported_dtype(tensor.scalar_type())) {
    throw InvalidArgumentError(where + " has dtype " +
                               base::detail::dtype_name(tensor.scalar_type()) +
                               ", which ddp's collectives do not carry; use float32, float64, "
                               "bfloat16, float16, int32 or int64 (tensor.to(...)).");
  }
}

void check_same_kind(const char* collective, const at::Tensor& output, const at::Tensor& input) {
  if (output.scalar_type() != input.scalar_type() || output.device() != input.device()) {
    throw InvalidArgumentError(
        std::string(collective) + ": output is " + base::detail::dtype_name(output.scalar_type()) +
        " on " + output.device().str() + " but input is " +
        base::detail::dtype_name(input.scalar_type()) + " on " + input.device().str() +
        "; both must have the same dtype and "
        "device.");
  }
}

// Hands a checked collective to the backend: `issue` is its do...() call.
// The observers, when there are any, are told around it (Note [Observing
// collectives]); without them this is the call alone, inlined.
template <typename Issue>
Work issue_observed(const std::vector<std::shared_ptr<CollectiveObserver>>& observers,
                    const char* name, const at::Tensor& tensor, std::optional<ReduceOp> op,
                    int root, Issue issue) {
  if (observers.empty()) return issue();
  return detail::observe_collective(observers, name, tensor, op, root, std::move(issue));
}

}  // namespace

ProcessGroup::ProcessGroup(Topology topology, std::chrono::milliseconds collective_timeout)
    : topology_(std::move(topology)), collective_timeout_(collective_timeout) {}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::add_observer(std::shared_ptr<CollectiveObserver> observer) {
  if (!observer) {
    throw InvalidArgumentError(
        "add_observer: the observer is null; pass a std::shared_ptr to a CollectiveObserver.");
  }
  observers_.push_back(std::move(observer));
}

// Each public method checks its arguments, then issues through
// issue_observed().

Work ProcessGroup::all_reduce_async(const at::Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", "input", tensor);
  return issue_observed(observers_, "all_reduce", tensor, op, -1,
                        [this, &tensor, op] { return do_all_reduce(tensor, op); });
}

void ProcessGroup::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  all_reduce_async(tensor, op).wait();
}

Work ProcessGroup::broadcast_async(const at::Tensor& tensor, int root) {
  check_tensor("broadcast", "input", tensor);
  if (root < 0 || root >= size()) {
    throw InvalidArgumentError(base::detail::str("broadcast: root rank ", root,
                                                 " is outside the group (ranks 0 to ", size() - 1,
                                                 "); pass an existing rank."));
  }
  return issue_observed(observers_, "broadcast", tensor, std::nullopt, root,
                        [this, &tensor, root] { return do_broadcast(tensor, root); });
}

void ProcessGroup::broadcast(const at::Tensor& tensor, int root) {
  broadcast_async(tensor, root).wait();
}

Work ProcessGroup::all_gather_async(const at::Tensor& output, const at::Tensor& input) {
  check_tensor("all_gather", "input", input);
  check_tensor("all_gather", "output", output);
  check_same_kind("all_gather", output, input);
  if (output.numel() != input.numel() * size()) {
    throw InvalidArgumentError(base::detail::str(
        "all_gather: output has ", output.numel(),
        " elements but must hold every rank's input: ", size(), " ranks x ", input.numel(), " = ",
        input.numel() * size(), "; allocate it with size() * input.numel() elements."));
  }
  return issue_observed(observers_, "all_gather", input, std::nullopt, -1,
                        [this, &output, &input] { return do_all_gather(output, input); });
}

void ProcessGroup::all_gather(const at::Tensor& output, const at::Tensor& input) {
  all_gather_async(output, input).wait();
}

Work ProcessGroup::reduce_scatter_async(const at::Tensor& output, const at::Tensor& input,
                                        ReduceOp op) {
  check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  check_same_kind("reduce_scatter", output, input);
  if (input.numel() != output.numel() * size()) {
    throw InvalidArgumentError(
        base::detail::str("reduce_scatter: input has ", input.numel(),
                          " elements but must hold one output-sized chunk per rank: ", size(),
                          " ranks x ", output.numel(), " = ", output.numel() * size(),
                          "; size the input as size() * output.numel()."));
  }
  return issue_observed(observers_, "reduce_scatter", input, op, -1, [this, &output, &input, op] {
    return do_reduce_scatter(output, input, op);
  });
}

void ProcessGroup::reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  reduce_scatter_async(output, input, op).wait();
}

Work ProcessGroup::barrier_async() {
  return issue_observed(observers_, "barrier", at::Tensor(), std::nullopt, -1,
                        [this] { return do_barrier(); });
}

void ProcessGroup::barrier() { barrier_async().wait(); }

}  // namespace ddp::comm
