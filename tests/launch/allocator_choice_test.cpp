// ddprun's --allocator resolved (src/launch/allocator_choice.hpp): each
// choice against the system's real library folder (where Debian's
// libtcmalloc-minimal4 puts tcmalloc) and an empty one, and each misuse a
// named error.

#include "launch/allocator_choice.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/required_suites.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::launch {
namespace {

const std::string kLibraries = "/usr/lib/x86_64-linux-gnu";

std::string message_of(const std::string& choice, const EnvironmentMap& env,
                       const std::vector<std::string>& dirs) {
  try {
    resolve_allocator(choice, env, dirs);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}

TEST(CoreAllocatorChoice, EachChoiceResolves) {
  const std::string tcmalloc = kLibraries + "/libtcmalloc_minimal.so.4";
  if (!std::filesystem::exists(tcmalloc))
    DDP_SKIP_UNLESS_REQUIRED("no " + tcmalloc + " (Debian's libtcmalloc-minimal4, x86-64)");
  const std::string real = std::filesystem::canonical(tcmalloc).string();
  const ddp::testing::TemporaryDirectory empty("allocator-");

  // auto: tcmalloc from the folders, in their order; none there: glibc, warned.
  AllocatorChoice found = resolve_allocator("auto", {}, {empty.string(), kLibraries});
  EXPECT_EQ(found.preload, tcmalloc);
  EXPECT_EQ(found.summary, "allocator: tcmalloc " + real + ", preloaded into the workers");
  EXPECT_EQ(found.warning, "");
  const AllocatorChoice missing = resolve_allocator("auto", {}, {empty.string()});
  EXPECT_EQ(missing.preload, "");
  EXPECT_EQ(missing.summary, "allocator: glibc's malloc (no tcmalloc installed)");
  EXPECT_NE(missing.warning.find("apt-get install libtcmalloc-minimal4"), std::string::npos)
      << missing.warning;
  // auto leaves a user's LD_PRELOAD as it is.
  const AllocatorChoice users =
      resolve_allocator("auto", {{"LD_PRELOAD", "/opt/libmine.so"}}, {kLibraries});
  EXPECT_EQ(users.preload, "");
  EXPECT_EQ(users.summary, "allocator: as LD_PRELOAD=/opt/libmine.so gives it");
  EXPECT_EQ(worker_preload(users, "/opt/libmine.so"), "/opt/libmine.so");

  // tcmalloc asked for: put before a user's preload.
  const AllocatorChoice asked =
      resolve_allocator("tcmalloc", {{"LD_PRELOAD", "/x.so"}}, {kLibraries});
  EXPECT_EQ(worker_preload(asked, "/x.so"), tcmalloc + ":/x.so");
  EXPECT_EQ(worker_preload(asked, ""), tcmalloc);
  // glibc: nothing preloaded.
  const AllocatorChoice glibc = resolve_allocator("glibc", {}, {kLibraries});
  EXPECT_EQ(glibc.preload, "");
  EXPECT_EQ(glibc.summary, "allocator: glibc's malloc (--allocator glibc)");
  // A library's path.
  const AllocatorChoice path = resolve_allocator(tcmalloc, {}, {});
  EXPECT_EQ(path.preload, tcmalloc);
  EXPECT_EQ(path.summary,
            "allocator: libtcmalloc_minimal.so.4 " + real + ", preloaded into the workers");
}

TEST(CoreAllocatorChoice, MisuseIsANamedError) {
  const ddp::testing::TemporaryDirectory empty("allocator-");
  const std::string none = message_of("tcmalloc", {}, {empty.string()});
  EXPECT_NE(none.find("--allocator tcmalloc: neither libtcmalloc_minimal.so.4 nor "
                      "libtcmalloc.so.4 is in " +
                      empty.string()),
            std::string::npos)
      << none;
  EXPECT_NE(none.find("apt-get install libtcmalloc-minimal4"), std::string::npos) << none;
  EXPECT_EQ(message_of("jemalloc", {}, {}),
            "--allocator is 'jemalloc'; give auto, tcmalloc, glibc, or the path of a shared "
            "library that defines malloc (e.g. /usr/lib/x86_64-linux-gnu/libjemalloc.so.2).");
  const std::string gone = empty.string() + "/libgone.so";
  EXPECT_EQ(message_of(gone, {}, {}),
            "--allocator " + gone +
                ": no such file; give the path of a shared library that defines malloc, or "
                "auto, tcmalloc or glibc.");
}

TEST(CoreAllocatorChoice, SearchesTheLibraryPathThenTheCLibrarysFolder) {
  const std::vector<std::string> dirs =
      library_search_dirs({{"LD_LIBRARY_PATH", "/opt/a::/opt/b"}});
  ASSERT_EQ(dirs.size(), 3u);
  EXPECT_EQ(dirs[0], "/opt/a");
  EXPECT_EQ(dirs[1], "/opt/b");
  EXPECT_TRUE(std::filesystem::exists(dirs[2] + "/libc.so.6")) << dirs[2];
}

}  // namespace
}  // namespace ddp::launch
