// ddp::base::allocator_in_use() against what the process says independently:
// glibc's own version and the process's map of loaded files, and the same
// test binary started again with tcmalloc (and jemalloc) preloaded, as
// ddprun starts its workers.

#include <gnu/libc-version.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/process_maps.hpp"
#include "common/required_suites.hpp"
#include "ddp/base/allocator.hpp"

namespace {

using ddp::base::AllocatorKind;
using ddp::base::HostAllocator;

constexpr const char* kChildVariable = "DDP_ALLOCATOR_TEST_CHILD";
const std::string kLibraries = "/usr/lib/x86_64-linux-gnu";

// This test binary again, with `preload`, printing its allocator's summary.
std::string summary_with(const std::string& preload, const std::string& what = "summary") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command =
      "LD_PRELOAD=" + preload + " " + kChildVariable + "=" + what + " '" + self + "' 2>&1";
  FILE* child = ::popen(command.c_str(), "r");
  if (child == nullptr) return "popen failed";
  std::string output;
  std::array<char, 512> chunk{};
  while (std::fgets(chunk.data(), chunk.size(), child) != nullptr) output += chunk.data();
  ::pclose(child);
  if (what != "summary") return output;
  const auto begin = output.find("allocator: ");
  return begin == std::string::npos ? output
                                    : output.substr(begin, output.find('\n', begin) - begin);
}

// This process's resident bytes.
int64_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// 32 blocks of 1 MiB written and freed, each with a small block allocated
// after it and kept, so that no allocator can give them back from the top
// of its heap: the MiB the frees and release_free_memory() after them gave
// back, as "released N MiB" (jemalloc may give some back as they are freed).
std::string released_after_fragmenting() {
  // glibc: its mmap threshold rises to 4 MiB when that is freed (volatile:
  // an allocation freed unused may be left out by the compiler).
  void* volatile raise = std::malloc(4 << 20);
  std::memset(raise, 1, 4 << 20);
  std::free(raise);
  std::vector<void*> blocks, kept;
  for (int i = 0; i < 32; ++i) {
    blocks.push_back(std::malloc(1 << 20));
    std::memset(blocks.back(), 1, 1 << 20);
    kept.push_back(std::malloc(64));
    std::memset(kept.back(), 1, 64);
  }
  const int64_t before = rss_bytes();
  for (void* block : blocks) std::free(block);
  ddp::base::release_free_memory();
  const int64_t released = before - rss_bytes();
  for (void* block : kept) std::free(block);
  return "released " + std::to_string(released >> 20) + " MiB";
}

// Started by summary_with(): prints the summary (and, with "release", what
// release_free_memory() gave back) and ends before any test runs.
[[maybe_unused]] const bool kChild = [] {
  const char* child = std::getenv(kChildVariable);
  if (child == nullptr) return false;
  std::cout << ddp::base::allocator_in_use().summary() << std::endl;
  if (std::string(child) == "release") std::cout << released_after_fragmenting() << std::endl;
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

// Note [Freed memory given back]: what each allocator kept of 32 MiB freed
// between blocks still in use, it gives back.
TEST(BaseAllocator, ReleaseFreeMemoryGivesFreedPagesBack) {
  const std::string glibc = summary_with("", "release");
  EXPECT_NE(glibc.find("allocator: glibc's malloc"), std::string::npos) << glibc;
  std::vector<std::string> outputs{glibc};
  for (const std::string library : {"libtcmalloc_minimal.so.4", "libjemalloc.so.2"}) {
    if (!std::filesystem::exists(kLibraries + "/" + library)) {
      DDP_SKIP_UNLESS_REQUIRED("no " + kLibraries + "/" + library);
    }
    outputs.push_back(summary_with(kLibraries + "/" + library, "release"));
  }
  for (const std::string& output : outputs) {
    const auto at = output.find("released ");
    ASSERT_NE(at, std::string::npos) << output;
    EXPECT_GE(std::stoll(output.substr(at + 9)), 28) << output;
  }
}

TEST(BaseAllocator, KindsHaveNames) {
  EXPECT_STREQ(ddp::base::allocator_kind_name(AllocatorKind::kTcmalloc), "tcmalloc");
  EXPECT_STREQ(ddp::base::allocator_kind_name(AllocatorKind::kUnknown), "unknown allocator");
  HostAllocator unknown;
  unknown.path = "/opt/lib/libmymalloc.so";
  EXPECT_EQ(unknown.summary(), "allocator: unknown allocator /opt/lib/libmymalloc.so");
}

}  // namespace
