#include "multiprocess/collective_memory_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "common/named_checks.hpp"
#include "common/peak_rss.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::testing {

int check_collective_memory(ProcessGroup& group) {
  namespace check = collective_memory_check;
  constexpr int64_t kMiB = 1 << 20;
  constexpr int64_t kChunk = 16 * kMiB / 4;  // floats
  constexpr int64_t kSlack = 2 * kMiB;
  const int world = group.size();
  const int rank = group.rank();
  NamedChecks checks;
  auto mib = [](int64_t bytes) { return std::to_string(bytes / kMiB) + " MiB"; };

  {
    // Touched before measuring, so that only what the collective adds counts.
    at::Tensor input = at::full({kChunk}, static_cast<float>(rank));
    at::Tensor output = at::zeros({world * kChunk});
    const int64_t grew = peak_growth([&] { group.all_gather(output, input); });
    const bool right = torch::equal(output.view({world, kChunk}).select(1, kChunk - 1),
                                    at::arange(world, at::kFloat));
    checks.check(check::kAllGather, grew <= kSlack && right,
                 "the peak RSS grew by " + mib(grew) + ", bound " + mib(kSlack) +
                     (right ? "" : "; the gathered values are wrong"));
  }
  {
    at::Tensor input = at::arange(world * kChunk, at::kFloat).remainder(1000).add_(rank);
    at::Tensor output = at::zeros({kChunk});
    // One scratch chunk from 3 ranks on (Note [The ring's scratch outside the heap]).
    const int64_t bound = (world > 2 ? 1 : 0) * kChunk * 4 + kSlack;
    const int64_t grew = peak_growth([&] { group.reduce_scatter(output, input, ReduceOp::kSum); });
    const at::Tensor expected = at::arange(rank * kChunk, (rank + 1) * kChunk, at::kFloat)
                                    .remainder(1000)
                                    .mul_(world)
                                    .add_(world * (world - 1) / 2);
    const bool right = torch::equal(output, expected);
    checks.check(check::kReduceScatter, grew <= bound && right,
                 "the peak RSS grew by " + mib(grew) + ", bound " + mib(bound) +
                     (right ? "" : "; the reduced values are wrong"));
  }
  return checks.failed();
}

}  // namespace ddp::testing
