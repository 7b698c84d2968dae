// The base layer's internal helpers, which every layer's messages and clean-up
// go through: str() (Note [Messages are built with str()]), ScopeExit and
// dtype_name(), checked against the exact texts they must produce.

#include <gtest/gtest.h>

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "base/dtype_name.hpp"
#include "base/scope_exit.hpp"
#include "base/str.hpp"

namespace ddp::base {
namespace {

TEST(BaseHelpers, StrWritesEachPieceWithItsStreamOperator) {
  EXPECT_EQ(detail::str("rank ", 3, " of ", 8, "."), "rank 3 of 8.");
  // A double as a stream prints it, not std::to_string's six decimals.
  EXPECT_EQ(detail::str("lr ", 0.5, ", eps ", 1e-8), "lr 0.5, eps 1e-08");
  EXPECT_EQ(detail::str(std::string("a"), 'b', int64_t{-7}, true), "ab-71");
  EXPECT_EQ(detail::str(), "");
}

TEST(BaseHelpers, ScopeExitRunsWhenItsScopeEndsByAThrow) {
  int runs = 0;
  try {
    detail::ScopeExit reset([&] { ++runs; });
    throw std::runtime_error("a step that fails");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(runs, 1);
  {
    detail::ScopeExit reset([&] { ++runs; });
    EXPECT_EQ(runs, 1);  // not before the scope ends
  }
  EXPECT_EQ(runs, 2);
}

TEST(BaseHelpers, DtypeNamesAreTheOnesPyTorchUsersWrite) {
  EXPECT_EQ(detail::dtype_name(c10::ScalarType::Float), "float32");
  EXPECT_EQ(detail::dtype_name(c10::ScalarType::BFloat16), "bfloat16");
  EXPECT_EQ(detail::dtype_name(c10::ScalarType::Half), "float16");
  EXPECT_EQ(detail::dtype_name(c10::ScalarType::Long), "int64");
  EXPECT_EQ(detail::dtype_name(c10::ScalarType::Byte), "uint8");
  EXPECT_EQ(detail::dtype_name(c10::ScalarType::ComplexFloat), "ComplexFloat");
}

}  // namespace
}  // namespace ddp::base
