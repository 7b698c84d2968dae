#include "comm/shm/tensor_bridge.hpp"

#include "ddp/base/errors.hpp"

namespace ddp::comm::shm {

ElementType element_type_of(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
      return ElementType::kFloat32;
    case c10::ScalarType::Double:
      return ElementType::kFloat64;
    case c10::ScalarType::BFloat16:
      return ElementType::kBFloat16;
    case c10::ScalarType::Half:
      return ElementType::kFloat16;
    case c10::ScalarType::Int:
      return ElementType::kInt32;
    case c10::ScalarType::Long:
      return ElementType::kInt64;
    default:
      break;
  }
  // ProcessGroup validated the dtype before the backend saw it.
  throw InvalidArgumentError(std::string("the shared-memory backend cannot carry dtype ") +
                             c10::toString(dtype) + "; use a dtype ddp supports.");
}

Combine combine_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return Combine::kSum;
    case ReduceOp::kMin:
      return Combine::kMin;
    case ReduceOp::kMax:
      return Combine::kMax;
    case ReduceOp::kProduct:
      return Combine::kProduct;
  }
  return Combine::kSum;
}

HostStaging::HostStaging(const at::Tensor& tensor)
    : original_(tensor), host_(tensor.is_cpu() ? tensor : tensor.to(c10::kCPU)) {}

void HostStaging::copy_back() const {
  if (!original_.is_cpu()) original_.copy_(host_);
}

}  // namespace ddp::comm::shm
