#include "parallel/fully_sharded/sharded_placeholder.hpp"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::parallel::detail {
namespace {

constexpr c10::DeviceType kPlaceholderDevice = c10::DeviceType::PrivateUse1;

// Each placeholder's storage, to the parameter it stands for.
std::mutex registry_mutex;
std::unordered_map<const c10::StorageImpl*, std::string>& registry() {
  static auto* names = new std::unordered_map<const c10::StorageImpl*, std::string>();
  return *names;
}

std::string described(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return {};
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto found = registry().find(tensor.storage().unsafeGetStorageImpl());
  return found == registry().end() ? std::string() : found->second;
}

// Note [Parameters between steps]: every operator on a placeholder ends here.
void refuse_placeholder(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string names;
  const size_t arguments = op.schema().arguments().size();
  for (const c10::IValue& value : torch::jit::last(*stack, arguments)) {
    std::vector<at::Tensor> tensors;
    if (value.isTensor()) tensors.push_back(value.toTensor());
    if (value.isTensorList()) tensors = value.toTensorVector();
    for (const auto& t : tensors) {
      const std::string name = described(t);
      if (!name.empty()) names += (names.empty() ? "parameter " : ", ") + name;
    }
  }
  if (names.empty()) names = "a parameter of a unit";
  throw ConfigError(base::detail::str(
      "FullyShardedDataParallel: ", op.schema().name(), " read ", names,
      " while the unit was sharded (between steps, and within a step outside the unit's forward "
      "and backward, each rank holds only its shard of a unit's parameters); read them with "
      "fsdp->full_parameters() or save them with ddp::snapshot::save_consolidated(), step them "
      "through fsdp->parameters(), and run a unit only as ddp::sharded_call(block, x) inside "
      "the wrapper's forward (Note [Parameters between steps])."));
}

// Lets autograd record a placeholder as a leaf (an AccumulateGrad node asks
// its device for a stream) before the operator reaches the fallback.
struct PlaceholderGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kPlaceholderDevice; }
  c10::Device exchangeDevice(c10::Device) const override { return {kPlaceholderDevice, 0}; }
  c10::Device getDevice() const override { return {kPlaceholderDevice, 0}; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override { return stream; }
  c10::DeviceIndex deviceCount() const noexcept override { return 0; }
};

bool install() {
  if (c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(
          c10::DispatchKey::PrivateUse1) ||
      c10::impl::hasDeviceGuardImpl(kPlaceholderDevice)) {
    return false;  // an out-of-tree backend holds PrivateUse1
  }
  static PlaceholderGuard guard;
  static c10::impl::DeviceGuardImplRegistrar guard_registrar(kPlaceholderDevice, &guard);
  static torch::Library library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__,
                                __LINE__);
  library.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_placeholder>());
  // An ATen operator's own kernels come before a fallback: its autograd
  // kernel (which would record the placeholder), a composite that every
  // backend shares (which would run on it: `a + placeholder` then fails
  // on the devices, unnamed). So every ATen operator refuses at both keys,
  // before anything runs; about 3,000 registrations, some 15 ms, once.
  static torch::Library aten(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                             __LINE__);
  static torch::Library aten_autograd(torch::Library::IMPL, "aten",
                                      c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  for (const c10::OperatorName& op : c10::Dispatcher::singleton().getAllOpNames()) {
    if (op.name.rfind("aten::", 0) != 0) continue;
    std::string name = op.name.substr(6);
    if (!op.overload_name.empty()) name += "." + op.overload_name;
    aten.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&refuse_placeholder>());
    aten_autograd.impl(name.c_str(),
                       torch::CppFunction::makeFromBoxedFunction<&refuse_placeholder>());
  }
  return true;
}

}  // namespace

bool placeholders_available() {
  static const bool available = install();
  return available;
}

at::Tensor make_placeholder(const at::Tensor& parameter, const std::string& description) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       c10::DataPtr(nullptr, c10::Device(kPlaceholderDevice, 0)), nullptr,
                       /*resizable=*/false);
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry()[storage.unsafeGetStorageImpl()] = description;
  }
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), parameter.dtype());
  impl->set_sizes_contiguous(parameter.sizes());
  return at::Tensor(std::move(impl));
}

void forget_placeholder(const at::Tensor& placeholder) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().erase(placeholder.storage().unsafeGetStorageImpl());
}

void hold(const at::Tensor& parameter, const at::Tensor& source) {
  parameter.unsafeGetTensorImpl()->shallow_copy_from(source.getIntrusivePtr());
}

}  // namespace ddp::parallel::detail
