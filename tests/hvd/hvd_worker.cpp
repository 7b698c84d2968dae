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
// Prints each check by name (tests/common/named_checks.hpp) and exits 0 when
// none failed; on a ddp::Error prints "error: <message>" and exits with
// ddp::exit_code_for(error).

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "../common/named_checks.hpp"
#include "ddp/errors.hpp"
#include "ddp/hvd.hpp"
#include "ddp/join.hpp"
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

// Named checks; report() gives the exit code.
class Checks {
 public:
  void expect(const std::string& name, bool ok, const std::string& detail) {
    checks_.check(name, ok, detail);
  }
  int report() const {
    if (checks_.failed() == 0) return 0;
    std::cout << "rank " << hvd::rank() << ": " << checks_.failed() << " check(s) failed"
              << std::endl;
    return 1;
  }

 private:
  ddp::testing::NamedChecks checks_;
};

double relativeError(const std::vector<torch::Tensor>& got,
                     const std::vector<torch::Tensor>& expected) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double scale = std::max(expected[i].abs().max().item<double>(), 1e-12);
    const double error = (got[i] - expected[i]).abs().max().item<double>() / scale;
    // Keep a NaN: std::max(0, NaN) is 0, and a NaN result would pass.
    worst = std::isnan(worst) || std::isnan(error) ? std::numeric_limits<double>::quiet_NaN()
                                                   : std::max(worst, error);
  }
  return worst;
}

bool hasFlag(const std::vector<std::string>& args, const std::string& flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}

int64_t valueOf(const std::vector<std::string>& args, const std::string& flag, int64_t fallback) {
  auto it = std::find(args.begin(), args.end(), flag);
  return it != args.end() && it + 1 != args.end() ? std::stoll(*(it + 1)) : fallback;
}

// Step s's data for the whole job: world * passes chunks of kRows rows;
// rank r's pass p trains on chunk r * passes + p.
constexpr int64_t kRows = 4;
std::pair<torch::Tensor, torch::Tensor> stepData(int step, int64_t chunks) {
  torch::manual_seed(500 + step);
  return {torch::randn({chunks * kRows, 6}), torch::randn({chunks * kRows, 3})};
}

int train(const std::vector<std::string>& args) {
  const int world = hvd::size(), rank = hvd::rank();
  const int64_t passes = valueOf(args, "--passes", 1);
  const bool fp16 = hasFlag(args, "--fp16"), sum = hasFlag(args, "--sum");
  const bool average_aggregated = hasFlag(args, "--average-aggregated");
  auto options = hvd::DistributedOptimizerOptions()
                     .fusion_threshold_bytes(valueOf(args, "--fusion", 64 << 20))
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
  constexpr int kSteps = 4;
  Checks checks;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = stepData(step, world * passes);
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
  const double error = relativeError(model->parameters(), reference->parameters());
  checks.expect("parameters after " + std::to_string(kSteps) + " steps match one process",
                error <= tolerance,
                "max relative error " + std::to_string(error) + " > " + std::to_string(tolerance));
  const auto stats = optimizer.stats();
  const int64_t threshold = options.fusion_threshold_bytes();
  const int64_t element = fp16 ? 2 : 4;
  int64_t total = 0;
  for (auto bytes : stats.buffer_bytes) total += bytes;
  const int64_t expected_total = (6 * 16 + 16 + 16 * 16 + 16 + 16 * 3 + 3) * element;
  checks.expect("the buffers hold every gradient once", total == expected_total,
                std::to_string(total) + " bytes, expected " + std::to_string(expected_total) +
                    " (" + std::to_string(element) + " bytes per element)");
  // Where the threshold fixes it: one buffer per gradient, or one for all.
  const size_t expected_buffers = threshold == 0 ? 6u : threshold >= (64 << 20) ? 1u : 0u;
  if (expected_buffers) {
    checks.expect("number of fusion buffers", stats.buffer_bytes.size() == expected_buffers,
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
  checks.expect("every fusion buffer within the threshold", too_large.empty(), too_large);
  checks.expect("every buffer started during backward",
                stats.launched_during_backward == static_cast<int64_t>(stats.buffer_bytes.size()),
                std::to_string(stats.launched_during_backward) + " of " +
                    std::to_string(stats.buffer_bytes.size()) + " buffers");
  checks.expect("one reduction per step", stats.synchronizations == kSteps,
                std::to_string(stats.synchronizations) + " reductions in " +
                    std::to_string(kSteps) + " steps");
  std::cout << "rank " << rank << ": " << stats.buffer_bytes.size()
            << " buffers, max relative error " << error << "\n";
  return checks.report();
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
  void oneMoreStep() {
    torch::manual_seed(12345);
    optimizer.zero_grad();
    model->forward(torch::randn({5, 6})).pow(2).mean().backward();
    optimizer.step();
  }
};

template <typename Optimizer, typename Options>
void checkBroadcastState(Checks& checks, const std::string& name,
                         const std::function<Options(int)>& options_for) {
  const int rank = hvd::rank();
  Trainee<Optimizer, Options> mine(rank, options_for(rank));
  Trainee<Optimizer, Options> rank0(0, options_for(0));  // rank 0's, recomputed here
  hvd::broadcast_parameters(*mine.model, 0);
  hvd::broadcast_optimizer_state(mine.optimizer, 0);

  ddp::detail::TensorMap got_tensors, expected_tensors;
  auto got = ddp::detail::exportOptimizer(mine.optimizer, got_tensors);
  auto expected = ddp::detail::exportOptimizer(rank0.optimizer, expected_tensors);
  checks.expect(name + ": options and steps equal rank 0's", got == expected,
                got.dump() + " vs " + expected.dump());
  bool same = got_tensors.size() == expected_tensors.size() && !expected_tensors.empty();
  for (const auto& [key, tensor] : expected_tensors) {
    same = same && got_tensors.count(key) && torch::equal(got_tensors.at(key), tensor);
  }
  checks.expect(name + ": every state tensor equals rank 0's", same,
                std::to_string(got_tensors.size()) + " tensors, rank 0 has " +
                    std::to_string(expected_tensors.size()) + "; they differ or there are none");
  bool params = true;
  for (size_t i = 0; i < rank0.model->parameters().size(); ++i) {
    params = params && torch::equal(mine.model->parameters()[i], rank0.model->parameters()[i]);
  }
  checks.expect(name + ": parameters equal rank 0's", params,
                "max relative error " + std::to_string(relativeError(mine.model->parameters(),
                                                                     rank0.model->parameters())));
  mine.oneMoreStep();
  rank0.oneMoreStep();
  const double next_error = relativeError(mine.model->parameters(), rank0.model->parameters());
  checks.expect(name + ": the next step continues rank 0's trajectory exactly", next_error == 0,
                "max relative error " + std::to_string(next_error));
}

int broadcastState() {
  namespace optim = torch::optim;
  Checks checks;
  checkBroadcastState<optim::SGD, optim::SGDOptions>(checks, "SGD", [](int r) {
    return optim::SGDOptions(0.01 * (r + 1))
        .momentum(0.5 + 0.1 * r)
        .weight_decay(1e-3 * r)
        .nesterov(r == 0);
  });
  checkBroadcastState<optim::Adam, optim::AdamOptions>(checks, "Adam", [](int r) {
    return optim::AdamOptions(1e-3 * (r + 1))
        .betas(std::make_tuple(0.9 - 0.05 * r, 0.999 - 0.01 * r))
        .weight_decay(1e-2 * r)
        .amsgrad(r == 0);
  });
  checkBroadcastState<optim::AdamW, optim::AdamWOptions>(checks, "AdamW", [](int r) {
    return optim::AdamWOptions(2e-3 * (r + 1)).weight_decay(0.05 * (r + 1)).eps(1e-8 * (r + 1));
  });
  checkBroadcastState<optim::RMSprop, optim::RMSpropOptions>(checks, "RMSprop", [](int r) {
    return optim::RMSpropOptions(1e-3 * (r + 1))
        .alpha(0.9 + 0.01 * r)
        .momentum(0.1 * (r + 1))
        .centered(r == 0);
  });
  checkBroadcastState<optim::Adagrad, optim::AdagradOptions>(checks, "Adagrad", [](int r) {
    return optim::AdagradOptions(0.05 * (r + 1))
        .lr_decay(1e-3 * r)
        .initial_accumulator_value(0.1 * r);
  });
  return checks.report();
}

int api() {
  Checks checks;
  auto expectEnv = [&](const std::string& name, int got, const char* variable) {
    const char* value = std::getenv(variable);
    checks.expect(
        name + " is " + variable, value && got == std::stoi(value),
        "got " + std::to_string(got) + ", " + variable + "=" + (value ? value : "(unset)"));
  };
  expectEnv("size()", hvd::size(), "WORLD_SIZE");
  expectEnv("rank()", hvd::rank(), "RANK");
  expectEnv("local_rank()", hvd::local_rank(), "LOCAL_RANK");
  expectEnv("local_size()", hvd::local_size(), "LOCAL_WORLD_SIZE");
  checks.expect("init() again returns the same group", hvd::init() == hvd::process_group(),
                "another group");
  torch::Tensor t = torch::full({3}, static_cast<double>(hvd::rank()));
  hvd::process_group()->all_reduce(t, ddp::ReduceOp::kSum);
  const int world = hvd::size();
  checks.expect("the group works", t[0].item<double>() == world * (world - 1) / 2.0,
                "sum of ranks " + std::to_string(t[0].item<double>()) + ", expected " +
                    std::to_string(world * (world - 1) / 2.0));
  return checks.report();
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
  const bool by_contributors = hasFlag(args, "--by-contributors");
  torch::manual_seed(9);
  Mlp model;
  torch::manual_seed(9);
  Mlp reference;
  hvd::DistributedOptimizer optimizer(torch::optim::SGD(model->parameters(), 0.05),
                                      hvd::DistributedOptimizerOptions().fusion_threshold_bytes(
                                          valueOf(args, "--fusion", 64 << 20)));
  torch::optim::SGD reference_optimizer(reference->parameters(), 0.05);
  int source = -1;
  {
    ddp::Join join({&optimizer}, ddp::JoinOptions().divide_by_initial_world_size(!by_contributors));
    for (int step = 0; step < batches[rank]; ++step) {
      auto [x, y] = stepData(step, world);
      optimizer.zero_grad();
      torch::mse_loss(model->forward(x.narrow(0, rank * kRows, kRows)),
                      y.narrow(0, rank * kRows, kRows))
          .backward();
      optimizer.step();
    }
    source = join.join();
  }
  for (int step = 0; step < 8; ++step) {
    auto [x, y] = stepData(step, world);
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
  Checks checks;
  const double error = relativeError(model->parameters(), reference->parameters());
  checks.expect("Join, batches 3/5/8: parameters match one process", error <= 1e-5,
                "max relative error " + std::to_string(error));
  checks.expect("Join, batches 3/5/8: join() names rank 2, the last to join", source == 2,
                "returned " + std::to_string(source));
  return checks.report();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << "usage: hvd_test_worker train|broadcast-state|api|mismatch [options]\n";
    return 2;
  }
  try {
    if (args[0] == "api") {
      try {
        hvd::rank();
        std::cout << "rank() before init() did not fail\n";
        return 1;
      } catch (const ddp::ConfigError& e) {
        std::cout << "before init: " << e.what() << "\n";
      }
    }
    // `--backend B` (default gloo) picks the engine underneath.
    std::string backend = "gloo";
    for (size_t i = 1; i + 1 < args.size(); ++i) {
      if (args[i] == "--backend") backend = args[i + 1];
    }
    hvd::init(ddp::InitOptions().backend(backend).collective_timeout(std::chrono::seconds(30)));
    if (args[0] == "train") return train(args);
    if (args[0] == "broadcast-state") return broadcastState();
    if (args[0] == "api") return api();
    if (args[0] == "mismatch") return mismatch();
    if (args[0] == "join") return join(args);
    std::cerr << "unknown scenario " << args[0] << "\n";
    return 2;
  } catch (const ddp::Error& e) {
    std::cout << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  }
}
