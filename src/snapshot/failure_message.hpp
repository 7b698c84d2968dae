#pragma once

// Internal: the message of a failure caught as an exception_ptr, for the
// other ranks of a save to repeat (comm::detail::first_failure).

#include <exception>
#include <string>

namespace ddp::snapshot::detail {

/// `failure`'s what(), or a sentence saying it is no std::exception.
inline std::string what_failed(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is no std::exception";
  }
}

}  // namespace ddp::snapshot::detail
