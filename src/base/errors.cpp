#include "ddp/base/errors.hpp"

namespace ddp::base {

ExitCode exit_code_for(const std::exception& error) noexcept {
  if (const auto* kind = dynamic_cast<const Error*>(&error)) return kind->exit_code();
  return ExitCode::kFailure;
}

}  // namespace ddp::base
