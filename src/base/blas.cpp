#include "ddp/base/blas.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <iostream>

#include "base/loaded_library.hpp"
#include "base/str.hpp"

namespace ddp::base {
namespace {

using detail::file_name;
using detail::find_symbol;
using detail::str;

void describe_openblas(void* handle, BlasLibrary& blas) {
  blas.kind = BlasKind::kOpenBlas;
  if (auto* config = find_symbol<char*()>(handle, "openblas_get_config")) blas.config = config();
  if (auto* core = find_symbol<char*()>(handle, "openblas_get_corename")) blas.core = core();
  if (auto* parallel = find_symbol<int()>(handle, "openblas_get_parallel")) {
    const int mode = parallel();
    blas.threading = mode == 0 ? "sequential" : mode == 1 ? "pthread" : "openmp";
  }
  if (auto* threads = find_symbol<int()>(handle, "openblas_get_num_threads"))
    blas.threads = threads();
}

}  // namespace

const char* blas_kind_name(BlasKind kind) {
  switch (kind) {
    case BlasKind::kOpenBlas:
      return "OpenBLAS";
    case BlasKind::kBlis:
      return "BLIS";
    case BlasKind::kMkl:
      return "MKL";
    case BlasKind::kReference:
      return "reference BLAS";
    case BlasKind::kUnknown:
      return "unknown BLAS";
    case BlasKind::kNotShared:
      return "no shared BLAS";
  }
  return "unknown BLAS";
}

BlasLibrary blas_in_use() {
  BlasLibrary blas;
  const detail::DefiningLibrary library = detail::library_defining("sgemm_");
  if (library.path.empty()) return blas;
  blas.path = library.path;
  blas.kind = BlasKind::kUnknown;
  void* handle = library.handle.get();
  if (handle == nullptr) return blas;
  if (find_symbol<char*()>(handle, "openblas_get_config") != nullptr) {
    describe_openblas(handle, blas);
  } else if (auto* version = find_symbol<const char*()>(handle, "bli_info_get_version_str")) {
    blas.kind = BlasKind::kBlis;
    blas.config = str("BLIS ", version());
  } else if (auto* version = find_symbol<void(char*, int)>(handle, "MKL_Get_Version_String")) {
    blas.kind = BlasKind::kMkl;
    char text[256] = {};
    version(text, sizeof(text) - 1);
    blas.config = text;
  } else if (file_name(blas.path).rfind("libblas.so", 0) == 0) {
    // netlib's libblas.so.3 names itself nowhere: it is the libblas.so
    // that none of the optimized libraries' own functions come with.
    blas.kind = BlasKind::kReference;
    blas.config = "netlib reference BLAS";
  }
  return blas;
}

std::string BlasLibrary::summary() const {
  if (kind == BlasKind::kNotShared)
    return "BLAS: no shared library in this process exports sgemm_ (LibTorch may link its BLAS "
           "statically: at::show_config() names it)";
  std::string what = kind == BlasKind::kOpenBlas && !config.empty()
                         ? config.substr(0, config.find(' ', config.find(' ') + 1))
                     : config.empty() ? blas_kind_name(kind)
                                      : config;
  std::string details;
  if (!threading.empty()) details = threading;
  if (!core.empty()) details += str(details.empty() ? "" : ", ", core, " kernels");
  if (threading == "openmp")
    details += ", LibTorch's intra-op threads";
  else if (threads > 0)
    details += str(", ", threads, threads == 1 ? " thread" : " threads");
  return str("BLAS: ", what, details.empty() ? "" : str(" (", details, ")"), " ", path);
}

std::string BlasLibrary::warning() const {
  if (kind != BlasKind::kReference) return "";
  return str("warning: LibTorch's matrix products run on the reference BLAS (", path,
             "), about 19x slower than OpenBLAS on a current core; install OpenBLAS "
             "(Debian: apt-get install libopenblas0-openmp) and run again");
}

bool report_blas_once(const std::string& prefix) {
  if (std::getenv(kBlasReportedVariable) != nullptr) return false;
  const BlasLibrary blas = blas_in_use();
  std::cerr << prefix << blas.summary() << "\n";
  if (!blas.warning().empty()) std::cerr << prefix << blas.warning() << "\n";
  std::cerr << std::flush;
  ::setenv(kBlasReportedVariable, "1", 1);
  return true;
}

}  // namespace ddp::base
