#pragma once

// Error capture for tests: the message of the exception a call must throw.
// When the call throws nothing, or something else, the test fails at the
// line that called error_of(), naming what was expected and what came.
//
//   EXPECT_NE(error_of<ConfigError>([&] { make(options); }).find("eps"), std::string::npos);

#include <cxxabi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>

namespace ddp::testing {

/// The type's name as written in C++ ("ddp::ConfigError").
inline std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : type.name();
}

/// What the exception being handled is, for a failure message: its type and
/// what(), or that it is no std::exception. Call only inside a catch block.
inline std::string describe_current_exception() {
  try {
    throw;
  } catch (const std::exception& e) {
    return type_name(typeid(e)) + ": " + e.what();
  } catch (...) {
    return "an exception that is no std::exception";
  }
}

/// The message (what()) of the E that `call()` throws. When it throws
/// nothing, or an exception that is not an E, the test fails (non-fatally)
/// at the line that called error_of(), and "" is returned, which holds none
/// of the text a test looks for. `file` and `line` are the caller's; leave
/// them out.
template <typename E, typename Call>
std::string error_of(Call&& call, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  try {
    std::forward<Call>(call)();
  } catch (const E& e) {
    return e.what();
  } catch (...) {
    ADD_FAILURE_AT(file, line) << "expected " << type_name(typeid(E)) << " to be thrown, got "
                               << describe_current_exception();
    return "";
  }
  ADD_FAILURE_AT(file, line) << "expected " << type_name(typeid(E))
                             << " to be thrown, nothing was thrown";
  return "";
}

}  // namespace ddp::testing
