#pragma once

// Internal: how a training state lies in a Distributed Checkpoint
// (ddp/snapshot/distributed_checkpoint.hpp), for saving and loading.
//
// Note [A training state in DCP]
// The keys are those torch.distributed.checkpoint.state_dict's
// get_state_dict() gives a model and its optimizer, under the options'
// model and optimizer keys:
//   <model>.<name>                        each parameter and buffer
//   <optim>.state.<name>.<field>          exp_avg, momentum_buffer, ...;
//                                         step as a 0-d float32 tensor
//   <optim>.param_groups.<g>.<option>     lr, betas, ... (pickled values)
//   <optim>.param_groups.<g>.params       the group's parameter names
// and `epoch` and `step_in_epoch`. A rank's piece of a parameter (Note [A
// shard's pieces]) is a run of its flattened elements; it is saved as the
// few boxes that tile that run (flat_range_boxes), so no rank gathers
// anything to save and DCP's loader, Python's too, reshards at load time.

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/formats/dcp.hpp"
#include "ddp/parallel/sharded_state.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot::detail {

/// The boxes that tile elements [begin, begin + length) of a row-major
/// tensor of `shape`, in order: at most 2 per dimension, and 1 where the
/// run is whole rows. A 0-d tensor is one box of no dimension.
std::vector<formats::DcpBox> flat_range_boxes(const std::vector<int64_t>& shape, int64_t begin,
                                              int64_t length);

/// `key` split at its dots: its path in the nested state dict, with the
/// parameter's own name (which has dots) kept whole: `prefix` ("model",
/// "app.model") then `rest`.
std::vector<formats::PyRef> dcp_path(const std::string& prefix,
                                     const std::vector<formats::PyRef>& rest);

/// Options PyTorch 2.x's optimizers hold that LibTorch's do not, with the
/// values LibTorch's behaviour has (maximize False, foreach None, ...):
/// saved so that Python's optimizer finds every key it loads.
const std::vector<std::pair<std::string, formats::PyRef>>& pytorch_only_options();

/// This rank's piece of one parameter: local optimizer parameter `index`
/// of param group `group`, or, not `stepped`, a piece no optimizer steps
/// (Note [Pieces outside the optimizer]): its values alone.
struct LocalPiece {
  size_t group = 0, index = 0;
  size_t parameter = 0;  ///< Into ShardedLayout::names.
  int64_t begin = 0, length = 0;
  at::Tensor local;  ///< The piece's tensor (its first `length` elements).
  bool stepped = true;
};

/// The sharded part of a training state as DCP sees it: every parameter's
/// name and shape, and this rank's pieces.
struct ShardedLayout {
  parallel::ShardedState* sharded = nullptr;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<LocalPiece> pieces;
  /// The model's parameters a ZeroRedundancyOptimizer leaves out (frozen
  /// ones), which rank 0 saves whole and every rank loads whole.
  std::vector<std::string> whole;
  /// Whether this rank writes its pieces: not in a row other than the first
  /// of a replicated state (Note [Replicated shards]), which reads them all
  /// the same.
  bool writes_pieces = true;
};

/// \throws SnapshotError for a state without fully_sharded or
///   zero_optimizer, or a ZeRO optimizer without `model` to name its
///   parameters.
ShardedLayout sharded_layout(const TrainingState& state, const char* what);

}  // namespace ddp::snapshot::detail
