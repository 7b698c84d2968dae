#include "parallel/fully_sharded/sharded_unit.hpp"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/variable.h>

#include "base/dtype_name.hpp"
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
    shard_ = flat.narrow(0, group_.rank() * shard_numel, shard_numel).clone();
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

void ShardedUnit::prepare_gradients() {
  if (gradients_prepared_ || !trainable_) return;
  gradients_prepared_ = true;
  // Gradients accumulated under no_sync() are kept and added to.
  if (!full_grad_.defined()) {
    // Note [A gradient is moved in, not added]: no zeros.
    full_grad_ = pool_.empty(padded_numel_, full_.options());
    grad_views_ = views_into(full_grad_);
    written_.assign(parameters_.size(), 0);
    gathered_.add(full_grad_.numel() * full_grad_.element_size());
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor& grad = parameters_[i].mutable_grad();
    if (written_[i]) {  // kept from a backward under no_sync()
      grad = grad_views_[i];
    } else if (grad.defined()) {
      // A gradient accumulated before (a unit whose outputs could not be
      // hooked) is kept.
      grad_views_[i].copy_(grad);
      written_[i] = 1;
      grad = grad_views_[i];
    }
  }
  forget_loose_gradients();
}

bool ShardedUnit::gradient_arrived(size_t index) {
  at::Tensor& grad = parameters_.at(index).mutable_grad();
  if (gradients_prepared_ && grad.defined()) {  // Note [A gradient is moved in, not added]
    at::Tensor& place = grad_views_.at(index);
    // AccumulateGrad added into the view in place, or gave .grad a tensor
    // of its own: the new gradient, or (accumulating out of place) the
    // view's content plus it.
    if (grad.unsafeGetTensorImpl() != place.unsafeGetTensorImpl()) {
      torch::NoGradGuard no_grad;
      place.copy_(grad);
      grad = place;
    }
    written_[index] = 1;
  }
  if (!gradients_prepared_ && loose_bytes_[index] == 0 && grad.defined()) {
    loose_bytes_[index] = grad.numel() * grad.element_size();
    gathered_.add(loose_bytes_[index]);
  }
  received_.at(index) = 1;
  return ++arrived_ == trainable_count_;
}

void ShardedUnit::drop_unreceived_gradients(const int32_t* received_anywhere) {
  // A unit not reduced in this backward (no rank ran it) added nothing.
  for (size_t i = 0; reduced_ && i < pieces_.size(); ++i) {
    if (received_anywhere[i] == 0 && !had_gradient_[i]) pieces_[i].mutable_grad() = at::Tensor();
  }
  std::fill(received_.begin(), received_.end(), 0);
}

void ShardedUnit::fill_unwritten() {
  if (!full_grad_.defined()) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < grad_views_.size(); ++i) {
    if (!written_[i]) {
      grad_views_[i].zero_();
      written_[i] = 1;
    }
  }
  if (padded_numel_ > numel_) full_grad_.narrow(0, numel_, padded_numel_ - numel_).zero_();
}

void ShardedUnit::reduce_async() {
  if (!trainable_ || reduced()) return;
  prepare_gradients();  // a unit no gradient reached reduces zeros, as every rank must
  fill_unwritten();
  reduced_grad_ = pool_.empty(padded_numel_ / group_.size(), shard_.options());
  reduce_input_ = full_grad_;
  if (reduce_input_.scalar_type() != shard_.scalar_type()) {
    reduce_input_ = pool_.empty(padded_numel_, shard_.options()).copy_(full_grad_);
  }
  if (unsynced_grad_.defined()) {  // what no_sync() backward passes accumulated
    reduce_input_.add_(unsynced_grad_);
    gathered_.add(-unsynced_grad_.numel() * unsynced_grad_.element_size());
    unsynced_grad_ = at::Tensor();
  }
  comm::detail::CollectiveName collective("fsdp.reduce", index_);
  reduction_ = group_.reduce_scatter_async(reduced_grad_, reduce_input_);
}

void ShardedUnit::finish_scatter() {
  if (!reduction_) return;
  reduction_->wait();
  reduction_.reset();
  reduced_ = true;
  reduce_input_ = at::Tensor();
  for (auto& p : parameters_) p.mutable_grad() = at::Tensor();
  gathered_.add(-full_grad_.numel() * full_grad_.element_size());
  full_grad_ = at::Tensor();
  grad_views_.clear();
  if (replicas_ != nullptr && replicas_->size() > 1) {  // Note [Hybrid sharding]
    comm::detail::CollectiveName collective("fsdp.replicate", index_);
    replication_ = replicas_->all_reduce_async(reduced_grad_);
  }
}

void ShardedUnit::finish_reduction() {
  finish_scatter();
  if (!reduced_grad_.defined()) return;
  int64_t ranks = group_.size();
  if (replication_) {
    replication_->wait();
    replication_.reset();
    ranks *= replicas_->size();
  }
  torch::NoGradGuard no_grad;
  reduced_grad_.div_(ranks);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const at::Tensor part = reduced_grad_.narrow(0, piece_offsets_[i], pieces_[i].numel());
    at::Tensor& grad = pieces_[i].mutable_grad();
    had_gradient_[i] = grad.defined();
    if (grad.defined()) {
      grad.add_(part);
    } else {
      grad = part.clone();
    }
  }
  reduced_grad_ = at::Tensor();
}

void ShardedUnit::accumulate_unsynced() {
  if (!full_grad_.defined() || full_grad_.scalar_type() == shard_.scalar_type()) return;
  // Note [A unit's storage]: the parameters' .grad must have their dtype, so
  // each backward accumulates into a full gradient in it, moved here after.
  fill_unwritten();
  torch::NoGradGuard no_grad;
  if (unsynced_grad_.defined()) {
    unsynced_grad_.add_(full_grad_.to(shard_.scalar_type()));
  } else {
    unsynced_grad_ = full_grad_.to(shard_.scalar_type());
    gathered_.add(unsynced_grad_.numel() * unsynced_grad_.element_size());
  }
  gathered_.add(-full_grad_.numel() * full_grad_.element_size());
  full_grad_ = at::Tensor();
  grad_views_.clear();
  for (auto& p : parameters_) p.mutable_grad() = at::Tensor();
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

void ShardedUnit::forget_loose_gradients() {
  for (int64_t& bytes : loose_bytes_) {
    gathered_.add(-bytes);
    bytes = 0;
  }
}

void ShardedUnit::abandon_gradients() {
  // Issued on every rank: let them end, drop their result.
  if (reduction_) reduction_->wait();
  reduction_.reset();
  if (replication_) replication_->wait();
  replication_.reset();
  reduced_grad_ = at::Tensor();
  reduce_input_ = at::Tensor();
  if (full_grad_.defined()) {
    gathered_.add(-full_grad_.numel() * full_grad_.element_size());
    full_grad_ = at::Tensor();
    grad_views_.clear();
  }
  for (auto& p : parameters_) p.mutable_grad() = at::Tensor();
  forget_loose_gradients();
  std::fill(received_.begin(), received_.end(), 0);
  end_backward();
}

void ShardedUnit::end_backward() {
  gradients_prepared_ = false;
  reduced_ = false;
  arrived_ = 0;
}

}  // namespace ddp::parallel::detail
