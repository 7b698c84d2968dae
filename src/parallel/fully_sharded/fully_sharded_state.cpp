#include "ddp/parallel/fully_sharded_state.hpp"

#include <unordered_map>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel {

FullyShardedState::FullyShardedState(const FullyShardedDataParallel& model,
                                     torch::optim::Optimizer& optimizer)
    : model_(model.ptr()), optimizer_(optimizer) {
  // Note [A unit's pieces] in src/parallel/fully_sharded/sharded_unit.hpp.
  const auto of = model_->pieces_of();
  const auto named = model_->named_parameters();
  std::unordered_map<const void*, size_t> index;
  for (size_t p = 0; p < named.size(); ++p) {
    index[named[p].value().unsafeGetTensorImpl()] = p;
    names_.push_back(of[p].name);
    shapes_.push_back(of[p].shape);
    int64_t numel = 1;
    for (int64_t d : of[p].shape) numel *= d;
    numels_.push_back(numel);
  }
  std::vector<char> seen(named.size(), 0);
  for (const auto& group : optimizer_.param_groups()) {
    for (const auto& param : group.params()) {
      auto found = index.find(param.unsafeGetTensorImpl());
      if (found == index.end()) {
        throw ConfigError(base::detail::str(
            "FullyShardedState: the optimizer steps a tensor of shape ", param.sizes(),
            " that is none of the FullyShardedDataParallel's parameters(); make it over "
            "model->parameters() (or model->named_parameters(), in groups)"));
      }
      if (seen[found->second]++) {
        throw ConfigError(base::detail::str("FullyShardedState: the optimizer steps '",
                                            names_[found->second],
                                            "' twice; put each parameter in one param group"));
      }
      pieces_.push_back({found->second, of[found->second].begin, param.numel()});
    }
  }
  // Note [Pieces outside the optimizer]: frozen ones, left out.
  for (size_t p = 0; p < named.size(); ++p) {
    if (seen[p]) continue;
    pieces_.push_back({p, of[p].begin, named[p].value().numel()});
    unstepped_.push_back(named[p].value());
  }
}

ProcessGroup& FullyShardedState::group() const { return *model_->process_group(); }

int FullyShardedState::shard_size() const { return model_->shard_group().size(); }

}  // namespace ddp::parallel
