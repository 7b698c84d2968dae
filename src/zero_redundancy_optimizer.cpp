#include "ddp/zero_redundancy_optimizer.hpp"

#include <torch/optim.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "collective_name.hpp"
#include "ddp/errors.hpp"

namespace ddp {

// The parameters of one dtype and device, back to back in `flat`.
struct ZeroRedundancyOptimizer::FlatGroup {
  // A part of one parameter inside this rank's shard.
  struct Piece {
    size_t parameter = 0;  // index into parameters_
    int64_t begin = 0;     // first element, in the flattened parameter
    int64_t length = 0;
    int64_t in_shard = 0;  // first element, in the shard
    at::Tensor tensor;     // the view of `flat` the local optimizer updates
  };
  std::vector<size_t> members;   // indices into parameters_, in order
  std::vector<int64_t> offsets;  // of each member in `flat`
  at::Tensor flat;               // padded to world * shard elements
  int64_t shard = 0;             // elements per rank
  std::vector<Piece> pieces;     // this rank's, in order
  at::Tensor grad_shard;         // stage 2: this rank's averaged gradients
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
    throw ConfigError("ZeroRedundancyOptimizer: stage is " + std::to_string(options.stage()) +
                      "; it must be 1 (optimizer state sharded) or 2 (gradients too).");
  }
  if (parameters.empty()) {
    throw ConfigError("ZeroRedundancyOptimizer: no parameters; pass model->parameters().");
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].requires_grad()) {
      throw ConfigError("ZeroRedundancyOptimizer: parameter #" + std::to_string(i) +
                        " does not require grad; pass only trainable parameters.");
    }
  }
}

// Bytes of the state tensors of the optimizers LibTorch ships.
int64_t stateBytes(const torch::optim::OptimizerParamState& state) {
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

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters,
                                                 ZeroOptimizerFactory make_optimizer,
                                                 ZeroRedundancyOptimizerOptions options,
                                                 std::shared_ptr<ProcessGroup> group)
    : parameters_(std::move(parameters)), options_(options), group_(std::move(group)) {
  validate(parameters_, options_, group_);
  const int world = group_->size(), rank = group_->rank();

  // One flat group per (dtype, device), in order of first appearance.
  std::map<std::pair<int, std::string>, size_t> group_of;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const auto key = std::make_pair(static_cast<int>(parameters_[i].scalar_type()),
                                    parameters_[i].device().str());
    auto [it, added] = group_of.emplace(key, flats_.size());
    if (added) flats_.push_back(std::make_unique<FlatGroup>());
    flats_[it->second]->members.push_back(i);
  }

  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> shard;
  for (auto& flat : flats_) {
    int64_t total = 0;
    for (size_t i : flat->members) {
      flat->offsets.push_back(total);
      total += parameters_[i].numel();
    }
    flat->shard = (total + world - 1) / world;
    const at::Tensor& first = parameters_[flat->members.front()];
    flat->flat = at::zeros({flat->shard * world}, first.options().requires_grad(false));
    const int64_t lo = rank * flat->shard, hi = lo + flat->shard;
    for (size_t k = 0; k < flat->members.size(); ++k) {
      at::Tensor& parameter = parameters_[flat->members[k]];
      const int64_t offset = flat->offsets[k], numel = parameter.numel();
      at::Tensor view = flat->flat.narrow(0, offset, numel);
      view.copy_(parameter.reshape({-1}));
      parameter.set_data(view.view(parameter.sizes()));  // Note [Sharding by element]
      const int64_t begin = std::max(offset, lo), end = std::min(offset + numel, hi);
      if (begin >= end) continue;
      FlatGroup::Piece piece{flat->members[k], begin - offset, end - begin, begin - lo,
                             flat->flat.narrow(0, begin, end - begin)};
      shard.push_back(piece.tensor);
      flat->pieces.push_back(std::move(piece));
    }
    if (options_.stage() == 2) flat->grad_shard = at::zeros({flat->shard}, first.options());
  }
  optimizer_ = make_optimizer(std::move(shard));
  if (!optimizer_) {
    throw ConfigError("ZeroRedundancyOptimizer: the optimizer factory returned null.");
  }
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::zero_grad() {
  for (at::Tensor& parameter : parameters_) parameter.mutable_grad().reset();
}

// Stage 2: every rank's gradients, flattened as the parameters are, summed
// into the owner's shard and averaged; the full gradients are released. A
// joined rank contributes zeros.
void ZeroRedundancyOptimizer::reduce_scatter_gradients(FlatGroup& flat, bool joined,
                                                       double divisor) {
  at::Tensor full = at::zeros_like(flat.flat);
  for (size_t k = 0; k < flat.members.size() && !joined; ++k) {
    at::Tensor& grad = parameters_[flat.members[k]].mutable_grad();
    if (!grad.defined()) continue;
    full.narrow(0, flat.offsets[k], grad.numel()).copy_(grad.reshape({-1}));
    grad.reset();
  }
  detail::CollectiveName name("zero.reduce_scatter");
  group_->reduce_scatter(flat.grad_shard, full, ReduceOp::kSum);
  flat.grad_shard.div_(divisor);
}

void ZeroRedundancyOptimizer::step() {
  double divisor = group_->size();
  if (Join* join = active_join()) {
    const JoinRound round = join->notify(*this, /*sync=*/true);
    if (!join->options().divide_by_initial_world_size() && round.active > 0) {
      divisor = round.active;
    }
  }
  run_step(/*joined=*/false, divisor);
}

void ZeroRedundancyOptimizer::join_shadow(const JoinRound& round) {
  if (!round.sync) return;
  const bool by_world = active_join()->options().divide_by_initial_world_size();
  run_step(/*joined=*/true, by_world ? group_->size() : round.active);
}

void ZeroRedundancyOptimizer::run_step(bool joined, double divisor) {
  torch::NoGradGuard no_grad;
  // Which parameters have a gradient: here, or (stage 2) on any rank.
  std::vector<int32_t> is_used(parameters_.size());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const bool stale = joined && options_.stage() == 2;  // this rank's last own gradients
    is_used[i] = !stale && parameters_[i].grad().defined();
  }
  if (options_.stage() == 2) {
    at::Tensor used = at::tensor(is_used, at::kInt);
    detail::CollectiveName name("zero.gradients_used");
    group_->all_reduce(used, ReduceOp::kMax);
    std::copy_n(used.data_ptr<int32_t>(), is_used.size(), is_used.begin());
    for (auto& flat : flats_) reduce_scatter_gradients(*flat, joined, divisor);
  }
  for (auto& flat : flats_) {
    for (FlatGroup::Piece& piece : flat->pieces) {
      at::Tensor grad;
      if (is_used[piece.parameter] == 0) {
        // No gradient: the optimizer skips the piece, as it would skip the parameter.
      } else if (options_.stage() == 2) {
        grad = flat->grad_shard.narrow(0, piece.in_shard, piece.length);
      } else {
        grad =
            parameters_[piece.parameter].grad().reshape({-1}).narrow(0, piece.begin, piece.length);
      }
      piece.tensor.mutable_grad() = grad;
    }
  }
  optimizer_->step();

  // Every rank's updated shard into every rank's parameters.
  std::vector<Work> gathers;
  std::vector<at::Tensor> inputs;
  for (auto& flat : flats_) {
    inputs.push_back(flat->flat.narrow(0, group_->rank() * flat->shard, flat->shard).clone());
    detail::CollectiveName name("zero.all_gather");
    gathers.push_back(group_->all_gather_async(flat->flat, inputs.back()));
  }
  for (Work& work : gathers) work.wait();
}

int64_t ZeroRedundancyOptimizer::shard_elements() const {
  int64_t elements = 0;
  for (const auto& flat : flats_) {
    for (const auto& piece : flat->pieces) elements += piece.length;
  }
  return elements;
}

std::vector<ZeroRedundancyOptimizer::Piece> ZeroRedundancyOptimizer::pieces() const {
  std::vector<Piece> result;
  for (const auto& flat : flats_) {
    for (const auto& piece : flat->pieces) {
      result.push_back({piece.parameter, piece.begin, piece.length});
    }
  }
  return result;
}

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& entry : optimizer_->state()) bytes += stateBytes(*entry.second);
  return bytes;
}

}  // namespace ddp
