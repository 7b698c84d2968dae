// ddp::base::allocator_in_use() against what the process says independently:
// glibc's own version and the process's map of loaded files, and the same
// test binary started again with tcmalloc (and jemalloc) preloaded, as
// ddprun starts its workers.

#include <gnu/libc-version.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "common/process_maps.hpp"
#include "common/required_suites.hpp"
#include "ddp/base/allocator.hpp"

namespace {

using ddp::base::AllocatorKind;
using ddp::base::HostAllocator;

constexpr const char* kChildVariable = "DDP_ALLOCATOR_TEST_CHILD";
const std::string kLibraries = "/usr/lib/x86_64-linux-gnu";

// This test binary again, with `preload`, printing its allocator's summary.
std::string summary_with(const std::string& preload) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command =
      "LD_PRELOAD=" + preload + " " + kChildVariable + "=1 '" + self + "' 2>&1";
  FILE* child = ::popen(command.c_str(), "r");
  if (child == nullptr) return "popen failed";
  std::string output;
  std::array<char, 512> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), child) != nullptr) output += chunk.data();
  ::pclose(child);
  const auto begin = output.find("allocator: ");
  return begin == std::string::npos ? output
                                    : output.substr(begin, output.find('\n', begin) - begin);
}

// Started by summary_with(): prints the summary and ends before any test runs.
[[maybe_unused]] const bool kChild = [] {
  if (std::getenv(kChildVariable) == nullptr) return false;
  std::cout << ddp::base::allocator_in_use().summary() << std::endl;
  std::_Exit(0);
}();

TEST(BaseAllocator, NamesGlibcAsMappedInThisProcess) {
  if (std::getenv("LD_PRELOAD") != nullptr) GTEST_SKIP() << "LD_PRELOAD may preload another";
  const HostAllocator allocator = ddp::base::allocator_in_use();
  EXPECT_EQ(allocator.kind, AllocatorKind::kGlibc);
  EXPECT_EQ(allocator.version, gnu_get_libc_version());
  EXPECT_TRUE(ddp::testing::mapped_in_this_process(allocator.path))
      << allocator.path << " is not in /proc/self/maps";
  EXPECT_EQ(allocator.summary(),
            "allocator: glibc's malloc (glibc " + allocator.version + ") " + allocator.path);
}

TEST(BaseAllocator, NamesTcmallocAndJemallocWhenPreloaded) {
  const std::string tcmalloc = kLibraries + "/libtcmalloc_minimal.so.4";
  if (!std::filesystem::exists(tcmalloc)) {
    DDP_SKIP_UNLESS_REQUIRED("no " + tcmalloc + " (Debian's libtcmalloc-minimal4, x86-64)");
  }
  const std::string summary = summary_with(tcmalloc);
  EXPECT_EQ(summary.rfind("allocator: tcmalloc (gperftools 2.", 0), 0u) << summary;
  const std::string real = std::filesystem::canonical(tcmalloc).string();
  EXPECT_EQ(summary.substr(summary.size() - real.size() - 2), ") " + real) << summary;
  const std::string jemalloc = kLibraries + "/libjemalloc.so.2";
  if (!std::filesystem::exists(jemalloc))
    DDP_SKIP_UNLESS_REQUIRED("no " + jemalloc + " (Debian's libjemalloc2, x86-64)");
  EXPECT_EQ(summary_with(jemalloc).rfind("allocator: jemalloc (5.", 0), 0u)
      << summary_with(jemalloc);
}

TEST(BaseAllocator, KindsHaveNames) {
  EXPECT_STREQ(ddp::base::allocator_kind_name(AllocatorKind::kTcmalloc), "tcmalloc");
  EXPECT_STREQ(ddp::base::allocator_kind_name(AllocatorKind::kUnknown), "unknown allocator");
  HostAllocator unknown;
  unknown.path = "/opt/lib/libmymalloc.so";
  EXPECT_EQ(unknown.summary(), "allocator: unknown allocator /opt/lib/libmymalloc.so");
}

}  // namespace
