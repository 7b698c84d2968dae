// FullyShardedDataParallel's mixed precision per unit (issue #54 item 8):
// sharded_call's inputs and a BatchNorm unit's buffers in bf16, the fp32
// masters exported, no_sync()'s accumulation in fp32, and a root layer fed
// an fp32 tensor named.

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "common/relative_error.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/fsdp_paths_checks.hpp"

namespace ddp::testing {
namespace fsdp_mixed_precision {  // named: the unity build joins this file with others

namespace nn = torch::nn;
using torch::Tensor;
namespace check = fsdp_paths_check;

constexpr int64_t kRows = 4;  // per rank

// Units: two Linear layers and a BatchNorm1d, each through sharded_call;
// the root computes in fp32 between them (a cast user code may do).
struct NormNetImpl : nn::Module {
  nn::Linear in{register_module("in", nn::Linear(8, 12))};
  nn::BatchNorm1d norm{register_module("norm", nn::BatchNorm1d(12))};
  nn::Linear out{register_module("out", nn::Linear(12, 8))};
  Tensor forward(const Tensor& x) {
    const Tensor h = sharded_call(in, x).to(torch::kFloat);
    return sharded_call(out, torch::tanh(sharded_call(norm, h)));
  }
};
TORCH_MODULE(NormNet);

// One unit, and a root Linear reading the unit's output times a mask the
// forward makes in fp32 (seed 16 of the generated models), cast to the
// activations' dtype once `cast` is set.
struct MaskNetImpl : nn::Module {
  nn::Linear in{register_module("in", nn::Linear(8, 12))};
  nn::Linear head{register_module("head", nn::Linear(12, 8))};
  bool cast = false;
  Tensor forward(const Tensor& x) {
    const Tensor h = sharded_call(in, x);
    Tensor mask = torch::full({1, 12}, 0.5);
    if (cast) mask = mask.to(h.scalar_type());
    return head(h * mask);
  }
};
TORCH_MODULE(MaskNet);

WrapPolicy layers() {
  return [](const std::string&, const nn::Module& m) {
    return dynamic_cast<const nn::LinearImpl*>(&m) || dynamic_cast<const nn::BatchNorm1dImpl*>(&m);
  };
}

Tensor data(int step, int stream, int64_t rows) {
  torch::manual_seed(2000 * stream + step);
  return torch::randn({rows, 8});
}

class MixedPrecisionChecker {
 public:
  explicit MixedPrecisionChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  int run() {
    units_and_buffers();
    masters();
    no_sync();
    forward_between();
    root_input();
    return checks_.failed();
  }

 private:
  Tensor rows(const Tensor& whole) const { return whole.narrow(0, rank_ * kRows, kRows); }
  FullyShardedDataParallel wrap(NormNet local) const {
    return FullyShardedDataParallel(
        local,
        FullyShardedDataParallelOptions().wrap_policy(layers()).param_dtype(torch::kBFloat16),
        group_);
  }
  // Two Linear units in a Sequential, in bf16.
  FullyShardedDataParallel mlp() const {
    return FullyShardedDataParallel(
        nn::Sequential(nn::Linear(8, 12), nn::Tanh(), nn::Linear(12, 8)),
        FullyShardedDataParallelOptions().param_dtype(torch::kBFloat16), group_);
  }

  void units_and_buffers() {
    torch::manual_seed(40);
    NormNet reference;
    torch::optim::SGD reference_optimizer(reference->parameters(), torch::optim::SGDOptions(0.05));
    // Each rank's batch normalized alone, as FSDP's ranks do: the reference
    // averages the ranks' losses.
    for (int step = 0; step < 3; ++step) {
      reference_optimizer.zero_grad();
      for (int r = 0; r < world_; ++r) {
        const Tensor x = data(step, 1, world_ * kRows).narrow(0, r * kRows, kRows);
        const Tensor y = data(step, 2, world_ * kRows).narrow(0, r * kRows, kRows);
        (torch::mse_loss(reference(x), y) / world_).backward();
      }
      reference_optimizer.step();
    }
    torch::manual_seed(40 + rank_);
    NormNet local;
    FullyShardedDataParallel model = wrap(local);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
    std::string error;
    try {
      for (int step = 0; step < 3; ++step) {
        optimizer.zero_grad();
        const Tensor out = model->forward(rows(data(step, 1, world_ * kRows)));
        torch::mse_loss(out.to(torch::kFloat), rows(data(step, 2, world_ * kRows))).backward();
        optimizer.step();
      }
    } catch (const std::exception& e) {
      error = std::string(e.what()).substr(0, 300);
    }
    if (!error.empty()) {
      checks_.check(check::kMixedPrecisionUnits, false, "threw: " + error);
      return;
    }
    std::vector<Tensor> got;
    for (const auto& item : model->full_parameters()) got.push_back(item.value());
    const double error_parameters = worst_relative_error(got, reference->parameters());
    // Rank 0's statistics, which saw rank 0's rows only, as the reference's
    // last forward saw the last rank's: compare dtypes and finiteness here.
    const Tensor mean = local->norm->running_mean;
    checks_.check(check::kMixedPrecisionUnits,
                  error_parameters <= 2e-2 && mean.scalar_type() == torch::kFloat &&
                      mean.isfinite().all().item<bool>() && mean.abs().sum().item<double>() > 0,
                  "max relative error " + std::to_string(error_parameters) + ", running mean in " +
                      std::string(c10::toString(mean.scalar_type())));
  }

  void masters() {
    torch::manual_seed(41);
    FullyShardedDataParallel model = mlp();
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
    optimizer.zero_grad();
    torch::mse_loss(model->forward(rows(data(0, 1, world_ * kRows))).to(torch::kFloat),
                    rows(data(0, 2, world_ * kRows)))
        .backward();
    optimizer.step();
    // Each of this rank's pieces is its run of the exported parameter.
    const auto full = model->full_parameters();
    const auto pieces = model->named_parameters();
    const auto of = model->pieces_of();
    std::string wrong;
    for (size_t p = 0; p < pieces.size() && wrong.empty(); ++p) {
      const std::string& name = pieces[p].key();
      if (!full.contains(name)) {
        wrong = "'" + name + "' not exported";
        continue;
      }
      const Tensor value = full[name];
      const Tensor piece = pieces[p].value();
      if (value.scalar_type() != torch::kFloat ||
          !torch::equal(value.flatten().narrow(0, of[p].begin, piece.numel()), piece)) {
        wrong = "'" + name + "' exported in " + c10::toString(value.scalar_type()) +
                (value.scalar_type() == torch::kFloat ? ", not its piece's values" : "");
      }
    }
    checks_.check(check::kMixedPrecisionMasters, wrong.empty(), wrong);
  }

  void no_sync() {
    auto train = [&](bool accumulate) {
      torch::manual_seed(42);
      FullyShardedDataParallel model = mlp();
      torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
      optimizer.zero_grad();
      int64_t held = 0;
      const Tensor x = rows(data(0, 1, world_ * kRows)), y = rows(data(0, 2, world_ * kRows));
      if (accumulate) {
        {
          auto guard = model->no_sync();
          torch::mse_loss(model->forward(x.narrow(0, 0, 2)).to(torch::kFloat), y.narrow(0, 0, 2))
              .backward();
        }
        held = model->memory().gathered_bytes;
        torch::mse_loss(model->forward(x.narrow(0, 2, 2)).to(torch::kFloat), y.narrow(0, 2, 2))
            .backward();
      } else {
        (torch::mse_loss(model->forward(x.narrow(0, 0, 2)).to(torch::kFloat), y.narrow(0, 0, 2)) +
         torch::mse_loss(model->forward(x.narrow(0, 2, 2)).to(torch::kFloat), y.narrow(0, 2, 2)))
            .backward();
      }
      optimizer.step();
      std::vector<Tensor> result;
      for (const auto& item : model->full_parameters()) result.push_back(item.value());
      int64_t fp32_bytes = 0;
      for (int64_t numel : model->unit_numels()) {
        fp32_bytes += (numel + world_ - 1) / world_ * world_ * 4;
      }
      return std::make_tuple(result, held, fp32_bytes);
    };
    const auto [accumulated, held, fp32_bytes] = train(true);
    const auto [summed, unused, also_fp32] = train(false);
    const double error = worst_relative_error(accumulated, summed);
    checks_.check(check::kMixedPrecisionNoSync, held == fp32_bytes && error <= 2e-2,
                  "held " + std::to_string(held) +
                      " bytes between the backward passes (fp32: " + std::to_string(fp32_bytes) +
                      "), max relative error " + std::to_string(error));
    (void)unused;
    (void)also_fp32;
  }

  void forward_between() {
    auto step = [&](bool look_between) {
      torch::manual_seed(43);
      FullyShardedDataParallel model = wrap(NormNet());
      torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
      const Tensor out = model->forward(rows(data(0, 1, world_ * kRows)));
      if (look_between) {
        torch::NoGradGuard no_grad;
        model->forward(rows(data(1, 1, world_ * kRows)));
      }
      torch::mse_loss(out.to(torch::kFloat), rows(data(0, 2, world_ * kRows))).backward();
      optimizer.step();
      std::vector<Tensor> result;
      for (const auto& item : model->full_parameters()) result.push_back(item.value());
      return result;
    };
    std::string error;
    std::vector<Tensor> between, straight;
    try {
      between = step(true);
      straight = step(false);
    } catch (const std::exception& e) {
      error = std::string(e.what()).substr(0, 300);
    }
    bool same = error.empty() && between.size() == straight.size();
    for (size_t i = 0; same && i < between.size(); ++i)
      same = torch::equal(between[i], straight[i]);
    checks_.check(check::kMixedPrecisionForwardBetween, same,
                  error.empty() ? "the parameters differ" : "threw: " + error);
  }

  void root_input() {
    // One step of a MaskNet; with `mistake`, a forward without the cast
    // first, which must be refused by name.
    auto train = [&](bool mistake, std::string& refusal) {
      torch::manual_seed(44);
      MaskNet local;
      FullyShardedDataParallel model(
          local,
          FullyShardedDataParallelOptions()
              .wrap_policy([](const std::string& name, const nn::Module&) { return name == "in"; })
              .param_dtype(torch::kBFloat16),
          group_);
      torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
      const Tensor x = rows(data(0, 3, world_ * kRows));
      if (mistake) {
        try {
          model->forward(x);
          refusal = "no error";
        } catch (const ConfigError& e) {
          refusal = e.what();
        }
      }
      local->cast = true;
      torch::mse_loss(model->forward(x).to(torch::kFloat), rows(data(0, 4, world_ * kRows)))
          .backward();
      optimizer.step();
      std::vector<Tensor> result;
      for (const auto& item : model->full_parameters()) result.push_back(item.value());
      return result;
    };
    std::string refusal, unused, error;
    std::vector<Tensor> after, straight;
    try {
      after = train(true, refusal);
      straight = train(false, unused);
    } catch (const std::exception& e) {
      error = std::string(e.what()).substr(0, 300);
    }
    const bool named = refusal.find("param_dtype bfloat16") != std::string::npos &&
                       refusal.find("mask.to(h.scalar_type())") != std::string::npos;
    bool same = error.empty() && !after.empty() && after.size() == straight.size();
    for (size_t i = 0; same && i < after.size(); ++i) same = torch::equal(after[i], straight[i]);
    checks_.check(check::kMixedPrecisionRootInput, named && same,
                  !error.empty() ? "threw: " + error
                  : !named       ? "the mistake got: " + refusal.substr(0, 300)
                                 : "the parameters differ from a model that cast from the start");
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace fsdp_mixed_precision

int check_fsdp_mixed_precision_paths(const std::shared_ptr<ProcessGroup>& group) {
  return fsdp_mixed_precision::MixedPrecisionChecker(group).run();
}

}  // namespace ddp::testing
