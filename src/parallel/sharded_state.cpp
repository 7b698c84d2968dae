#include "ddp/parallel/sharded_state.hpp"

#include "ddp/comm/process_group.hpp"

namespace ddp::parallel {

int ShardedState::shard_size() const { return group().size(); }

bool ShardedState::in_first_row() const { return group().rank() < shard_size(); }

}  // namespace ddp::parallel
