#include "multiprocess/disagreement_checks.hpp"

#include <torch/torch.h>

#include <iostream>
#include <stdexcept>

#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "multiprocess/branch_net.hpp"

namespace ddp::testing {
namespace {

// A ZeroRedundancyOptimizer over a 8-W-2 MLP (W = 16, or 12 on rank 1 in
// "zero-shapes"), trained 3 steps on the bare model.
void run_zero_disagreement(const std::shared_ptr<ProcessGroup>& group, const std::string& phase) {
  const bool culprit = group->rank() == 1;
  const int64_t width = phase == "zero-shapes" && culprit ? 12 : 16;
  ZeroRedundancyOptimizerOptions options;
  if (phase == "zero-bucket-caps" && culprit) options.bucket_cap_mb(0.0001);
  if (phase == "zero-stages" && culprit) options.stage(2);
  torch::manual_seed(7);
  torch::nn::Sequential net(torch::nn::Linear(8, width), torch::nn::Tanh(),
                            torch::nn::Linear(width, 2));
  ZeroRedundancyOptimizer optimizer(
      net->parameters(), zero_optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1)), options,
      group);
  for (int i = 1; i <= 3; ++i) {
    optimizer.zero_grad();
    torch::mse_loss(net->forward(torch::randn({4, 8})), torch::randn({4, 2})).backward();
    optimizer.step();
  }
  std::cout << "rank " << group->rank() << ": finished" << std::endl;
}

}  // namespace

void run_disagreement(const std::shared_ptr<ProcessGroup>& group, const std::string& phase) {
  if (phase.rfind("zero-", 0) == 0) return run_zero_disagreement(group, phase);
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
