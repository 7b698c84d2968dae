#include "ddp/parallel/distributed_data_parallel.hpp"

#include <torch/torch.h>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/bucketing/gradient_buckets.hpp"
#include "parallel/distributed_data_parallel/reducer.hpp"
#include "parallel/rank_agreement.hpp"

namespace ddp::parallel {
namespace {

void validate(const DistributedDataParallelOptions& options,
              const std::shared_ptr<ProcessGroup>& group) {
  if (!group) {
    throw ConfigError(
        "DistributedDataParallel: the process group is null; pass the group "
        "returned by ddp::init().");
  }
  detail::cap_bytes_of(options.bucket_cap_mb(), "DistributedDataParallel", "bucket_cap_mb");
  detail::cap_bytes_of(options.first_bucket_cap_mb(), "DistributedDataParallel",
                       "first_bucket_cap_mb");
}

// The factor on every reduced bucket in a Join round (Note [Joining]):
// world / contributing ranks when averaging over contributors, else 1.
double join_scale(const Join& join, const JoinRound& round) {
  if (join.options().divide_by_initial_world_size()) return 1.0;
  return static_cast<double>(round.world) / round.active;
}

}  // namespace

DistributedDataParallelImpl::DistributedDataParallelImpl(WrappedModule module,
                                                         DistributedDataParallelOptions options,
                                                         std::shared_ptr<ProcessGroup> group)
    : module_(std::move(module)), group_(std::move(group)), options_(std::move(options)) {
  validate(options_, group_);
  if (!module_.ptr()) {
    throw ConfigError(
        "DistributedDataParallel: the module is empty (an empty AnyModule); pass the model to "
        "wrap.");
  }
  register_module("module", module_.ptr());

  std::vector<std::string> names, buffer_names;
  std::vector<at::Tensor> parameters, buffers, trainable;
  std::vector<std::string> trainable_names;
  for (const auto& item : module_.ptr()->named_parameters()) {
    names.push_back(item.key());
    parameters.push_back(item.value());
    if (item.value().requires_grad()) {
      trainable_names.push_back(item.key());
      trainable.push_back(item.value());
    }
  }
  for (const auto& item : module_.ptr()->named_buffers()) {
    buffer_names.push_back(item.key());
    buffers.push_back(item.value());
  }
  for (const auto& p : parameters) {
    if (p.device() != parameters.front().device()) {
      throw ConfigError(
          "DistributedDataParallel: the module's parameters are on several "
          "devices (" +
          parameters.front().device().str() + " and " + p.device().str() +
          "); move the whole module to one device first, "
          "one device per process.");
    }
  }

  constexpr const char* kWho = "DistributedDataParallel";
  const std::string same_model = "Every rank must build the same model before wrapping it.";
  detail::verify_same_across_ranks(*group_, detail::describe_tensors(names, parameters), kWho,
                                   "parameters", same_model);
  detail::verify_same_across_ranks(*group_, detail::describe_tensors(buffer_names, buffers), kWho,
                                   "buffers", same_model);
  {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> state = parameters;
    state.insert(state.end(), buffers.begin(), buffers.end());
    broadcast_tensors(*group_, state, 0);
  }
  reducer_ = std::make_shared<detail::Reducer>(std::move(trainable), std::move(trainable_names),
                                               group_, options_);
  reducer_->attach_hooks();
  // The same collectives in every iteration (Note [Naming a mismatch on
  // every rank]): one all-gather at construction.
  detail::verify_same_across_ranks(
      *group_, reducer_->describe_layout(), kWho, "DDP options and gradient buckets",
      "Give every rank the same DistributedDataParallelOptions (bucket_cap_mb, "
      "first_bucket_cap_mb, find_unused_parameters, static_graph, broadcast_buffers).");
}

DistributedDataParallelImpl::~DistributedDataParallelImpl() = default;

void DistributedDataParallelImpl::prepare_forward() {
  int source = 0;
  if (Join* join = active_join()) {
    // Note [Joining]: only training forwards are iterations.
    if (!torch::GradMode::is_enabled() || !is_training()) return;
    const JoinRound round = join->notify(*this, reducer_->require_sync());
    source = round.source;
    reducer_->set_join_round(source, join_scale(*join, round));
  }
  if (options_.broadcast_buffers() && group_->size() > 1) {
    try {
      broadcast_buffers(source);
    } catch (const TimeoutError& e) {
      reducer_->explain_failure(e, "the buffer broadcast");
    } catch (const CollectiveError& e) {
      reducer_->explain_failure(e, "the buffer broadcast");
    }
  }
}

void DistributedDataParallelImpl::finish_forward(std::vector<at::Tensor>& outputs) {
  reducer_->watch_outputs(outputs);
}

void DistributedDataParallelImpl::broadcast_buffers(int source) {
  std::vector<at::Tensor> buffers = module_.ptr()->buffers();
  if (buffers.empty()) return;
  torch::NoGradGuard no_grad;
  broadcast_tensors(*group_, buffers, source);
}

void DistributedDataParallelImpl::join_shadow(const JoinRound& round) {
  // The same scale as on the ranks still training: the averaged gradients
  // the shadow leaves in .grad are theirs (a ZeroRedundancyOptimizer joined
  // after DDP steps this rank's shard with them).
  reducer_->set_join_round(round.source, join_scale(*active_join(), round));
  if (options_.broadcast_buffers() && group_->size() > 1) broadcast_buffers(round.source);
  if (round.sync) reducer_->shadow_iteration();
}

void DistributedDataParallelImpl::join_finish(int source) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> state = module_.ptr()->parameters();
  for (const auto& buffer : module_.ptr()->buffers()) state.push_back(buffer);
  broadcast_tensors(*group_, state, source);
}

ReducerStats DistributedDataParallelImpl::stats() const { return reducer_->stats(); }

DistributedDataParallelImpl::NoSyncGuard::NoSyncGuard(DistributedDataParallelImpl& owner)
    : owner_(owner), previous_(owner.reducer_->require_sync()) {
  owner_.reducer_->set_require_sync(false);
}

DistributedDataParallelImpl::NoSyncGuard::~NoSyncGuard() {
  owner_.reducer_->set_require_sync(previous_);
}

}  // namespace ddp::parallel
