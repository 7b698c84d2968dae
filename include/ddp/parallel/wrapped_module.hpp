#pragma once

/// \file wrapped_module.hpp
/// The module a ddp wrapper holds: any torch::nn module with a forward(),
/// including a torch::nn::Sequential, called with any arguments and
/// returning any type the caller names.

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/any_value.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace ddp::parallel {

// Note [Wrapping any module]
// LibTorch erases a module's type with torch::nn::AnyModule, which takes a
// module with exactly one non-templated forward(). Sequential's forward is
// a template (the caller names its return type), so AnyModule refuses it
// at compile time, yet Sequential is how LibTorch's examples build models.
// WrappedModule keeps either: an AnyModule, or the Sequential itself, whose
// entries are AnyModules called in turn, as Sequential::forward does. Both
// paths yield an AnyValue, and the wrapper's forward<Output>() takes the
// caller's type out of it, with a named error when the module returned
// another. The parameters are the given module's own: nothing is copied.

/// Any module with a forward(): a holder (`Net()`, `torch::nn::Sequential(...)`),
/// a shared_ptr to an Impl, or an AnyModule.
class WrappedModule {
 public:
  /// An AnyModule as it is.
  WrappedModule(torch::nn::AnyModule module);  // NOLINT(google-explicit-constructor)

  /// A module given by its shared_ptr; a Sequential (or a class derived
  /// from SequentialImpl) is run entry by entry.
  template <typename ModuleType>
  WrappedModule(std::shared_ptr<ModuleType> module)  // NOLINT(google-explicit-constructor)
      : module_(module) {
    if constexpr (std::is_base_of_v<torch::nn::SequentialImpl, ModuleType>) {
      sequential_ = std::static_pointer_cast<torch::nn::SequentialImpl>(std::move(module));
    } else {
      any_ = torch::nn::AnyModule(std::move(module));
    }
  }

  /// A module given by its holder, e.g. `Net()` or `torch::nn::Sequential(...)`.
  template <typename Impl>
  WrappedModule(const torch::nn::ModuleHolder<Impl>& holder)  // NOLINT(google-explicit-constructor)
      : WrappedModule(holder.ptr()) {}

  /// The module; null for an empty AnyModule.
  const std::shared_ptr<torch::nn::Module>& ptr() const { return module_; }
  /// The Sequential when the module is one, else null.
  const std::shared_ptr<torch::nn::SequentialImpl>& sequential() const { return sequential_; }
  /// The module as an AnyModule; empty for a Sequential.
  const torch::nn::AnyModule& any_module() const { return any_; }

  /// Runs the module's forward on `arguments`.
  template <typename... Args>
  torch::nn::AnyValue any_forward(Args&&... arguments) {
    if (!sequential_) return any_.any_forward(std::forward<Args>(arguments)...);
    check_not_empty();
    auto entry = sequential_->begin();
    torch::nn::AnyValue value = entry->any_forward(std::forward<Args>(arguments)...);
    for (++entry; entry != sequential_->end(); ++entry)
      value = entry->any_forward(std::move(value));
    return value;
  }

  /// The value of `output` as `Output`.
  /// \throws InvalidArgumentError naming both types when the module
  ///   returned another type; `who` (the wrapper's name) starts it.
  template <typename Output>
  static Output take(torch::nn::AnyValue&& output, const char* who) {
    if (auto* value = output.try_get<Output>()) return std::move(*value);
    throw_other_type(who, output.type_info(), typeid(Output));
  }

 private:
  void check_not_empty() const;
  [[noreturn]] static void throw_other_type(const char* who, const std::type_info& returned,
                                            const std::type_info& asked);

  std::shared_ptr<torch::nn::Module> module_;
  torch::nn::AnyModule any_;
  std::shared_ptr<torch::nn::SequentialImpl> sequential_;
};

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
