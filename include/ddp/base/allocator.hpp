#pragma once

/// \file allocator.hpp
/// Which host allocator this process's `malloc` is: the library the symbol
/// resolves to, read from the process itself (dladdr), as blas_in_use()
/// reads the BLAS.
///
/// \code
///   const ddp::HostAllocator allocator = ddp::allocator_in_use();
///   std::cout << allocator.summary() << "\n";  // allocator: tcmalloc (gperftools 2.10) ...
/// \endcode
///
/// Note [The host allocator]
/// LibTorch's CPU tensors come from `malloc` (c10::alloc_cpu), and glibc's
/// malloc maps every block above its mmap threshold afresh and unmaps it on
/// free. The threshold follows the largest block freed but stops at 32 MiB
/// (glibc refuses a larger one, mallopt included), so a 2048 x 8192 weight's
/// gradient (64 MiB) is a new mapping each step, and each of its pages
/// faults and is cleared by the kernel on first touch: on the transformer of
/// benchmarks/fsdp_transformer_bench.cpp at width 2048, a fifth of the
/// step. tcmalloc (gperftools) keeps freed spans for the next request of
/// their size, as CUDA's caching allocator does on the GPU, and gives them
/// back to the system gradually; PyTorch's CPU launcher
/// (torch.backends.xeon.run_cpu) preloads it or jemalloc for the same
/// reason. ddprun preloads tcmalloc into its workers where it is installed
/// (--allocator, docs/guide/performance.md); allocator_in_use() says what a
/// process actually got: a program started without ddprun, or a static one,
/// keeps glibc's.

/// Note [Freed memory given back]
/// glibc's malloc keeps the blocks a program frees below its mmap threshold
/// in its heap, for the next request, and gives pages back only from the
/// top of the heap. Building a model under ddp::ShardedConstruction
/// allocates each unit whole, copies out this rank's shard and frees the
/// unit, so the shards, allocated just after each unit, sit between its
/// freed pages: a 202 M-parameter transformer of 16 blocks built at 4 ranks
/// kept 311 MB free in the heap, its peak 1.95x the bound fsdp.md states.
/// tcmalloc keeps freed spans too, and gives them back only gradually. So
/// ddp gives freed memory back where it frees a lot at once and will not
/// reuse it soon: after each unit built sharded, and once FSDP has wrapped
/// a model (its whole parameters gone). In a step it does not: the next
/// step reuses the same blocks, and giving them back would fault every
/// page in again (the cost Note [The host allocator] avoids).

#include <string>

namespace ddp::base {

/// What kind of allocator `malloc` resolves to.
enum class AllocatorKind {
  kGlibc,     ///< glibc's own malloc
  kTcmalloc,  ///< gperftools' tcmalloc (tc_version is exported)
  kJemalloc,  ///< jemalloc (mallctl is exported)
  kMimalloc,  ///< mimalloc (mi_version is exported)
  kUnknown,   ///< another library that defines malloc
};

/// The allocator in use and what it says of itself.
struct HostAllocator {
  AllocatorKind kind = AllocatorKind::kUnknown;
  /// The file that defines `malloc`, symbolic links resolved.
  std::string path;
  /// The library's version as it reports it ("2.36", "2.10", "5.3.0-0-g54eaed1d");
  /// "" where it reports none.
  std::string version;

  /// One line for a job's log: "allocator: tcmalloc (gperftools 2.10)
  /// /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10".
  std::string summary() const;
};

/// The allocator that `malloc` resolves to in this process (Note [The host
/// allocator]).
HostAllocator allocator_in_use();

/// Gives the pages of the blocks freed so far back to the system, as far as
/// the allocator in use can (Note [Freed memory given back]): glibc's
/// malloc_trim(0), tcmalloc's MallocExtension_ReleaseFreeMemory, jemalloc's
/// purge of every arena, mimalloc's mi_collect; nothing under another
/// allocator. The host's counterpart of torch.cuda.empty_cache(): what it
/// gives back faults in again when next used.
void release_free_memory();

/// The name of a kind: "glibc malloc", "tcmalloc", "jemalloc", "mimalloc",
/// "unknown allocator".
const char* allocator_kind_name(AllocatorKind kind);

}  // namespace ddp::base

namespace ddp {
using namespace base;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
