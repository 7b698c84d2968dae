#include "multiprocess/disagreement_checks.hpp"

#include <torch/torch.h>

#include <iostream>
#include <stdexcept>

#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "multiprocess/branch_net.hpp"

namespace ddp::testing {

void run_disagreement(const std::shared_ptr<ProcessGroup>& group, const std::string& phase) {
  const int rank = group->rank();
  DistributedDataParallelOptions options;
  if (phase == "bucket-caps" && rank == 1)
    options.bucket_cap_mb(0.0001).first_bucket_cap_mb(0.0001);
  if (phase == "static-graph-changes-on-rank-1") options.static_graph(true);
  torch::manual_seed(7);
  DistributedDataParallel model(BranchNet(), options, group);

  int iterations = 3;
  if (phase == "fewer-iterations-on-rank-" + std::to_string(rank)) iterations = 2;
  for (int i = 1; i <= iterations; ++i) {
    const bool use_branch = !(i == 3 && (phase == "unused-on-rank-" + std::to_string(rank) ||
                                         (phase == "static-graph-changes-on-rank-1" && rank == 1)));
    at::Tensor loss =
        torch::mse_loss(model->forward(torch::randn({4, 8}), use_branch), torch::randn({4, 2}));
    if (i == 2 && rank == 1 && phase == "skipped-backward") continue;
    loss.backward();
  }
  std::cout << "rank " << rank << ": finished" << std::endl;
}

}  // namespace ddp::testing
