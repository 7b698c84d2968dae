#pragma once

/// \file blas.hpp
/// Which BLAS LibTorch's matrix products run on in this process: the library
/// that `sgemm_` resolves to, read from the process itself (dladdr), not
/// guessed from the installed packages.
///
/// \code
///   const ddp::BlasLibrary blas = ddp::blas_in_use();
///   std::cout << blas.summary() << "\n";  // OpenBLAS 0.3.21 (openmp, Haswell, ...) ...
///   if (blas.kind == ddp::BlasKind::kReference) std::cerr << blas.warning() << "\n";
/// \endcode
///
/// Note [The BLAS in use]
/// Debian's LibTorch (1.13 on Debian 12, 2.6 on Debian 13) is built with
/// BLAS_INFO=generic: it calls sgemm_ from whatever libblas.so.3 the
/// dynamic linker finds. Debian's alternatives point that at netlib's
/// reference implementation (/usr/lib/<triplet>/blas/) unless an optimized
/// BLAS is installed, and the reference runs a matrix product about 19
/// times slower than OpenBLAS on a current core. The package list says what
/// could be loaded; only the process knows what was: LD_LIBRARY_PATH,
/// LD_PRELOAD and the alternatives all change it. So blas_in_use() asks
/// the dynamic linker where `sgemm_` lives, and then the library itself
/// what it is (openblas_get_config, bli_info_get_version_str,
/// MKL_Get_Version_String). A LibTorch that links its BLAS statically (the
/// pip wheels' MKL) exports no `sgemm_`: the kind is then kNotShared, and
/// at::show_config() is the place to read it.

#include <string>

namespace ddp::base {

/// What kind of BLAS `sgemm_` resolves to.
enum class BlasKind {
  kOpenBlas,   ///< OpenBLAS (openblas_get_config is exported)
  kBlis,       ///< BLIS (bli_info_get_version_str)
  kMkl,        ///< Intel oneMKL (MKL_Get_Version_String)
  kReference,  ///< netlib's reference BLAS: a libblas.so with none of the above
  kUnknown,    ///< a shared library that exports sgemm_, none of the above
  kNotShared,  ///< no shared library in the process exports sgemm_
};

/// The BLAS in use and what it says of itself.
struct BlasLibrary {
  BlasKind kind = BlasKind::kNotShared;
  /// The library's file, symbolic links resolved ("" for kNotShared).
  std::string path;
  /// The library's own description, e.g. OpenBLAS's configuration
  /// "OpenBLAS 0.3.21 NO_AFFINITY USE_OPENMP Haswell MAX_THREADS=64".
  std::string config;
  /// OpenBLAS's threading: "sequential", "pthread" or "openmp" ("" otherwise).
  std::string threading;
  /// OpenBLAS's kernel for this processor, e.g. "Haswell" ("" otherwise).
  std::string core;
  /// The threads the library would use for one call now (0: not known).
  int threads = 0;

  /// One line for a job's log: "BLAS: OpenBLAS 0.3.21 (openmp, Haswell
  /// kernels, 1 thread) /usr/lib/.../libopenblasp-r0.3.21.so".
  std::string summary() const;
  /// The one-line warning for the reference BLAS, naming the fix; "" for
  /// any other kind.
  std::string warning() const;
};

/// The BLAS that `sgemm_` resolves to in this process (Note [The BLAS in use]).
BlasLibrary blas_in_use();

/// The name of a kind: "OpenBLAS", "BLIS", "MKL", "reference BLAS",
/// "unknown BLAS", "no shared BLAS".
const char* blas_kind_name(BlasKind kind);

/// Prints blas_in_use().summary() (and its warning, if any) to stderr once
/// per job: a process that finds kBlasReportedVariable set prints nothing,
/// and the first one sets it, so that a launcher that reports the BLAS
/// keeps the workers it starts from repeating it. Returns whether it printed.
/// `prefix` begins each line ("ddprun: ").
bool report_blas_once(const std::string& prefix);

/// Set in the environment by report_blas_once() once the job's BLAS is reported.
inline constexpr const char* kBlasReportedVariable = "DDP_BLAS_REPORTED";

}  // namespace ddp::base

namespace ddp {
using namespace base;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
