#include "ddp/parallel/wrapped_module.hpp"

#include <c10/util/Type.h>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::parallel {

WrappedModule::WrappedModule(torch::nn::AnyModule module)
    : module_(module.is_empty() ? nullptr : module.ptr()), any_(std::move(module)) {}

void WrappedModule::check_not_empty() const {
  if (sequential_->is_empty()) {
    throw InvalidArgumentError(
        "the wrapped torch::nn::Sequential has no entries, so it has no forward to run; push_back "
        "the layers before wrapping it.");
  }
}

void WrappedModule::throw_other_type(const char* who, const std::type_info& returned,
                                     const std::type_info& asked) {
  throw InvalidArgumentError(base::detail::str(
      who, ": the wrapped module's forward returned ", c10::demangle(returned.name()),
      ", but forward was called for ", c10::demangle(asked.name()), "; call forward<",
      c10::demangle(returned.name()), ">(...)."));
}

}  // namespace ddp::parallel
