// ddp::base::blas_in_use() against what the system says independently: the
// library Debian's alternatives make libblas.so.3, and the process's own
// map of loaded files; and the one line (and warning) a job prints.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common/process_maps.hpp"
#include "ddp/base/blas.hpp"

namespace {

using ddp::base::BlasKind;
using ddp::base::BlasLibrary;

std::string realpath_of(const std::string& path) {
  char real[PATH_MAX];
  return ::realpath(path.c_str(), real) ? std::string(real) : std::string();
}

TEST(BaseBlas, NamesTheLibraryTheAlternativesChoseAsMappedInThisProcess) {
  const std::string chosen = realpath_of("/usr/lib/x86_64-linux-gnu/libblas.so.3");
  if (chosen.empty()) GTEST_SKIP() << "no /usr/lib/x86_64-linux-gnu/libblas.so.3 (Debian, x86-64)";
  if (std::getenv("LD_LIBRARY_PATH") || std::getenv("LD_PRELOAD"))
    GTEST_SKIP() << "LD_LIBRARY_PATH or LD_PRELOAD may put another BLAS in front";
  // LibTorch loads it as a dependency; loaded here too, this test needs no LibTorch.
  ASSERT_NE(::dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL), nullptr) << ::dlerror();
  const BlasLibrary blas = ddp::base::blas_in_use();
  EXPECT_EQ(blas.path, chosen);
  EXPECT_TRUE(ddp::testing::mapped_in_this_process(blas.path))
      << blas.path << " is not in /proc/self/maps";
  if (chosen.find("/openblas") != std::string::npos) {
    EXPECT_EQ(blas.kind, BlasKind::kOpenBlas);
    EXPECT_EQ(blas.config.rfind("OpenBLAS 0.", 0), 0u) << blas.config;
    const std::string flavour = chosen.find("openblas-openmp") != std::string::npos    ? "openmp"
                                : chosen.find("openblas-pthread") != std::string::npos ? "pthread"
                                                                                       : "serial";
    if (flavour != "serial") EXPECT_EQ(blas.threading, flavour);
    EXPECT_FALSE(blas.core.empty());
    EXPECT_EQ(blas.warning(), "");
  } else if (chosen.find("/blas/") != std::string::npos) {
    EXPECT_EQ(blas.kind, BlasKind::kReference);
    EXPECT_NE(blas.warning(), "");
  }
}

TEST(BaseBlas, SummaryAndWarningSayWhatAUserNeeds) {
  BlasLibrary openblas;
  openblas.kind = BlasKind::kOpenBlas;
  openblas.path = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3";
  openblas.config = "OpenBLAS 0.3.21 NO_AFFINITY USE_OPENMP Haswell MAX_THREADS=64";
  openblas.threading = "openmp";
  openblas.core = "Haswell";
  openblas.threads = 2;
  EXPECT_EQ(openblas.summary(),
            "BLAS: OpenBLAS 0.3.21 (openmp, Haswell kernels, LibTorch's intra-op threads) "
            "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
  openblas.threading = "pthread";
  EXPECT_EQ(openblas.summary(),
            "BLAS: OpenBLAS 0.3.21 (pthread, Haswell kernels, 2 threads) "
            "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
  EXPECT_EQ(openblas.warning(), "");

  BlasLibrary reference;
  reference.kind = BlasKind::kReference;
  reference.path = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0";
  reference.config = "netlib reference BLAS";
  EXPECT_EQ(reference.summary(),
            "BLAS: netlib reference BLAS /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0");
  EXPECT_EQ(reference.warning(),
            "warning: LibTorch's matrix products run on the reference BLAS "
            "(/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0), about 19x slower than OpenBLAS "
            "on a current core; install OpenBLAS (Debian: apt-get install libopenblas0-openmp) "
            "and run again");

  EXPECT_EQ(
      BlasLibrary().summary().rfind("BLAS: no shared library in this process exports sgemm_", 0),
      0u);
}

TEST(BaseBlas, ReportedOncePerJob) {
  ::unsetenv(ddp::base::kBlasReportedVariable);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(ddp::base::report_blas_once("ddprun: "));
  EXPECT_FALSE(ddp::base::report_blas_once("ddprun: "));  // the variable is set now
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed.rfind("ddprun: BLAS: ", 0), 0u) << printed;
  EXPECT_EQ(printed.find("BLAS: ", 14), std::string::npos) << printed;
  EXPECT_STREQ(std::getenv(ddp::base::kBlasReportedVariable), "1");
}

}  // namespace
