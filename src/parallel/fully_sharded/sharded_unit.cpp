#include "parallel/fully_sharded/sharded_unit.hpp"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/variable.h>

#include "base/dtype_name.hpp"
#include "base/mapped_tensor.hpp"
#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/fully_sharded/sharded_placeholder.hpp"

namespace ddp::parallel::detail {
namespace {

// Note [A unit's storage]: emptying keeps the StorageImpl (and so every
// tensor that shares it, the autograd graph's saved ones included) and
// drops its bytes.
void empty_storage(const at::Tensor& tensor) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, tensor.device()));
  storage->set_nbytes(static_cast<size_t>(0));
}

}  // namespace

ShardedUnit::ShardedUnit(std::string name, std::vector<std::string> names,
                         std::vector<at::Tensor> parameters, const UnitGroups& groups,
                         GatheredBytes& gathered, BufferPool& pool, int64_t index,
                         std::optional<at::ScalarType> param_dtype, at::Tensor built_shard)
    : name_(std::move(name)),
      names_(std::move(names)),
      parameters_(std::move(parameters)),
      group_(*groups.shard),
      replicas_(groups.replicas),
      after_forward_group_(groups.after_forward),
      gathered_(gathered),
      pool_(pool),
      index_(index) {
  aliases_.resize(parameters_.size());
  if (parameters_.empty()) {
    throw ConfigError(base::detail::str("FullyShardedDataParallel: unit '", name_,
                                        "' has no parameters; leave parameter-free layers "
                                        "out of the units (they run as they are)."));
  }
  const at::Tensor& first = parameters_.front();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& p = parameters_[i];
    if (p.scalar_type() != first.scalar_type() || p.device() != first.device()) {
      throw ConfigError(base::detail::str(
          "FullyShardedDataParallel: unit '", name_, "' mixes ",
          base::detail::dtype_name(first.scalar_type()), " on ", first.device().str(), " ('",
          names_.front(), "') with ", base::detail::dtype_name(p.scalar_type()), " on ",
          p.device().str(), " ('", names_[i],
          "'); a unit's parameters are one flat buffer: give them one dtype and device."));
    }
    if (p.requires_grad() != first.requires_grad()) {
      throw ConfigError(base::detail::str(
          "FullyShardedDataParallel: unit '", name_, "' mixes trainable and frozen parameters ('",
          names_.front(), "' and '", names_[i],
          "'); make the frozen layers a unit of their own (every parameter of a unit is stepped "
          "by the optimizer as one shard)."));
    }
    numel_ += p.numel();
  }
  trainable_ = first.requires_grad();
  trainable_count_ = trainable_ ? static_cast<int>(parameters_.size()) : 0;
  const int64_t world = group_.size();
  padded_numel_ = (numel_ + world - 1) / world * world;
  const int64_t shard_numel = padded_numel_ / world;

  torch::NoGradGuard no_grad;
  at::Tensor flat;
  const bool from_built = built_shard.defined();
  if (from_built) {  // the values exist only as shards
    shard_ = std::move(built_shard);
    flat = at::empty({padded_numel_}, shard_.options());
  } else {
    flat = at::zeros({padded_numel_}, first.options().requires_grad(false));
    const auto places = views_into(flat);
    for (size_t i = 0; i < parameters_.size(); ++i) places[i].copy_(parameters_[i].detach());
    // Note [Long-lived buffers outside the heap]
    shard_ = base::detail::mapped_copy(flat.narrow(0, group_.rank() * shard_numel, shard_numel));
  }
  // Note [A unit's pieces]
  const int64_t shard_begin = group_.rank() * shard_numel;
  int64_t offset = 0;
  for (const auto& p : parameters_) {
    const int64_t begin = std::clamp(shard_begin - offset, int64_t{0}, p.numel());
    const int64_t end = std::clamp(shard_begin + shard_numel - offset, int64_t{0}, p.numel());
    const int64_t place = std::clamp(offset + begin - shard_begin, int64_t{0}, shard_numel);
    piece_begins_.push_back(begin);
    piece_offsets_.push_back(place);
    at::Tensor piece = shard_.narrow(0, place, end - begin).detach();
    piece.set_requires_grad(trainable_);
    pieces_.push_back(std::move(piece));
    offset += p.numel();
  }
  received_.assign(parameters_.size(), 0);
  had_gradient_.assign(parameters_.size(), 0);
  piece_grads_.resize(parameters_.size());
  loose_bytes_.assign(parameters_.size(), 0);
  full_ = param_dtype ? flat.to(*param_dtype) : flat;
  // The module keeps its parameters; their data are now views of full_.
  views_ = views_into(full_);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    // A placeholder (a built shard's parameter) has no accumulator to reset.
    if (from_built) {
      hold(parameters_[i], views_[i]);
    } else {
      parameters_[i].set_data(views_[i]);
    }
    if (trainable_)
      accumulators_.push_back(torch::autograd::impl::grad_accumulator(parameters_[i]));
    if (placeholders_available()) {
      placeholders_.push_back(make_placeholder(
          parameters_[i], base::detail::str("'", names_[i], "' of unit '", name_, "'"),
          PlaceholderOf::kShardedUnit));
    }
  }
  state_ = State::kGathered;
  gathered_.add(full_.numel() * full_.element_size());
  reshard();
}

ShardedUnit::~ShardedUnit() = default;

std::vector<at::Tensor> ShardedUnit::views_into(const at::Tensor& flat) const {
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (const auto& p : parameters_) {
    views.push_back(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  return views;
}

void ShardedUnit::gather_async(bool in_backward) {
  if (state_ != State::kSharded) return;
  // Note [A unit's storage]: the gather fills a buffer of its own, which
  // becomes the parameters' storage only once complete.
  staging_ = pool_.empty(padded_numel_, full_.options());
  gathered_.add(padded_numel_ * full_.element_size());
  if (in_backward && kept_slice_.defined()) {  // Note [Resharding to the node]
    gather_input_ = std::move(kept_slice_);
    gathered_.add(-gather_input_.numel() * gather_input_.element_size());
    comm::detail::CollectiveName collective("fsdp.gather", index_);
    gather_ = after_forward_group_->all_gather_async(staging_, gather_input_);
    state_ = State::kGathering;
    return;
  }
  gather_input_ = shard_.detach();
  if (gather_input_.scalar_type() != full_.scalar_type()) {
    gather_input_ = pool_.empty(shard_.numel(), full_.options()).copy_(shard_.detach());
  }
  comm::detail::CollectiveName collective("fsdp.gather", index_);
  gather_ = group_.all_gather_async(staging_, gather_input_);
  state_ = State::kGathering;
}

void ShardedUnit::wait_gathered(bool in_backward) {
  gather_async(in_backward);
  if (state_ != State::kGathering) return;
  gather_->wait();
  gather_.reset();
  gather_input_ = at::Tensor();
  c10::StorageImpl* from = staging_.storage().unsafeGetStorageImpl();
  c10::StorageImpl* to = full_.storage().unsafeGetStorageImpl();
  to->set_data_ptr_noswap(from->set_data_ptr(at::DataPtr(nullptr, full_.device())));
  to->set_nbytes(from->nbytes());
  from->set_nbytes(0);
  staging_ = at::Tensor();
  if (!placeholders_.empty()) {
    for (size_t i = 0; i < parameters_.size(); ++i) hold(parameters_[i], views_[i]);
  }
  state_ = State::kGathered;
}

void ShardedUnit::reshard(bool after_forward) {
  if (state_ == State::kGathering) wait_gathered();
  if (kept_slice_.defined() && (!after_forward || state_ == State::kGathered)) {
    gathered_.add(-kept_slice_.numel() * kept_slice_.element_size());
    kept_slice_ = at::Tensor();
  }
  if (state_ == State::kSharded) return;
  if (after_forward && after_forward_group_ != nullptr) {  // Note [Resharding to the node]
    const int64_t slice = padded_numel_ / after_forward_group_->size();
    torch::NoGradGuard no_grad;
    kept_slice_ = pool_.empty(slice, full_.options())
                      .copy_(full_.narrow(0, after_forward_group_->rank() * slice, slice));
    gathered_.add(slice * full_.element_size());
  }
  gathered_.add(-static_cast<int64_t>(full_.storage().nbytes()));
  empty_storage(full_);
  if (!placeholders_.empty()) {
    for (size_t i = 0; i < parameters_.size(); ++i) hold(parameters_[i], placeholders_[i]);
  }
  state_ = State::kSharded;
}

void ShardedUnit::cast_buffers() {
  if (full_.scalar_type() == shard_.scalar_type() || !buffer_values_.empty()) return;
  torch::NoGradGuard no_grad;
  for (auto& buffer : buffers_) {
    buffer_values_.push_back(buffer.data());
    if (buffer.is_floating_point()) buffer.set_data(buffer.data().to(full_.scalar_type()));
  }
}

void ShardedUnit::sync_buffers() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffer_values_.size(); ++i) {
    if (buffers_[i].is_floating_point()) buffer_values_[i].copy_(buffers_[i]);
  }
}

void ShardedUnit::restore_buffers() {
  if (buffer_values_.empty()) return;
  sync_buffers();
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].is_floating_point()) buffers_[i].set_data(buffer_values_[i]);
  }
  buffer_values_.clear();
}

std::vector<at::Tensor> ShardedUnit::gather_masters() const {
  torch::NoGradGuard no_grad;
  at::Tensor flat = at::empty({padded_numel_}, shard_.options().requires_grad(false));
  {
    comm::detail::CollectiveName collective("fsdp.gather", index_);
    group_.all_gather_async(flat, shard_.detach()).wait();
  }
  return views_into(flat);
}

}  // namespace ddp::parallel::detail
