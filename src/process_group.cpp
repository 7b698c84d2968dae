#include "ddp/process_group.hpp"

#include <c10/core/ScalarType.h>

#include <string>

#include "ddp/errors.hpp"
#include "dtype_name.hpp"

namespace ddp {
namespace {

bool isSupportedDtype(c10::ScalarType dtype) {
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

void checkTensor(const char* collective, const char* role, const at::Tensor& tensor) {
  const std::string where = std::string(collective) + ": the " + role + " tensor";
  if (!tensor.defined()) {
    throw InvalidArgumentError(where + " is undefined; pass an allocated tensor.");
  }
  if (tensor.is_sparse() || tensor.layout() != c10::kStrided) {
    throw InvalidArgumentError(where + " is not dense (layout " + c10::str(tensor.layout()) +
                               "); convert it with .to_dense().");
  }
  if (!tensor.is_contiguous()) {
    throw InvalidArgumentError(where + " is not contiguous (sizes " + c10::str(tensor.sizes()) +
                               ", strides " + c10::str(tensor.strides()) +
                               "); pass tensor.contiguous() and copy the result back.");
  }
  if (!isSupportedDtype(tensor.scalar_type())) {
    throw InvalidArgumentError(where + " has dtype " + detail::dtypeName(tensor.scalar_type()) +
                               ", which ddp's collectives do not carry; use float32, float64, "
                               "bfloat16, float16, int32 or int64 (tensor.to(...)).");
  }
}

void checkSameKind(const char* collective, const at::Tensor& output, const at::Tensor& input) {
  if (output.scalar_type() != input.scalar_type() || output.device() != input.device()) {
    throw InvalidArgumentError(std::string(collective) + ": output is " +
                               detail::dtypeName(output.scalar_type()) + " on " +
                               output.device().str() + " but input is " +
                               detail::dtypeName(input.scalar_type()) + " on " +
                               input.device().str() + "; both must have the same dtype and "
                               "device.");
  }
}

}  // namespace

const char* toString(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAverage: return "average";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown";
}

ProcessGroup::ProcessGroup(Topology topology, std::chrono::milliseconds collective_timeout)
    : topology_(std::move(topology)), collective_timeout_(collective_timeout) {}

ProcessGroup::~ProcessGroup() = default;

Work ProcessGroup::allReduceAsync(const at::Tensor& tensor, ReduceOp op) {
  checkTensor("allReduce", "input", tensor);
  return doAllReduce(tensor, op);
}

void ProcessGroup::allReduce(const at::Tensor& tensor, ReduceOp op) {
  allReduceAsync(tensor, op).wait();
}

Work ProcessGroup::broadcastAsync(const at::Tensor& tensor, int root) {
  checkTensor("broadcast", "input", tensor);
  if (root < 0 || root >= size()) {
    throw InvalidArgumentError("broadcast: root rank " + std::to_string(root) +
                               " is outside the group (ranks 0 to " +
                               std::to_string(size() - 1) + "); pass an existing rank.");
  }
  return doBroadcast(tensor, root);
}

void ProcessGroup::broadcast(const at::Tensor& tensor, int root) {
  broadcastAsync(tensor, root).wait();
}

Work ProcessGroup::allGatherAsync(const at::Tensor& output, const at::Tensor& input) {
  checkTensor("allGather", "input", input);
  checkTensor("allGather", "output", output);
  checkSameKind("allGather", output, input);
  if (output.numel() != input.numel() * size()) {
    throw InvalidArgumentError("allGather: output has " + std::to_string(output.numel()) +
                               " elements but must hold every rank's input: " +
                               std::to_string(size()) + " ranks x " +
                               std::to_string(input.numel()) + " = " +
                               std::to_string(input.numel() * size()) +
                               "; allocate it with size() * input.numel() elements.");
  }
  return doAllGather(output, input);
}

void ProcessGroup::allGather(const at::Tensor& output, const at::Tensor& input) {
  allGatherAsync(output, input).wait();
}

Work ProcessGroup::reduceScatterAsync(const at::Tensor& output, const at::Tensor& input,
                                      ReduceOp op) {
  checkTensor("reduceScatter", "input", input);
  checkTensor("reduceScatter", "output", output);
  checkSameKind("reduceScatter", output, input);
  if (input.numel() != output.numel() * size()) {
    throw InvalidArgumentError("reduceScatter: input has " + std::to_string(input.numel()) +
                               " elements but must hold one output-sized chunk per rank: " +
                               std::to_string(size()) + " ranks x " +
                               std::to_string(output.numel()) + " = " +
                               std::to_string(output.numel() * size()) +
                               "; size the input as size() * output.numel().");
  }
  return doReduceScatter(output, input, op);
}

void ProcessGroup::reduceScatter(const at::Tensor& output, const at::Tensor& input,
                                 ReduceOp op) {
  reduceScatterAsync(output, input, op).wait();
}

Work ProcessGroup::barrierAsync() {
  return doBarrier();
}

void ProcessGroup::barrier() { barrierAsync().wait(); }

}  // namespace ddp
