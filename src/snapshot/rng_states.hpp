#pragma once

// Internal: the generators a snapshot saves, and how their states travel.
//
// Note [Resuming at another world size]
// A snapshot holds every rank's generator states, rank for rank. A job
// re-formed with more or fewer ranks cannot take them over: rank 2 of 3 has
// no saved state, and rank 0 of 1 would drop rank 1's stream. So when the
// world size changed, each rank's generators are seeded instead with
// derived_rng_seed(): a hash of rank 0's saved CPU state and the new rank,
// so a given snapshot resumed at a given world size always draws the same
// numbers, and ranks draw different ones. The sampler continues the epoch
// from its global position (DistributedSampler::restore_global()), and
// rank 0 logs what changed.

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::snapshot::detail {

/// The default generators: CPU first ("cpu"), then each CUDA device
/// ("cuda0", ...).
std::vector<std::pair<std::string, at::Generator>> generators();

/// A copy of `generator`'s state.
at::Tensor generator_state(at::Generator& generator);

/// Every rank's generator states, on rank 0 (named rng/rank<r>/<device>);
/// a collective.
std::map<std::string, at::Tensor> gather_rng_states(comm::ProcessGroup& group);

}  // namespace ddp::snapshot::detail
