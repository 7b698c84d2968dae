#include "parallel/fully_sharded/checked_options.hpp"

#include <utility>

#include "base/dtype_name.hpp"
#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/device_mesh.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel::detail {
namespace {

constexpr const char* kFsdp = "FullyShardedDataParallel";

// The options' meshes: over `group`, and reshard_after_forward_mesh only
// where it changes something (Note [Resharding to the node] in
// src/parallel/fully_sharded/sharded_unit.hpp).
void check_meshes(const FullyShardedDataParallelOptions& options,
                  const std::shared_ptr<ProcessGroup>& group) {
  for (const auto& [field, mesh] :
       {std::pair{"device_mesh", options.device_mesh()},
        std::pair{"reshard_after_forward_mesh", options.reshard_after_forward_mesh()}}) {
    if (mesh && mesh->world() != group) {
      throw ConfigError(base::detail::str(
          kFsdp, ": the ", field, "'s world is another process group than the one passed (",
          mesh->world()->size(), " and ", group->size(),
          " ranks); make the mesh from the group the model is wrapped with."));
    }
  }
  if (!options.reshard_after_forward_mesh()) return;
  const char* conflict = options.device_mesh() ? "device_mesh is set (its gathers stay "
                                                 "in the row already)"
                         : !options.reshard_after_forward() ? "reshard_after_forward is false "
                                                              "(nothing is resharded after the "
                                                              "forward)"
                         : options.find_unused_units() ? "find_unused_units is set (units stay "
                                                         "gathered until reduced)"
                                                       : nullptr;
  if (conflict != nullptr) {
    throw ConfigError(base::detail::str(kFsdp, ": reshard_after_forward_mesh (",
                                        options.reshard_after_forward_mesh()->describe(),
                                        ") keeps a row's slice of each "
                                        "unit from its forward to its backward, but ",
                                        conflict, "; leave reshard_after_forward_mesh unset."));
  }
}

}  // namespace

void check_options(const FullyShardedDataParallelOptions& options,
                   const std::shared_ptr<ProcessGroup>& group) {
  if (options.prefetch() < 0) {
    throw ConfigError(base::detail::str(kFsdp, ": prefetch is ", options.prefetch(),
                                        "; it must be 0 (no prefetch) or more units."));
  }
  check_meshes(options, group);
  if (options.param_dtype() && !at::isFloatingType(*options.param_dtype())) {
    throw ConfigError(base::detail::str(
        kFsdp, ": param_dtype is ", base::detail::dtype_name(*options.param_dtype()),
        "; mixed precision gathers the units in a floating-point dtype: use torch::kBFloat16 or "
        "torch::kHalf, or leave it unset."));
  }
}

std::string describe_options(const FullyShardedDataParallelOptions& options) {
  const auto& hpz = options.reshard_after_forward_mesh();
  return base::detail::str(
      "options: reshard_after_forward ", options.reshard_after_forward(), ", prefetch ",
      options.prefetch(), ", overlap_reduction ", options.overlap_reduction(),
      ", find_unused_units ", options.find_unused_units(), ", param_dtype ",
      options.param_dtype() ? base::detail::dtype_name(*options.param_dtype()) : "none",
      ", device_mesh ", options.device_mesh() ? options.device_mesh()->describe() : "none",
      ", reshard_after_forward_mesh ", hpz ? hpz->describe() : "none");
}

}  // namespace ddp::parallel::detail
