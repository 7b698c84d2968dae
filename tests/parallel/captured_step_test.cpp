// CapturedStep where it cannot run: without CUDA it refuses at construction
// with a ConfigError that says what is missing and what to do. Its GPU
// behaviour is checked by tests/gpu (GpuCapturedStep).

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>

#include "ddp/base/errors.hpp"
#include "ddp/parallel/captured_step.hpp"

namespace ddp::testing {
namespace {

TEST(CapturedStep, WithoutCudaIsRefusedNamingWhatIsMissing) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "CUDA is available here: tests/gpu covers it";
  int calls = 0;
  try {
    CapturedStep step([&] { ++calls; });
    FAIL() << "constructed without CUDA";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("CapturedStep:"), std::string::npos) << message;
    EXPECT_NE(message.find("CUDA"), std::string::npos) << message;
    EXPECT_NE(message.find("call the step directly"), std::string::npos) << message;
  }
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(capturing_step());
}

}  // namespace
}  // namespace ddp::testing
