// hvd_test_worker: one rank of a Horovod-API test, started by
// hvd_test.cpp through the multi-process harness.
//
//   hvd_test_worker train [--fusion BYTES] [--passes K] [--fp16] [--sum]
//                             [--average-aggregated]
//       DistributedOptimizer training against one process training on the
//       concatenated batch (computed here, in this process)
//   hvd_test_worker broadcast-state
//       broadcast_parameters / broadcast_optimizer_state make every rank's
//       model and optimizer equal to rank 0's (recomputed here) for SGD,
//       Adam, AdamW, RMSprop and Adagrad, though ranks start different
//   hvd_test_worker api        rank(), size(), local_rank(), local_size()
//   hvd_test_worker mismatch   rank 1 has another optimizer type
//
//   hvd_test_worker join [--fusion BYTES] [--by-contributors]
//       uneven inputs under ddp::Join
// Every scenario takes --backend B (default gloo) for the backend underneath.
//
// Prints each check by name (tests/common/named_checks.hpp; the names are
// hvd_checks.hpp's); exit codes and errors as tests/common/worker_main.hpp
// says.

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "common/relative_error.hpp"
#include "common/worker_main.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/hvd.hpp"
#include "ddp/parallel/join.hpp"
#include "hvd/hvd_checks.hpp"
#include "snapshot/optimizer_state.hpp"

namespace {

namespace hvd = ddp::hvd;

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(6, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 16))),
        fc3(register_module("fc3", torch::nn::Linear(16, 3))) {}
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

using ddp::testing::check_name;
using ddp::testing::NamedChecks;
using ddp::testing::worst_relative_error;
namespace check = ddp::testing::hvd_check;

// The exit code of this rank's `checks`.
int exit_code(const NamedChecks& checks) {
  return ddp::testing::checks_exit_code(hvd::rank(), checks.failed());
}

bool has_flag(const std::vector<std::string>& args, const std::string& flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}

int64_t value_of(const std::vector<std::string>& args, const std::string& flag, int64_t fallback) {
  auto it = std::find(args.begin(), args.end(), flag);
  return it != args.end() && it + 1 != args.end() ? std::stoll(*(it + 1)) : fallback;
}

// Step s's data for the whole job: world * passes chunks of kRows rows;
// rank r's pass p trains on chunk r * passes + p.
constexpr int64_t kRows = 4;
std::pair<torch::Tensor, torch::Tensor> step_data(int step, int64_t chunks) {
  torch::manual_seed(500 + step);
  return {torch::randn({chunks * kRows, 6}), torch::randn({chunks * kRows, 3})};
}

int train(const std::vector<std::string>& args) {
  const int world = hvd::size(), rank = hvd::rank();
  const int64_t passes = value_of(args, "--passes", 1);
  const bool fp16 = has_flag(args, "--fp16"), sum = has_flag(args, "--sum");
  const bool average_aggregated = has_flag(args, "--average-aggregated");
  auto options = hvd::DistributedOptimizerOptions()
                     .fusion_threshold_bytes(ddp::testing::fusion_threshold_of(args))
                     .backward_passes_per_step(passes)
                     .average_aggregated_gradients(average_aggregated)
                     .compression(fp16 ? hvd::Compression::kFp16 : hvd::Compression::kNone)
                     .op(sum ? ddp::ReduceOp::kSum : ddp::ReduceOp::kAverage);
  torch::manual_seed(7);
  Mlp model;
  torch::manual_seed(7);
  Mlp reference;
  hvd::DistributedOptimizer optimizer(
      torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)),
      options);
  torch::optim::SGD reference_optimizer(reference->parameters(),
                                        torch::optim::SGDOptions(0.05).momentum(0.9));
  // The reduced gradient is factor x the gradient of the mean loss over the
  // whole batch: x world for a sum, x passes for accumulated sums.
  const double factor = (sum ? world : 1) * (average_aggregated ? 1 : passes);
  constexpr int kSteps = check::kTrainingSteps;
  NamedChecks checks;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = step_data(step, world * passes);
    optimizer.zero_grad();
    for (int64_t p = 0; p < passes; ++p) {
      const int64_t chunk = rank * passes + p;
      torch::mse_loss(model->forward(x.narrow(0, chunk * kRows, kRows)),
                      y.narrow(0, chunk * kRows, kRows))
          .backward();
    }
    optimizer.step();
    reference_optimizer.zero_grad();
    (torch::mse_loss(reference->forward(x), y) * factor).backward();
    reference_optimizer.step();
  }
  const double tolerance = fp16 ? 2e-3 : 1e-5;
  const double error = worst_relative_error(model->parameters(), reference->parameters());
  checks.check(check::kParameters, error <= tolerance,
               "max relative error " + std::to_string(error) + " > " + std::to_string(tolerance));
  const auto stats = optimizer.stats();
  const int64_t threshold = options.fusion_threshold_bytes();
  const int64_t element = fp16 ? 2 : 4;
  int64_t total = 0;
  for (auto bytes : stats.buffer_bytes) total += bytes;
  const int64_t expected_total = (6 * 16 + 16 + 16 * 16 + 16 + 16 * 3 + 3) * element;
  checks.check(check::kEveryGradientOnce, total == expected_total,
               std::to_string(total) + " bytes, expected " + std::to_string(expected_total) + " (" +
                   std::to_string(element) + " bytes per element)");
  // Where the threshold fixes it: one buffer per gradient, or one for all.
  const size_t expected_buffers = check::fixed_buffer_count(threshold);
  if (expected_buffers) {
    checks.check(check::kBufferCount, stats.buffer_bytes.size() == expected_buffers,
                 std::to_string(stats.buffer_bytes.size()) + " fusion buffers, expected " +
                     std::to_string(expected_buffers));
  }
  std::string too_large;
  for (auto bytes : stats.buffer_bytes) {
    if (threshold == 0 || bytes <= std::max<int64_t>(threshold, 16 * 16 * element)) continue;
    if (too_large.empty()) {
      too_large = "a buffer of " + std::to_string(bytes) + " bytes exceeds the threshold " +
                  std::to_string(threshold) + " without being a single large gradient";
    }
  }
  checks.check(check::kWithinThreshold, too_large.empty(), too_large);
  checks.check(check::kStartedDuringBackward,
               stats.launched_during_backward == static_cast<int64_t>(stats.buffer_bytes.size()),
               std::to_string(stats.launched_during_backward) + " of " +
                   std::to_string(stats.buffer_bytes.size()) + " buffers");
  checks.check(check::kOneReductionPerStep, stats.synchronizations == kSteps,
               std::to_string(stats.synchronizations) + " reductions in " + std::to_string(kSteps) +
                   " steps");
  std::cout << "rank " << rank << ": " << stats.buffer_bytes.size()
            << " buffers, max relative error " << error << "\n";
  return exit_code(checks);
}

// Each rank's own, different starting point: seeded model, options and
// history. Rank 0 takes three steps, rank 1 none (no state at all), the
// others one step on other data.
template <typename Optimizer, typename Options>
struct Trainee {
  Mlp model;
  Optimizer optimizer;
  Trainee(int as_rank, Options options)
      : model((torch::manual_seed(40 + as_rank), Mlp())), optimizer(model->parameters(), options) {
    const int steps = as_rank == 0 ? 3 : as_rank == 1 ? 0 : 1;
    for (int step = 0; step < steps; ++step) {
      torch::manual_seed(900 + 10 * as_rank + step);
      optimizer.zero_grad();
      model->forward(torch::randn({5, 6})).pow(2).mean().backward();
      optimizer.step();
    }
  }
  void one_more_step() {
    torch::manual_seed(12345);
    optimizer.zero_grad();
    model->forward(torch::randn({5, 6})).pow(2).mean().backward();
    optimizer.step();
  }
};

template <typename Optimizer, typename Options>
void check_broadcast_state(NamedChecks& checks, const std::string& name,
                           const std::function<Options(int)>& options_for) {
  const int rank = hvd::rank();
  Trainee<Optimizer, Options> mine(rank, options_for(rank));
  Trainee<Optimizer, Options> rank0(0, options_for(0));  // rank 0's, recomputed here
  hvd::broadcast_parameters(*mine.model, 0);
  hvd::broadcast_optimizer_state(mine.optimizer, 0);

  ddp::snapshot::detail::TensorMap got_tensors, expected_tensors;
  auto got = ddp::snapshot::detail::export_optimizer(mine.optimizer, got_tensors);
  auto expected = ddp::snapshot::detail::export_optimizer(rank0.optimizer, expected_tensors);
  checks.check(check_name(name, check::kOptionsAndSteps), got == expected,
               got.dump() + " vs " + expected.dump());
  bool same = got_tensors.size() == expected_tensors.size() && !expected_tensors.empty();
  for (const auto& [key, tensor] : expected_tensors) {
    same = same && got_tensors.count(key) && torch::equal(got_tensors.at(key), tensor);
  }
  checks.check(check_name(name, check::kStateTensors), same,
               std::to_string(got_tensors.size()) + " tensors, rank 0 has " +
                   std::to_string(expected_tensors.size()) + "; they differ or there are none");
  bool params = true;
  for (size_t i = 0; i < rank0.model->parameters().size(); ++i) {
    params = params && torch::equal(mine.model->parameters()[i], rank0.model->parameters()[i]);
  }
  checks.check(check_name(name, check::kParametersEqual), params,
               "max relative error " + std::to_string(worst_relative_error(
                                           mine.model->parameters(), rank0.model->parameters())));
  mine.one_more_step();
  rank0.one_more_step();
  const double next_error =
      worst_relative_error(mine.model->parameters(), rank0.model->parameters());
  checks.check(check_name(name, check::kNextStep), next_error == 0,
               "max relative error " + std::to_string(next_error));
}

int broadcast_state() {
  namespace optim = torch::optim;
  NamedChecks checks;
  check_broadcast_state<optim::SGD, optim::SGDOptions>(checks, check::kSgd, [](int r) {
    return optim::SGDOptions(0.01 * (r + 1))
        .momentum(0.5 + 0.1 * r)
        .weight_decay(1e-3 * r)
        .nesterov(r == 0);
  });
  check_broadcast_state<optim::Adam, optim::AdamOptions>(checks, check::kAdam, [](int r) {
    return optim::AdamOptions(1e-3 * (r + 1))
        .betas(std::make_tuple(0.9 - 0.05 * r, 0.999 - 0.01 * r))
        .weight_decay(1e-2 * r)
        .amsgrad(r == 0);
  });
  check_broadcast_state<optim::AdamW, optim::AdamWOptions>(checks, check::kAdamW, [](int r) {
    return optim::AdamWOptions(2e-3 * (r + 1)).weight_decay(0.05 * (r + 1)).eps(1e-8 * (r + 1));
  });
  check_broadcast_state<optim::RMSprop, optim::RMSpropOptions>(checks, check::kRmsprop, [](int r) {
    return optim::RMSpropOptions(1e-3 * (r + 1))
        .alpha(0.9 + 0.01 * r)
        .momentum(0.1 * (r + 1))
        .centered(r == 0);
  });
  check_broadcast_state<optim::Adagrad, optim::AdagradOptions>(checks, check::kAdagrad, [](int r) {
    return optim::AdagradOptions(0.05 * (r + 1))
        .lr_decay(1e-3 * r)
        .initial_accumulator_value(0.1 * r);
  });
  return exit_code(checks);
}

int api() {
  NamedChecks checks;
  for (const auto& query : check::api_queries()) {
    const int got = query.get();
    const char* value = std::getenv(query.variable.c_str());
    checks.check(
        check::query_matches(query), value && got == std::stoi(value),
        "got " + std::to_string(got) + ", " + query.variable + "=" + (value ? value : "(unset)"));
  }
  checks.check(check::kInitAgain, hvd::init() == hvd::process_group(), "another group");
  torch::Tensor t = torch::full({3}, static_cast<double>(hvd::rank()));
  hvd::process_group()->all_reduce(t, ddp::ReduceOp::kSum);
  const int world = hvd::size();
  checks.check(check::kGroupWorks, t[0].item<double>() == world * (world - 1) / 2.0,
               "sum of ranks " + std::to_string(t[0].item<double>()) + ", expected " +
                   std::to_string(world * (world - 1) / 2.0));
  return exit_code(checks);
}

int mismatch() {
  Mlp model;
  if (hvd::rank() == 1) {
    torch::optim::SGD sgd(model->parameters(), 0.1);
    hvd::broadcast_optimizer_state(sgd, 0);
  } else {
    torch::optim::Adam adam(model->parameters(), 0.1);
    hvd::broadcast_optimizer_state(adam, 0);
  }
  std::cout << "rank " << hvd::rank() << ": broadcast_optimizer_state did not fail\n";
  return 1;
}

// Uneven inputs under ddp::Join: rank r runs batches[r] steps (3, 5, 8),
// fused (--fusion 0: one all-reduce per gradient) or not; the reference
// applies at each step the sum of the gradients of the ranks that had a
// batch, divided by the world size (kAverage), or by their number with
// --by-contributors.
int join(const std::vector<std::string>& args) {
  const int world = hvd::size(), rank = hvd::rank();
  const std::vector<int> batches = {3, 5, 8};
  const bool by_contributors = has_flag(args, "--by-contributors");
  torch::manual_seed(9);
  Mlp model;
  torch::manual_seed(9);
  Mlp reference;
  hvd::DistributedOptimizer optimizer(torch::optim::SGD(model->parameters(), 0.05),
                                      hvd::DistributedOptimizerOptions().fusion_threshold_bytes(
                                          ddp::testing::fusion_threshold_of(args)));
  torch::optim::SGD reference_optimizer(reference->parameters(), 0.05);
  int source = -1;
  {
    ddp::Join join({&optimizer}, ddp::JoinOptions().divide_by_initial_world_size(!by_contributors));
    for (int step = 0; step < batches[rank]; ++step) {
      auto [x, y] = step_data(step, world);
      optimizer.zero_grad();
      torch::mse_loss(model->forward(x.narrow(0, rank * kRows, kRows)),
                      y.narrow(0, rank * kRows, kRows))
          .backward();
      optimizer.step();
    }
    source = join.join();
  }
  for (int step = 0; step < 8; ++step) {
    auto [x, y] = step_data(step, world);
    int active = 0;
    for (int b : batches) active += b > step;
    reference_optimizer.zero_grad();
    for (int r = 0; r < world; ++r) {
      if (batches[r] <= step) continue;
      (torch::mse_loss(reference->forward(x.narrow(0, r * kRows, kRows)),
                       y.narrow(0, r * kRows, kRows)) /
       (by_contributors ? active : world))
          .backward();
    }
    reference_optimizer.step();
  }
  NamedChecks checks;
  const double error = worst_relative_error(model->parameters(), reference->parameters());
  checks.check(check_name(check::kJoin, check::kJoinParameters), error <= 1e-5,
               "max relative error " + std::to_string(error));
  checks.check(check_name(check::kJoin, check::kLastToJoin), source == 2,
               "returned " + std::to_string(source));
  return exit_code(checks);
}

// Starts hvd on the backend `--backend B` names (default gloo).
void init_hvd(const std::vector<std::string>& args) {
  std::string backend = "gloo";
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--backend") backend = args[i + 1];
  }
  hvd::init(ddp::InitOptions().backend(backend).collective_timeout(std::chrono::seconds(30)));
}

// A scenario run once hvd is started.
ddp::testing::WorkerScenario after_init(std::function<int(const std::vector<std::string>&)> body) {
  return [body](const std::vector<std::string>& args) {
    init_hvd(args);
    return body(args);
  };
}

// The "api" scenario: hvd before init() is an error, then api().
int api_before_and_after_init(const std::vector<std::string>& args) {
  try {
    hvd::rank();
    std::cout << "rank() before init() did not fail\n";
    return 1;
  } catch (const ddp::ConfigError& e) {
    std::cout << "before init: " << e.what() << "\n";
  }
  init_hvd(args);
  return api();
}

}  // namespace

int main(int argc, char** argv) {
  using Args = std::vector<std::string>;
  return ddp::testing::run_worker(
      argc, argv,
      {{"train", after_init(train)},
       {"broadcast-state", after_init([](const Args&) { return broadcast_state(); })},
       {"api", api_before_and_after_init},
       {"mismatch", after_init([](const Args&) { return mismatch(); })},
       {"join", after_init(join)}});
}
