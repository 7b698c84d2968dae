#include "ddp/parallel/fully_sharded_state.hpp"

#include <algorithm>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel {

FullyShardedState::FullyShardedState(const FullyShardedDataParallel& model,
                                     torch::optim::Optimizer& optimizer)
    : model_(model.ptr()), optimizer_(optimizer), numels_(model_->unit_numels()) {
  const std::vector<at::Tensor> shards = model_->parameters();
  const auto& groups = optimizer_.param_groups();
  if (groups.size() != 1) {
    throw ConfigError(base::detail::str(
        "FullyShardedState: the optimizer has ", groups.size(),
        " param groups; give it one, holding the FullyShardedDataParallel's parameters()"));
  }
  const auto& params = groups.front().params();
  bool same = params.size() == shards.size();
  for (size_t i = 0; same && i < shards.size(); ++i) same = params[i].is_same(shards[i]);
  if (!same) {
    throw ConfigError(base::detail::str("FullyShardedState: the optimizer's ", params.size(),
                                        " parameters are not the FullyShardedDataParallel's ",
                                        shards.size(),
                                        " shards in order; make it over model->parameters()"));
  }
}

ProcessGroup& FullyShardedState::group() const { return *model_->process_group(); }

std::vector<ShardedState::Piece> FullyShardedState::pieces() const {
  const std::vector<at::Tensor> shards = model_->parameters();
  const int64_t rank = group().rank();
  std::vector<Piece> result;
  for (size_t u = 0; u < numels_.size(); ++u) {
    const int64_t size = shards[u].numel();
    const int64_t begin = std::min(rank * size, numels_[u]);
    result.push_back({u, begin, std::min(size, numels_[u] - begin)});
  }
  return result;
}

}  // namespace ddp::parallel
