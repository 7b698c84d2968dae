// Ranks that run different units without find_unused_units (Note [The
// order the units run in]): named errors, never an abort. A scenario of its
// own: the rank left behind learns of the other's leaving from its
// collective.

#include <torch/torch.h>

#include <string>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/fsdp_models.hpp"
#include "multiprocess/fsdp_paths_checks.hpp"

namespace ddp::testing {

int check_fsdp_skipped_unit(const std::shared_ptr<ProcessGroup>& group) {
  NamedChecks checks;
  const int rank = group->rank();
  auto step = [&](FullyShardedDataParallel& model, fsdp_models::Branchy& local, bool take) {
    local->take_branch = take;
    torch::mse_loss(model->forward(torch::ones({3, 7})), torch::zeros({3, 5})).backward();
  };
  {
    torch::manual_seed(28);
    fsdp_models::Branchy local;
    FullyShardedDataParallel model(
        local, FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<torch::nn::LinearImpl>()),
        group);
    std::string error;
    try {
      step(model, local, rank == 0);
    } catch (const ConfigError& e) {
      error = e.what();
    }
    checks.check(fsdp_paths_check::kFirstForwardDiffers,
                 error.find("some run 'branch' and some 'head'") != std::string::npos ||
                     error.find("some run 'head' and some 'branch'") != std::string::npos,
                 error.empty() ? "no ConfigError" : error);
  }
  torch::manual_seed(29);
  fsdp_models::Branchy local;
  FullyShardedDataParallel model(
      local, FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<torch::nn::LinearImpl>()),
      group);
  step(model, local, true);
  std::string error;
  try {
    step(model, local, rank == 0);
  } catch (const Error& e) {
    error = e.what();
  }
  const bool named = rank == 0 ? !error.empty()
                               : error.find("without running 'branch'") != std::string::npos &&
                                     error.find("find_unused_units(true)") != std::string::npos;
  checks.check(fsdp_paths_check::kLaterStepSkip, named, error.empty() ? "no error" : error);
  return checks.failed();
}

}  // namespace ddp::testing
