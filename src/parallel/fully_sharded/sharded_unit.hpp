#pragma once

// Internal: one unit of FullyShardedDataParallel, its parameters flattened
// into one buffer that each rank holds 1/N of (Note [A unit's storage]).

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/comm/work.hpp"
#include "parallel/fully_sharded/buffer_pool.hpp"

namespace ddp::parallel::detail {

// Note [A unit's storage]
// A unit's parameters (registration order) are laid out back to back in one
// flat buffer of `padded_numel` elements, padded with zeros to a multiple
// of the world size; rank r keeps elements [r * shard, (r + 1) * shard) as
// `shard()`. What the optimizer steps are its pieces (Note [A unit's
// pieces]). The module's own parameter
// tensors stay the module's (its forward uses them), but their data is set
// once to views of one flat "full" tensor whose storage is emptied when the
// unit is resharded and refilled before it runs: the all-gather fills a
// buffer of its own, whose bytes become that storage only once the gather
// is complete, so that nothing reads a gather still on its way (a unit
// called outside sharded_call finds a storage of no bytes, and the forward
// names it; Note [The order the units run in]). Autograd
// saves the parameters (and views of them, such as a Linear's transposed
// weight) by reference to that same storage, so refilling it before the
// unit's backward is enough: PyTorch's FSDP frees and refills in the same
// way (storage resize to 0 and back). Between steps the module's
// parameters themselves hold placeholders (Note [Parameters between steps]).
// The gradients take the same route back into a flat full-gradient buffer
// (Note [A gradient is moved in, not added]); once every trainable
// parameter's gradient has arrived the buffer is reduce-scattered into
// this rank's shard, averaged, and freed.
// With a param_dtype (mixed precision) the full buffer, and so the module's
// parameters and their gradients, are in that dtype (bf16, fp16): the shard
// is cast for the all-gather and the full gradient cast back to the
// shard's dtype (fp32) for the reduce-scatter, so the masters and the
// reduction stay in fp32, as FSDP's MixedPrecisionPolicy(param_dtype,
// reduce_dtype=fp32).

// Note [A gradient is moved in, not added]
// The full-gradient buffer is not filled with zeros for AccumulateGrad to
// add into: a parameter's .grad stays undefined in its first backward, so
// AccumulateGrad takes the new gradient as it is, and the hook after it
// (gradient_arrived) copies it into the parameter's place in the buffer
// and makes .grad that view, where later backward passes under no_sync()
// (and a gradient from before the buffer) add in place. A place no
// gradient was written to is zeroed only when the buffer is reduced
// (fill_unwritten()). Per element that is one read and one write, where
// zeros and an add were a write, two reads and a write: on the
// transformer of benchmarks/fsdp_transformer_bench.cpp at width 2048, two
// of four ranks' gradient bytes a step of 0.8 GB each.

// Note [A unit's pieces]
// The shard holds a run of each parameter's flattened elements that falls
// in it (none of most, all of some, part of one or two at its ends). Each
// such run is a piece: a leaf tensor over the shard's storage, its .grad
// the matching run of the averaged gradient (a tensor of its own, not a
// view: LibTorch 1.13's zero_grad() detaches each .grad in place). The pieces, one per
// parameter (of length 0 where the shard holds none of it), are the
// wrapper's parameters() under the parameters' own names, so that an
// optimizer's param groups (no weight decay on norms and biases) and the
// snapshots (keyed by name and shape) see parameters, not units, as FSDP1's
// use_orig_params does; and a parameter that received no gradient on any
// rank keeps none (find_unused_units), as in one process. The unit still
// gathers and reduces its shard as one flat buffer: one collective each.
// Note [Hybrid sharding]
// With a DeviceMesh (FullyShardedDataParallelOptions::device_mesh) a unit
// is sharded across the ranks of this rank's row (its group) and each row
// holds a whole copy: the gathers stay inside the row. A gradient is
// reduce-scattered within the row and the resulting shard all-reduced
// across the rows (the ranks at the same place in every row, which hold
// the same shard), then divided by the world size: the average over every
// rank, as without the mesh, for 1/R of the row's traffic over the links
// between rows. The all-reduce starts once the reduce-scatter has been
// waited for (finish_scatter(), which frees the full gradient) and is
// waited for only when the next unit's reduce-scatter is (ReductionQueue's
// finish_in_flight()): it runs beside the backward of the unit before and
// that unit's reduce-scatter within the row, for one more shard-sized
// buffer alive. Waited for at once, it held each unit's backward for a
// transfer between nodes (the transformer of
// benchmarks/fsdp_cluster_bench.sh stepped at 1.20x DDP's over 1 Gbit/s).

// Note [Resharding to the node]
// hpZ (ZeRO++'s hierarchical partitioning; FSDP2's reshard_after_forward
// given a group size): a unit sharded across the world, resharded after
// a training forward, keeps this rank's 1/k of its full parameters (k the
// ranks of its row of FullyShardedDataParallelOptions::
// reshard_after_forward_mesh, a node), in the gathered dtype: row rank j
// keeps elements [j * P / k, (j + 1) * P / k) of the padded P. The
// backward's all-gather then runs within the row, from those slices,
// instead of across the world from the shards; the slice is freed once
// gathered. Only the backward gathers from it (a checkpointed unit's
// recompute too: the unit keeps its slice from its first run, under no
// grad, to the recompute; Note [Checkpointed units]); any other gather (a
// forward, an evaluation) goes to the shards, which are what the
// optimizer steps. The slices count in the gathered bytes from the
// forward to the backward.
/// The process groups a unit works over (Note [Hybrid sharding], Note
/// [Resharding to the node]).
struct UnitGroups {
  /// The ranks the unit is sharded across.
  ProcessGroup* shard = nullptr;
  /// The ranks that hold the same shard (hybrid sharding), or null.
  ProcessGroup* replicas = nullptr;
  /// The ranks the unit keeps its full parameters sharded across from a
  /// training forward to its backward (hpZ), or null.
  ProcessGroup* after_forward = nullptr;
};

/// Bytes of full parameters and gradients the units hold at once: now, and
/// the most since reset (FullyShardedDataParallel::memory()).
struct GatheredBytes {
  int64_t now = 0;
  int64_t peak = 0;
  void add(int64_t bytes) {
    now += bytes;
    peak = std::max(peak, now);
  }
};

class ShardedUnit {
 public:
  /// Takes `parameters` (the unit's, registration order, named `names`)
  /// into the flat layout; they must share one dtype and device. `index`
  /// (its place in forward order) names its collectives for observers:
  /// "fsdp.gather <index>", "fsdp.reduce <index>" (the timeline's events).
  /// `built_shard`, when defined, is this rank's shard already (Note
  /// [Sharded construction]): `parameters` then hold no values. Its
  /// buffers for gathers and gradients come from `pool`; its collectives
  /// run over `groups`.
  ShardedUnit(std::string name, std::vector<std::string> names, std::vector<at::Tensor> parameters,
              const UnitGroups& groups, GatheredBytes& gathered, BufferPool& pool, int64_t index,
              std::optional<at::ScalarType> param_dtype = std::nullopt,
              at::Tensor built_shard = {});
  ~ShardedUnit();
  ShardedUnit(const ShardedUnit&) = delete;
  ShardedUnit& operator=(const ShardedUnit&) = delete;

  const std::string& name() const { return name_; }
  /// This rank's shard of the flat buffer (padding included).
  const at::Tensor& shard() const { return shard_; }
  /// Each parameter's piece of the shard (Note [A unit's pieces]): a leaf
  /// the optimizer steps, its .grad its part of the averaged gradient.
  const std::vector<at::Tensor>& pieces() const { return pieces_; }
  /// Where each piece starts in its flattened parameter.
  const std::vector<int64_t>& piece_begins() const { return piece_begins_; }
  const std::vector<std::string>& parameter_names() const { return names_; }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  /// Each parameter's other names in the model (a tied one's, one of a
  /// module registered twice), in parameters() order.
  const std::vector<std::vector<std::string>>& aliases() const { return aliases_; }
  void set_aliases(std::vector<std::vector<std::string>> aliases) { aliases_ = std::move(aliases); }
  /// Elements of the unit's parameters, without padding.
  int64_t numel() const { return numel_; }
  bool trainable() const { return trainable_; }

  /// Starts the all-gather of the full parameters, unless they are gathered
  /// or on their way; `in_backward`: from the slice kept after the forward
  /// where there is one (Note [Resharding to the node]).
  void gather_async(bool in_backward = false);
  /// Waits for the parameters (starting the gather if needed).
  void wait_gathered(bool in_backward = false);
  bool gathered() const { return state_ != State::kSharded; }
  /// Whether the parameters' storage holds the gathered values (not while
  /// the gather is on its way).
  bool holds_data() const { return state_ == State::kGathered; }
  /// Empties the full parameters' storage and gives each parameter its
  /// placeholder (a no-op when sharded; Note [Parameters between steps]).
  /// `after_forward`: a training forward's, which keeps a slice for the
  /// backward where the unit has a group for it (hpZ); otherwise a slice
  /// kept is freed.
  void reshard(bool after_forward = false);

  /// Before the unit's backward: the full gradient buffer (Note [A
  /// gradient is moved in, not added]; kept from backward passes under
  /// no_sync()), a gradient from before it moved in. Idempotent per backward.
  void prepare_gradients();
  /// Records that parameter `index`'s gradient arrived; true when it was
  /// the last one. A gradient that arrived before prepare_gradients() (a
  /// checkpointed unit's) counts in the gathered bytes until it moves into
  /// the buffer.
  bool gradient_arrived(size_t index);
  /// Zeros each place of the full gradient buffer no gradient was written
  /// to, and its padding (before it is reduced or cast).
  void fill_unwritten();
  /// Which parameters received a gradient since the last synchronized
  /// reduction (1 or 0 each, parameters() order).
  const std::vector<int32_t>& received() const { return received_; }
  /// After the reductions of a synchronized backward: a piece whose
  /// parameter no rank gave a gradient (`received_anywhere`, received()
  /// summed over the ranks) and which had none before it keeps none.
  void drop_unreceived_gradients(const int32_t* received_anywhere);
  /// Starts reducing the full gradient (zeros where none arrived) into this
  /// rank's shard; finish_reduction() completes it.
  void reduce_async();
  /// Waits for the reduce-scatter, frees the full gradient and detaches the
  /// parameters' .grad; with replicas (hybrid sharding), starts the shard's
  /// all-reduce across them (Note [Hybrid sharding]).
  void finish_scatter();
  /// Whether the shard's all-reduce across the replicas is on its way.
  bool replicating() const { return replication_.has_value(); }
  /// finish_scatter(), waits for the all-reduce across the replicas, and
  /// adds each piece's part of the averaged shard into its .grad.
  void finish_reduction();
  bool reduced() const { return reduction_.has_value() || reduced_; }
  /// Under no_sync(), after a backward: moves the full gradient into the
  /// accumulation in the shard's dtype (fp32 under a param_dtype), which
  /// the next synchronized reduction adds in.
  void accumulate_unsynced();

  /// The unit's buffers, whose floating-point ones run in the gathered
  /// dtype (mixed precision) from cast_buffers() to restore_buffers(): the
  /// forward and the backward, whose kernels take them too (BatchNorm's).
  void set_buffers(std::vector<at::Tensor> buffers) { buffers_ = std::move(buffers); }
  /// Each floating-point buffer in the gathered dtype, a copy, its value
  /// kept aside in its own dtype (a no-op while cast).
  void cast_buffers();
  /// Copies the cast buffers' values (a BatchNorm's updated statistics)
  /// into the values kept aside; after the unit's forward.
  void sync_buffers();
  /// sync_buffers(), and each buffer has its own dtype and value again.
  void restore_buffers();
  /// Whether the buffers are cast now.
  bool buffers_cast() const { return !buffer_values_.empty(); }
  /// The full parameters in the shard's dtype (the optimizer's masters, not
  /// the gathered copies of a param_dtype): one all-gather; each
  /// parameter's place in the returned flat buffer, in its shape.
  std::vector<at::Tensor> gather_masters() const;

  /// Forgets the backward's bookkeeping (after finish_reduction()).
  void end_backward();
  /// Drops what a backward that did not finish left (a full gradient, a
  /// reduction in flight, the parameters' .grad views), as if it had not
  /// run; the pieces' gradients keep what earlier reductions added.
  void abandon_gradients();

 private:
  // Stops counting the gradients that arrived before the buffer (moved into
  // it, or dropped).
  void forget_loose_gradients();
  // The tensor a piece whose .grad is none gets its gradient in.
  at::Tensor fresh_grad(size_t piece);
  enum class State { kSharded, kGathering, kGathered };
  /// Each parameter's place in `flat` (a unit-sized buffer), in its shape.
  std::vector<at::Tensor> views_into(const at::Tensor& flat) const;

  std::string name_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> parameters_;
  std::vector<std::vector<std::string>> aliases_;
  std::vector<at::Tensor> views_;         // each parameter's place in full_, held while gathered
  std::vector<at::Tensor> placeholders_;  // held while sharded (Note [Parameters between steps])
  // Each trainable parameter's AccumulateGrad, made while it held its view:
  // a node made while it holds its placeholder would expect gradients on
  // the placeholder's device.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  ProcessGroup& group_;
  ProcessGroup* replicas_;
  ProcessGroup* after_forward_group_;
  GatheredBytes& gathered_;
  BufferPool& pool_;
  int64_t index_ = 0;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  bool trainable_ = false;
  int trainable_count_ = 0;
  at::Tensor shard_;
  std::vector<at::Tensor> pieces_;
  std::vector<int64_t> piece_begins_;   // in the flattened parameter
  std::vector<int64_t> piece_offsets_;  // in the shard
  std::vector<int32_t> received_;       // per parameter, until a synchronized reduction ends
  std::vector<char> had_gradient_;      // per piece, before the last reduction added
  at::Tensor full_;                     // the flat full parameters; storage emptied when sharded
  at::Tensor full_grad_;                // the flat full gradient, only during the unit's backward
  std::vector<at::Tensor> grad_views_;  // each parameter's place in full_grad_
  std::vector<char> written_;           // per parameter: its place in full_grad_ holds its gradient
  at::Tensor reduced_grad_;
  std::vector<at::Tensor> piece_grads_;  // each piece's last fresh_grad(), kept for the next step
  at::Tensor unsynced_grad_;             // no_sync()'s accumulation, in the shard's dtype
  std::vector<at::Tensor> buffers_;
  std::vector<at::Tensor> buffer_values_;  // while cast: each buffer's value in its dtype
  at::Tensor staging_;       // what the all-gather fills, the parameters' storage once done
  at::Tensor gather_input_;  // the shard in the gathered dtype, until the gather ends
  at::Tensor kept_slice_;    // Note [Resharding to the node]: from a forward to its backward
  at::Tensor reduce_input_;  // the full gradient in the shard's dtype, until the reduction ends
  State state_ = State::kSharded;
  std::optional<Work> gather_;
  std::optional<Work> reduction_;    // the reduce-scatter
  std::optional<Work> replication_;  // the shard's all-reduce across the replicas
  bool gradients_prepared_ = false;
  std::vector<int64_t> loose_bytes_;  // each gradient that arrived before the buffer
  bool reduced_ = false;
  int arrived_ = 0;
};

}  // namespace ddp::parallel::detail
