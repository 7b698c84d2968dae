#include "ddp/parallel/zero_redundancy_optimizer.hpp"

#include <torch/optim.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <utility>

#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/bucketing/bucket_assignment.hpp"
#include "parallel/bucketing/gradient_buckets.hpp"
#include "parallel/rank_agreement.hpp"
#include "parallel/zero_redundancy_optimizer/gradient_shards.hpp"

namespace ddp::parallel {

// One bucket of parameters (of one dtype and device), back to back in
// `values`, padded to world x chunk elements; rank r owns chunk r.
struct ZeroRedundancyOptimizer::ShardedBucket {
  // A part of one parameter inside this rank's chunk.
  struct Piece {
    size_t parameter = 0;  // index into parameters_
    int64_t begin = 0;     // first element, in the flattened parameter
    int64_t length = 0;
    int64_t in_chunk = 0;  // first element, in the chunk
    at::Tensor tensor;     // the view of `values` the local optimizer updates
  };
  std::vector<size_t> members;   // indices into parameters_, in order
  std::vector<int64_t> offsets;  // of each member in `values`
  int64_t elements = 0;          // without the padding
  int64_t chunk = 0;             // elements per rank
  at::Tensor values;             // the parameters' storage
  std::vector<Piece> pieces;     // this rank's, in order
};

namespace {

void validate(const std::vector<at::Tensor>& parameters,
              const ZeroRedundancyOptimizerOptions& options,
              const std::shared_ptr<ProcessGroup>& group) {
  if (!group) {
    throw ConfigError(
        "ZeroRedundancyOptimizer: the process group is null; pass the group returned by "
        "ddp::init().");
  }
  if (options.stage() != 1 && options.stage() != 2) {
    throw ConfigError(
        base::detail::str("ZeroRedundancyOptimizer: stage is ", options.stage(),
                          "; it must be 1 (optimizer state sharded) or 2 (gradients too)."));
  }
  detail::cap_bytes_of(options.bucket_cap_mb(), "ZeroRedundancyOptimizer", "bucket_cap_mb");
  const int64_t passes = options.backward_passes_per_step();
  if (passes < 1 || (options.stage() == 1 && passes != 1)) {
    throw ConfigError(base::detail::str("ZeroRedundancyOptimizer: backward_passes_per_step is ",
                                        passes, " at stage ", options.stage(),
                                        "; it must be at least 1, and 1 at stage 1 (accumulate "
                                        "gradients with DistributedDataParallel's no_sync())."));
  }
  if (parameters.empty()) {
    throw ConfigError("ZeroRedundancyOptimizer: no parameters; pass model->parameters().");
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].requires_grad()) {
      throw ConfigError(
          base::detail::str("ZeroRedundancyOptimizer: parameter #", i,
                            " does not require grad; pass only trainable parameters."));
    }
  }
}

// Bytes of the state tensors of the optimizers LibTorch ships.
int64_t param_state_bytes(const torch::optim::OptimizerParamState& state) {
  auto bytes = [](const at::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; };
  if (auto* s = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    return bytes(s->exp_avg()) + bytes(s->exp_avg_sq()) + bytes(s->max_exp_avg_sq());
  }
  if (auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    return bytes(s->exp_avg()) + bytes(s->exp_avg_sq()) + bytes(s->max_exp_avg_sq());
  }
  if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    return bytes(s->momentum_buffer());
  }
  if (auto* s = dynamic_cast<const torch::optim::RMSpropParamState*>(&state)) {
    return bytes(s->square_avg()) + bytes(s->momentum_buffer()) + bytes(s->grad_avg());
  }
  if (auto* s = dynamic_cast<const torch::optim::AdagradParamState*>(&state)) {
    return bytes(s->sum());
  }
  return 0;
}

detail::BucketSettings bucket_settings(const ZeroRedundancyOptimizerOptions& options) {
  detail::BucketSettings settings;
  settings.cap_bytes =
      detail::cap_bytes_of(options.bucket_cap_mb(), "ZeroRedundancyOptimizer", "bucket_cap_mb");
  settings.first_cap_bytes = settings.cap_bytes;
  settings.passes_per_step = options.backward_passes_per_step();
  return settings;
}

// What shapes the collectives of a step: the options, then each bucket's
// members and the chunk each rank owns of it.
std::vector<std::string> describe_zero_layout(const ZeroRedundancyOptimizerOptions& options,
                                              const detail::BucketSettings& settings,
                                              const std::vector<std::vector<size_t>>& groups,
                                              const std::vector<at::Tensor>& parameters,
                                              int world) {
  std::vector<std::string> lines = {base::detail::str(
      "stage=", options.stage(), " bucket_cap_mb=", options.bucket_cap_mb(), " (",
      settings.cap_bytes, " bytes) backward_passes_per_step=", options.backward_passes_per_step())};
  for (size_t b = 0; b < groups.size(); ++b) {
    int64_t elements = 0;
    std::string members;
    for (size_t i : groups[b]) {
      elements += parameters[i].numel();
      members += base::detail::str(" #", i);
    }
    lines.push_back(base::detail::str("bucket ", b, ": ", elements, " elements, ",
                                      (elements + world - 1) / world, " per rank, of", members));
  }
  return lines;
}

// Every rank must issue the same collectives in every step: a rank with
// other parameters, options or buckets is named at construction, on every
// rank, as DistributedDataParallel names one (two all-gathers).
void verify_zero_agreement(ProcessGroup& group, const std::vector<at::Tensor>& parameters,
                           const ZeroRedundancyOptimizerOptions& options,
                           const detail::BucketSettings& settings,
                           const std::vector<std::vector<size_t>>& groups) {
  if (group.size() == 1) return;
  constexpr const char* kWho = "ZeroRedundancyOptimizer";
  std::vector<std::string> names;
  for (size_t i = 0; i < parameters.size(); ++i) names.push_back(base::detail::str("#", i));
  detail::verify_same_across_ranks(
      group, detail::describe_tensors(names, parameters), kWho, "parameters",
      "Pass every rank the same parameters, in the same order (the same model's parameters()).",
      "zero.verify");
  detail::verify_same_across_ranks(
      group, describe_zero_layout(options, settings, groups, parameters, group.size()), kWho,
      "options and buckets",
      "Give every rank the same ZeroRedundancyOptimizerOptions (stage, bucket_cap_mb, "
      "backward_passes_per_step).",
      "zero.verify");
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters,
                                                 ZeroOptimizerFactory make_optimizer,
                                                 ZeroRedundancyOptimizerOptions options,
                                                 std::shared_ptr<ProcessGroup> group)
    : parameters_(std::move(parameters)), options_(options), group_(std::move(group)) {
  validate(parameters_, options_, group_);
  const int world = group_->size(), rank = group_->rank();

  // The buckets, as stage 2's gradient engine groups them.
  const detail::BucketSettings settings = bucket_settings(options_);
  std::vector<std::vector<size_t>> groups = detail::group_parameters(
      parameters_, settings, detail::initial_bucket_order(parameters_.size()));
  verify_zero_agreement(*group_, parameters_, options_, settings, groups);
  if (options_.stage() == 2) {
    gradients_ = std::make_shared<detail::GradientShards>(parameters_, settings, group_);
  }

  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> shard;
  for (auto& members : groups) {
    auto bucket = std::make_unique<ShardedBucket>();
    bucket->members = std::move(members);
    for (size_t i : bucket->members) {
      bucket->offsets.push_back(bucket->elements);
      bucket->elements += parameters_[i].numel();
    }
    bucket->chunk = (bucket->elements + world - 1) / world;
    const at::Tensor& first = parameters_[bucket->members.front()];
    bucket->values = at::zeros({bucket->chunk * world}, first.options().requires_grad(false));
    const int64_t lo = rank * bucket->chunk, hi = lo + bucket->chunk;
    for (size_t k = 0; k < bucket->members.size(); ++k) {
      at::Tensor& parameter = parameters_[bucket->members[k]];
      const int64_t offset = bucket->offsets[k], numel = parameter.numel();
      at::Tensor view = bucket->values.narrow(0, offset, numel);
      view.copy_(parameter.reshape({-1}));
      parameter.set_data(view.view(parameter.sizes()));  // Note [Sharding by element]
      const int64_t begin = std::max(offset, lo), end = std::min(offset + numel, hi);
      if (begin >= end) continue;
      ShardedBucket::Piece piece{bucket->members[k], begin - offset, end - begin, begin - lo,
                                 bucket->values.narrow(0, begin, end - begin)};
      shard.push_back(piece.tensor);
      bucket->pieces.push_back(std::move(piece));
    }
    buckets_.push_back(std::move(bucket));
  }
  optimizer_ = make_optimizer(std::move(shard));
  if (!optimizer_) {
    throw ConfigError("ZeroRedundancyOptimizer: the optimizer factory returned null.");
  }
  if (gradients_) {
    gradients_->set_step_start([this] { return start_round(); });
    gradients_->attach_hooks();
  }
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::zero_grad() {
  if (gradients_ && gradients_->launched()) {
    throw InvalidArgumentError(
        "ZeroRedundancyOptimizer (stage 2): zero_grad() after a backward pass whose gradients "
        "are already being reduce-scattered, before step(); call zero_grad() before the "
        "backward passes of a step, and step() after them.");
  }
  for (at::Tensor& parameter : parameters_) parameter.mutable_grad().reset();
}

// The divisor of the summed gradients, starting the step's Join round.
double ZeroRedundancyOptimizer::start_round() {
  double divisor = group_->size();
  if (Join* join = active_join()) {
    const JoinRound round = join->notify(*this, /*sync=*/true);
    if (!join->options().divide_by_initial_world_size() && round.active > 0) {
      divisor = round.active;
    }
  }
  return divisor;
}

void ZeroRedundancyOptimizer::step() {
  // Stage 2 starts the round before its first reduce-scatter, in a hook.
  if (!gradients_) start_round();
  run_step(/*joined=*/false, /*divisor=*/0);
}

void ZeroRedundancyOptimizer::join_shadow(const JoinRound& round) {
  if (!round.sync) return;
  const bool by_world = active_join()->options().divide_by_initial_world_size();
  run_step(/*joined=*/true, by_world ? group_->size() : round.active);
}

void ZeroRedundancyOptimizer::run_step(bool joined, double divisor) {
  torch::NoGradGuard no_grad;
  // Which parameters have a gradient: here (stage 1), or on any rank.
  std::vector<int32_t> is_used(parameters_.size());
  if (gradients_) {
    is_used = joined ? gradients_->shadow(divisor) : gradients_->synchronize();
  } else {
    for (size_t i = 0; i < parameters_.size(); ++i) is_used[i] = parameters_[i].grad().defined();
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (ShardedBucket::Piece& piece : buckets_[b]->pieces) {
      at::Tensor grad;
      if (is_used[piece.parameter] == 0) {
        // No gradient: the optimizer skips the piece, as it would skip the parameter.
      } else if (gradients_) {
        grad = gradients_->grad_chunk(b).narrow(0, piece.in_chunk, piece.length);
      } else {
        grad =
            parameters_[piece.parameter].grad().reshape({-1}).narrow(0, piece.begin, piece.length);
      }
      piece.tensor.mutable_grad() = grad;
    }
  }
  optimizer_->step();

  // Every rank's updated chunks into every rank's parameters.
  std::vector<Work> gathers;
  std::vector<at::Tensor> inputs;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    ShardedBucket& bucket = *buckets_[b];
    inputs.push_back(bucket.values.narrow(0, group_->rank() * bucket.chunk, bucket.chunk).clone());
    comm::detail::CollectiveName name("zero.all_gather", static_cast<int64_t>(b));
    gathers.push_back(group_->all_gather_async(bucket.values, inputs.back()));
  }
  for (Work& work : gathers) work.wait();
}

int64_t ZeroRedundancyOptimizer::shard_elements() const {
  int64_t elements = 0;
  for (const auto& bucket : buckets_) {
    for (const auto& piece : bucket->pieces) elements += piece.length;
  }
  return elements;
}

std::vector<int64_t> ZeroRedundancyOptimizer::bucket_elements() const {
  std::vector<int64_t> elements;
  for (const auto& bucket : buckets_) elements.push_back(bucket->elements);
  return elements;
}

std::vector<ZeroRedundancyOptimizer::Piece> ZeroRedundancyOptimizer::pieces() const {
  std::vector<Piece> result;
  for (const auto& bucket : buckets_) {
    for (const auto& piece : bucket->pieces) {
      result.push_back({piece.parameter, piece.begin, piece.length});
    }
  }
  return result;
}

std::vector<int64_t> ZeroRedundancyOptimizer::numels() const {
  std::vector<int64_t> result;
  for (const at::Tensor& parameter : parameters_) result.push_back(parameter.numel());
  return result;
}

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& entry : optimizer_->state()) bytes += param_state_bytes(*entry.second);
  return bytes;
}

}  // namespace ddp::parallel
