#include "ddp/parallel/fully_sharded_data_parallel.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/dtype_name.hpp"
#include "base/str.hpp"
#include "ddp/base/allocator.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/fully_sharded/built_shards.hpp"
#include "parallel/fully_sharded/checked_options.hpp"
#include "parallel/fully_sharded/mapped_allocations.hpp"
#include "parallel/fully_sharded/unit_plan.hpp"
#include "parallel/fully_sharded/unit_schedule.hpp"
#include "parallel/rank_agreement.hpp"

namespace ddp::parallel {
namespace {

constexpr const char* kWho = "FullyShardedDataParallel";

// Mixed precision: each unit runs its modules' buffers in the gathered
// dtype; the root those of the modules outside every unit.
void assign_buffers(const std::vector<const torch::nn::Module*>& modules,
                    std::vector<std::unique_ptr<detail::ShardedUnit>>& units,
                    const torch::nn::Module& model) {
  std::unordered_set<const void*> taken;
  int root = -1;
  for (size_t u = 0; u < modules.size(); ++u) {
    if (!modules[u]) {
      root = static_cast<int>(u);
      continue;
    }
    std::vector<at::Tensor> buffers;
    for (const auto& b : modules[u]->buffers()) {
      if (taken.insert(b.unsafeGetTensorImpl()).second) buffers.push_back(b);
    }
    units[u]->set_buffers(std::move(buffers));
  }
  if (root < 0) return;
  std::vector<at::Tensor> rest;
  for (const auto& b : model.buffers()) {
    if (taken.insert(b.unsafeGetTensorImpl()).second) rest.push_back(b);
  }
  units[root]->set_buffers(std::move(rest));
}

// Note [A unit's pieces]: the wrapper's parameters are the pieces, under
// the names of the model's parameters they are pieces of, in the model's
// order (one name for a tied tensor), in modules named as the model's.
void register_pieces(torch::nn::Module& wrapper, const torch::nn::Module& model,
                     const std::vector<std::unique_ptr<detail::ShardedUnit>>& units) {
  std::unordered_map<std::string, std::pair<at::Tensor, bool>> pieces;
  for (const auto& unit : units) {
    for (size_t i = 0; i < unit->pieces().size(); ++i) {
      pieces[unit->parameter_names()[i]] = {unit->pieces()[i], unit->trainable()};
    }
  }
  for (const auto& item : model.named_parameters()) {
    auto found = pieces.find(item.key());
    if (found == pieces.end()) continue;  // a tied tensor's other name
    torch::nn::Module* owner = &wrapper;
    std::string rest = item.key();
    for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      const std::string component = rest.substr(0, dot);
      rest = rest.substr(dot + 1);
      auto children = owner->named_children();
      if (!children.contains(component)) {
        owner->register_module(component, std::make_shared<torch::nn::Module>());
        children = owner->named_children();
      }
      owner = children[component].get();
    }
    owner->register_parameter(rest, found->second.first, found->second.second);
    pieces.erase(found);
  }
}

// Whether a c10 error is a dtype mismatch: it says so ("mat1 and mat2 must
// have the same dtype", "expected scalar type Float but found BFloat16"),
// or names `low` beside float32 or float64 ("Input type (float) and bias
// type (c10::BFloat16) should be the same").
bool is_dtype_mismatch(std::string what, c10::ScalarType low) {
  if (what.find("same dtype") != std::string::npos ||
      what.find("scalar type") != std::string::npos) {
    return true;
  }
  const std::string name = c10::toString(low);
  if (what.find(name) == std::string::npos) return false;
  for (size_t at = what.find(name); at != std::string::npos; at = what.find(name, at)) {
    what.erase(at, name.size());
  }
  std::transform(what.begin(), what.end(), what.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return what.find("float") != std::string::npos || what.find("double") != std::string::npos;
}

}  // namespace

FullyShardedDataParallelImpl::FullyShardedDataParallelImpl(WrappedModule module,
                                                           FullyShardedDataParallelOptions options,
                                                           std::shared_ptr<ProcessGroup> group)
    : module_(std::move(module)), options_(options), group_(std::move(group)) {
  if (!group_) {
    throw ConfigError(base::detail::str(
        kWho, ": the process group is null; pass the group returned by ddp::init()."));
  }
  if (!module_.ptr()) throw ConfigError(base::detail::str(kWho, ": the module is empty."));
  detail::check_options(options_, group_);
  // Note [Sharded construction]: units built sharded are adopted.
  detail::BuiltShards* built = detail::built_shards();
  WrapPolicy policy = options_.wrap_policy();
  if (!policy && built && built->waiting()) {
    policy = [built](const std::string&, const torch::nn::Module& m) {
      return built->find(&m) != nullptr;
    };
  }
  detail::UnitPlan plan = detail::plan_units(module_, policy);
  detail::refuse_ended_construction(plan);
  if (built && options_.device_mesh() && built->group != options_.device_mesh()->shard_group()) {
    throw ConfigError(base::detail::str(
        kWho, ": the model was built under a ddp::ShardedConstruction of ", built->group->size(),
        " ranks, but the device_mesh ", options_.device_mesh()->describe(),
        " shards within each row: build it under "
        "ddp::ShardedConstruction(mesh->shard_group())."));
  }
  const std::vector<detail::BuiltUnit*> adopted =
      built ? detail::adopt_built(*built, plan, shard_group())
            : std::vector<detail::BuiltUnit*>(plan.names.size(), nullptr);
  std::vector<std::string> descriptions{detail::describe_options(options_)};
  for (size_t u = 0; u < plan.names.size(); ++u) {
    descriptions.push_back(plan.names[u] + ": " +
                           base::detail::str(plan.parameters[u].size(), " parameters"));
    if (adopted[u]) {
      descriptions.push_back("  " + plan.names[u] + " built sharded, values " +
                             adopted[u]->fingerprint);
    }
    for (const auto& d : detail::describe_tensors(plan.parameter_names[u], plan.parameters[u])) {
      descriptions.push_back("  " + d);
    }
  }
  detail::verify_same_across_ranks(
      *group_, descriptions, kWho, "units",
      "Every rank must build the same model with the same FullyShardedDataParallelOptions before "
      "wrapping it (under a ddp::ShardedConstruction, from the same seed).");
  {
    // Unit by unit, so that no buffer holds more than one (a built unit's
    // values are on every rank already), then the buffers.
    torch::NoGradGuard no_grad;
    for (size_t u = 0; u < plan.names.size(); ++u) {
      if (!adopted[u] && !plan.parameters[u].empty()) {
        broadcast_tensors(*group_, plan.parameters[u], 0);
      }
    }
    std::vector<at::Tensor> buffers = module_.ptr()->buffers();
    if (!buffers.empty()) broadcast_tensors(*group_, buffers, 0);
  }
  gathered_ = std::make_shared<detail::GatheredBytes>();
  pool_ = std::make_shared<detail::BufferPool>(options_.cache_buffers());
  std::vector<std::unique_ptr<detail::ShardedUnit>> units;
  detail::UnitGroups groups;
  groups.shard = &shard_group();
  if (options_.device_mesh()) groups.replicas = options_.device_mesh()->replicate_group().get();
  if (const auto& mesh = options_.reshard_after_forward_mesh())
    groups.after_forward = mesh->shard_group().get();
  for (size_t u = 0; u < plan.names.size(); ++u) {
    units.push_back(std::make_unique<detail::ShardedUnit>(
        plan.names[u], std::move(plan.parameter_names[u]), std::move(plan.parameters[u]), groups,
        *gathered_, *pool_, static_cast<int64_t>(u), options_.param_dtype(),
        adopted[u] ? std::move(adopted[u]->shard) : at::Tensor()));
    units.back()->set_aliases(std::move(plan.aliases[u]));
  }
  register_pieces(*this, *module_.ptr(), units);
  for (size_t u = 0; u < plan.modules.size(); ++u) {
    if (plan.modules[u]) unit_of_module_[plan.modules[u]] = static_cast<int>(u);
  }
  if (module_.sequential()) {
    for (auto entry = module_.sequential()->begin(); entry != module_.sequential()->end();
         ++entry) {
      auto found = unit_of_module_.find(entry->ptr().get());
      entry_units_.push_back(found == unit_of_module_.end() ? -1 : found->second);
    }
  }
  if (options_.param_dtype()) assign_buffers(plan.modules, units, *module_.ptr());
  schedule_ =
      std::make_shared<detail::UnitSchedule>(std::move(units), plan.root, options_, *group_);
  schedule_->attach_hooks();
  base::release_free_memory();  // the whole parameters: Note [Freed memory given back]
}

FullyShardedDataParallelImpl::~FullyShardedDataParallelImpl() = default;

at::Tensor FullyShardedDataParallelImpl::cast_tensor(const at::Tensor& tensor) const {
  if (!options_.param_dtype() || !tensor.defined() || !tensor.is_floating_point()) return tensor;
  return tensor.to(*options_.param_dtype());
}

void FullyShardedDataParallelImpl::begin_forward() {
  // train()/eval() on this wrapper reach the module, which is not a child
  // (its parameters are not this module's: the shards are).
  if (module_.ptr()->is_training() != is_training()) module_.ptr()->train(is_training());
  schedule_->begin_forward(is_training());
}

void FullyShardedDataParallelImpl::explain_forward_failure(const c10::Error& error) const {
  const std::string what = error.what_without_backtrace();
  const auto low = options_.param_dtype();
  if (low && is_dtype_mismatch(what, *low)) {
    throw ConfigError(base::detail::str(
        kWho, ": the forward failed (", what.substr(0, what.find('\n')), ") under param_dtype ",
        base::detail::dtype_name(*low), ": a float32 tensor, one the forward made itself, met ",
        base::detail::dtype_name(*low),
        " parameters. Only the module's floating-point arguments and each unit's (through "
        "ddp::sharded_call) are cast to param_dtype; cast what the forward makes itself (a mask, "
        "a position table, an fp32 result) to the activations' dtype before a layer reads it, "
        "as mask.to(h.scalar_type())."));
  }
  // The checks that reading a tensor whose storage holds no bytes fails
  // (a view's bounds, a typed data pointer), with units that hold none.
  const bool empty_storage = what.find("storage of size 0") != std::string::npos ||
                             what.find("data is not allocated yet") != std::string::npos;
  const std::vector<int> units = schedule_->unentered_units();
  if (!empty_storage || units.empty()) throw;
  std::string names;
  for (int u : units) names += (names.empty() ? "'" : ", '") + schedule_->units()[u]->name() + "'";
  throw ConfigError(base::detail::str(
      kWho, ": the forward failed (", what.substr(0, what.find('\n')), ") while unit(s) ", names,
      " held no data: they had not run through ddp::sharded_call in this forward, so one of "
      "them was most likely called directly; call each unit the wrap_policy picks as "
      "ddp::sharded_call(block, x), not block->forward(x) or block(x) (Note [Where the units "
      "come from] in ddp/parallel/fully_sharded_units.hpp)."));
}

void FullyShardedDataParallelImpl::before_entry(size_t entry) {
  if (entry < entry_units_.size() && entry_units_[entry] >= 0) {
    schedule_->before_unit(entry_units_[entry]);
  }
}

void FullyShardedDataParallelImpl::after_entry(size_t entry, torch::nn::AnyValue& output) {
  if (entry >= entry_units_.size() || entry_units_[entry] < 0) return;
  std::vector<at::Tensor> tensors;
  if (auto* tensor = output.try_get<at::Tensor>()) tensors.push_back(*tensor);
  schedule_->after_unit(entry_units_[entry], tensors);
}

void FullyShardedDataParallelImpl::end_forward(std::vector<at::Tensor>& outputs) {
  schedule_->end_forward(outputs);
}

int FullyShardedDataParallelImpl::unit_of(const torch::nn::Module* module) const {
  auto found = unit_of_module_.find(module);
  return found == unit_of_module_.end() ? -1 : found->second;
}

WrapPolicy wrap_by_parameter_count(int64_t parameters) {
  return [parameters](const std::string&, const torch::nn::Module& module) {
    int64_t count = 0;
    for (const auto& p : module.parameters()) count += p.numel();
    return count >= parameters;
  };
}

FullyShardedDataParallelImpl::NoSyncGuard::NoSyncGuard(FullyShardedDataParallelImpl& owner)
    : owner_(owner), previous_(owner.schedule_->require_sync()) {
  owner_.schedule_->set_require_sync(false);
}

FullyShardedDataParallelImpl::NoSyncGuard::~NoSyncGuard() {
  owner_.schedule_->set_require_sync(previous_);
}

double FullyShardedDataParallelImpl::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  if (schedule_->units().empty()) return 0.0;
  std::vector<at::Tensor> grads;
  for (const auto& unit : schedule_->units()) {
    for (const auto& piece : unit->pieces()) {
      if (piece.grad().defined()) grads.push_back(piece.grad());
    }
  }
  // Every rank of the row joins the all-reduce, with or without gradients of
  // its own; each row holds the whole gradient once (Note [Hybrid sharding]).
  at::Tensor squares =
      at::zeros({1}, schedule_->units().front()->shard().options().dtype(at::kDouble));
  for (const auto& g : grads) squares.add_(g.to(at::kDouble).pow(2).sum());
  shard_group().all_reduce(squares);
  const double total = std::sqrt(squares.item<double>());
  const double coefficient = std::min(1.0, max_norm / (total + 1e-6));
  for (auto& g : grads) g.mul_(coefficient);
  return total;
}

FullyShardedMemory FullyShardedDataParallelImpl::memory() const {
  FullyShardedMemory memory;
  memory.gathered_bytes = gathered_->now;
  memory.peak_gathered_bytes = gathered_->peak;
  memory.cached_bytes = pool_->cached_bytes();
  memory.peak_buffer_bytes = pool_->peak_taken_bytes();
  memory.pooled_bytes = static_cast<int64_t>(detail::pooled_bytes());
  for (const auto& unit : schedule_->units()) {
    memory.shard_bytes += unit->shard().numel() * unit->shard().element_size();
  }
  return memory;
}

void FullyShardedDataParallelImpl::reset_peak_memory() { gathered_->peak = gathered_->now; }

void FullyShardedDataParallelImpl::empty_cache() {
  pool_->release();
  detail::release_pooled_blocks();  // Note [The backward's large blocks from a pool]
}

ProcessGroup& FullyShardedDataParallelImpl::shard_group() const {
  const auto& mesh = options_.device_mesh();
  return mesh ? *mesh->shard_group() : *group_;
}

std::vector<std::string> FullyShardedDataParallelImpl::unit_names() const {
  std::vector<std::string> names;
  for (const auto& unit : schedule_->units()) names.push_back(unit->name());
  return names;
}

std::vector<int64_t> FullyShardedDataParallelImpl::unit_numels() const {
  std::vector<int64_t> numels;
  for (const auto& unit : schedule_->units()) numels.push_back(unit->numel());
  return numels;
}

std::vector<FullyShardedDataParallelImpl::PieceOf> FullyShardedDataParallelImpl::pieces_of() const {
  std::unordered_map<const void*, PieceOf> of;
  for (const auto& unit : schedule_->units()) {
    for (size_t i = 0; i < unit->pieces().size(); ++i) {
      of[unit->pieces()[i].unsafeGetTensorImpl()] = {
          unit->parameter_names()[i], unit->parameters()[i].sizes().vec(), unit->piece_begins()[i]};
    }
  }
  std::vector<PieceOf> result;
  for (const auto& item : named_parameters())
    result.push_back(of.at(item.value().unsafeGetTensorImpl()));
  return result;
}

torch::OrderedDict<std::string, at::Tensor> FullyShardedDataParallelImpl::full_parameters() {
  torch::OrderedDict<std::string, at::Tensor> result;
  for_each_full_parameter([&](const std::string& name, const at::Tensor& value) {
    result.insert(name, value.clone());
  });
  return result;
}

void FullyShardedDataParallelImpl::for_each_full_parameter(
    const std::function<void(const std::string& name, const at::Tensor& value)>& visit) {
  torch::NoGradGuard no_grad;
  for (const auto& unit : schedule_->units()) {
    // Under a param_dtype the gathered copies are not the masters.
    const bool masters = options_.param_dtype().has_value();
    const bool was_gathered = unit->gathered();
    std::vector<at::Tensor> values;
    if (masters) {
      values = unit->gather_masters();
    } else {
      unit->wait_gathered();
      for (const auto& p : unit->parameters()) values.push_back(p.detach());
    }
    for (size_t i = 0; i < values.size(); ++i) {
      visit(unit->parameter_names()[i], values[i]);
      for (const auto& alias : unit->aliases()[i]) visit(alias, values[i]);  // a tie's other names
    }
    if (!masters && !was_gathered) unit->reshard();
  }
}

}  // namespace ddp::parallel
