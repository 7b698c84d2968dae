#include "parallel/fully_sharded/sharded_placeholder.hpp"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::parallel::detail {
namespace {

constexpr c10::DeviceType kPlaceholderDevice = c10::DeviceType::PrivateUse1;

// Note [A placeholder names itself]
// What a placeholder stands for lives in its storage: the DataPtr of its
// zero bytes has no data but a context, the Placeholder below, freed with
// the storage. A table from storages to names (as before) outlived them:
// once a placeholder's storage was freed, the next storage allocated at its
// address, any tensor's, was named as that parameter, so an operation's
// message named parameters it never read, differently from run to run. A
// tensor is a placeholder only if its storage's DataPtr has this file's
// deleter.
struct Placeholder {
  std::string description;
  std::atomic<PlaceholderOf> of;
};

void delete_placeholder(void* context) { delete static_cast<Placeholder*>(context); }

Placeholder* placeholder_in(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage() || tensor.device().type() != kPlaceholderDevice) {
    return nullptr;
  }
  const c10::DataPtr& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &delete_placeholder) return nullptr;
  return static_cast<Placeholder*>(data.get_context());
}

// What to do, for what the placeholder stands for.
std::string advice(PlaceholderOf of) {
  switch (of) {
    case PlaceholderOf::kShardedUnit:
      return " while the unit was sharded (between steps, and within a step outside the unit's "
             "forward and backward, each rank holds only its shard of a unit's parameters); read "
             "them with fsdp->full_parameters() or save them with "
             "ddp::snapshot::save_consolidated(), step them through fsdp->parameters(), and run a "
             "unit only as ddp::sharded_call(block, x) inside the wrapper's forward (Note "
             "[Parameters between steps]).";
    case PlaceholderOf::kBuiltModule:
      return ", which ddp::shard_as_built sharded and no FullyShardedDataParallel has wrapped yet "
             "(each rank holds only its shard); wrap the model while the "
             "ddp::ShardedConstruction is alive, then read it through the wrapper.";
    case PlaceholderOf::kEndedConstruction:
      break;
  }
  return ", which ddp::shard_as_built sharded under a ddp::ShardedConstruction that ended "
         "before any FullyShardedDataParallel wrapped the model: each rank's shard went with the "
         "construction, so its values are gone. Build the model again and wrap it while the "
         "ddp::ShardedConstruction is alive.";
}

// Note [Parameters between steps]: every operator on a placeholder ends here.
// It names the placeholders among the operator's arguments, in their order.
void refuse_placeholder(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string names;
  std::optional<PlaceholderOf> of;
  const size_t arguments = op.schema().arguments().size();
  for (const c10::IValue& value : torch::jit::last(*stack, arguments)) {
    std::vector<at::Tensor> tensors;
    if (value.isTensor()) tensors.push_back(value.toTensor());
    if (value.isTensorList()) tensors = value.toTensorVector();
    for (const auto& t : tensors) {
      const Placeholder* placeholder = placeholder_in(t);
      if (!placeholder) continue;
      names += (names.empty() ? "parameter " : ", ") + placeholder->description;
      if (!of) of = placeholder->of.load();
    }
  }
  if (names.empty()) names = "a parameter of a unit (which one, the operation does not say)";
  throw ConfigError(base::detail::str("FullyShardedDataParallel: ", op.schema().name(), " read ",
                                      names, advice(of.value_or(PlaceholderOf::kShardedUnit))));
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

at::Tensor make_placeholder(const at::Tensor& parameter, std::string description,
                            PlaceholderOf of) {
  auto* placeholder = new Placeholder{std::move(description), {of}};
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0,
      c10::DataPtr(nullptr, placeholder, &delete_placeholder, c10::Device(kPlaceholderDevice, 0)),
      nullptr, /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), parameter.dtype());
  impl->set_sizes_contiguous(parameter.sizes());
  return at::Tensor(std::move(impl));
}

std::optional<PlaceholderOf> placeholder_of(const at::Tensor& tensor) {
  const Placeholder* placeholder = placeholder_in(tensor);
  if (!placeholder) return std::nullopt;
  return placeholder->of.load();
}

void mark_placeholder(const at::Tensor& placeholder, PlaceholderOf of) {
  if (Placeholder* p = placeholder_in(placeholder)) p->of = of;
}

void hold(const at::Tensor& parameter, const at::Tensor& source) {
  parameter.unsafeGetTensorImpl()->shallow_copy_from(source.getIntrusivePtr());
}

}  // namespace ddp::parallel::detail
