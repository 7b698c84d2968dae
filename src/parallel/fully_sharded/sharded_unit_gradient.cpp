// ShardedUnit's gradient: its full buffer, the gradients moved into it,
// its reduction and the pieces' .grad (Note [A gradient is moved in, not
// added], Note [Hybrid sharding] in sharded_unit.hpp).

#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#include "base/mapped_tensor.hpp"
#include "comm/collective_name.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/fully_sharded/sharded_unit.hpp"

namespace ddp::parallel::detail {

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
      grad = fresh_grad(i).copy_(part);
    }
  }
  reduced_grad_ = at::Tensor();
}

at::Tensor ShardedUnit::fresh_grad(size_t piece) {
  // Note [Long-lived buffers outside the heap]: each piece's gradient is a
  // mapping of its own, taken again in the next step unless a tensor
  // outside this unit still holds it (a .grad the caller kept). Not views
  // of one buffer: LibTorch 1.13's zero_grad() detaches each .grad in
  // place, which a view refuses.
  at::Tensor& kept = piece_grads_[piece];
  if (!kept.defined() || kept.use_count() > 1 || kept.storage().use_count() > 1) {
    kept =
        base::detail::mapped_empty(pieces_[piece].numel(), shard_.options().requires_grad(false));
  }
  return kept;
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
