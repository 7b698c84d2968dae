#pragma once

// Internal: what a sharded unit's parameters hold while the unit is
// sharded, so that reading one is a named error (Note [Parameters between
// steps]).

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

namespace ddp::parallel::detail {

// Note [Parameters between steps]
// While a unit is sharded no rank holds its parameters' values, yet the
// module keeps them (its forward and the user's code name them). Given a
// storage of no bytes with their shape kept, as PyTorch's FSDP1 leaves
// them, a kernel that reads one dereferences a null pointer: `.sum()`,
// printing and `torch::save` of the module crashed or wrote empty records.
// So while sharded each parameter takes, by TensorImpl::shallow_copy_from
// (which keeps its autograd metadata, its .grad and its version counter),
// the metadata of a placeholder: the same shape and dtype, no bytes, on
// the PrivateUse1 device and dispatch key. For that key (and its autograd
// key) ddp registers, on first use, a kernel for every ATen operator and a
// boxed fallback for the rest, all of which throw a ConfigError naming the
// parameter (when the operation has it as an argument) and what to use
// instead; and a device guard, so that autograd could record a
// placeholder. Every operator refuses before reading a byte: `.sum()`,
// printing, a unit's forward, `a + p`, and `torch::save` of the module
// (which copies a storage that is not on the CPU to it first). Gathering restores the views of the
// unit's flat buffer the same way. The graph's own views of the parameters (a Linear's transposed
// weight) keep the flat buffer's storage, emptied and refilled in place (Note [A unit's storage]).
// PrivateUse1 is the one device type an extension may take; where another
// library took it first (an out-of-tree backend registered its fallback or
// device guard), placeholders_available() is false and the parameters
// keep the empty storage instead (and the forward's failure is explained
// by FullyShardedDataParallelImpl::explain_forward_failure()). A backend
// loaded after the first FullyShardedDataParallel cannot register its own.

/// Registers the fallback and the device guard on first use; whether
/// placeholders can be used in this process.
bool placeholders_available();

/// What a placeholder stands for, which decides what its refusal advises.
enum class PlaceholderOf {
  kShardedUnit,        ///< a parameter of a unit while the unit is sharded
  kBuiltModule,        ///< of a module shard_as_built sharded, not yet wrapped
  kEndedConstruction,  ///< the same once its ShardedConstruction ended
};

/// A placeholder shaped as `parameter`; an operation that reads it throws
/// a ConfigError that names it as `description` ("'0.weight' of unit
/// '0'") and says what to do for `of` (Note [A placeholder names itself]).
at::Tensor make_placeholder(const at::Tensor& parameter, std::string description, PlaceholderOf of);

/// What `tensor` is a placeholder of; nullopt for any other tensor.
std::optional<PlaceholderOf> placeholder_of(const at::Tensor& tensor);

/// Makes `placeholder` stand for `of` from now on (a construction ended).
void mark_placeholder(const at::Tensor& placeholder, PlaceholderOf of);

/// Gives `parameter` the storage, shape, dtype and device of `source`, in
/// place (its autograd metadata, .grad and version counter are kept).
void hold(const at::Tensor& parameter, const at::Tensor& source);

}  // namespace ddp::parallel::detail
