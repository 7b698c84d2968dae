#include "multiprocess/any_module_checks.hpp"

#include <torch/torch.h>

#include <functional>
#include <tuple>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"

namespace ddp::testing {

// A forward output of the user's own type: DDP finds its tensors through
// the customisation point, as a user would write it.
struct Prediction {
  torch::Tensor logits;
  torch::Tensor auxiliary_loss;
  int64_t layers_run = 0;
};

}  // namespace ddp::testing

template <>
struct ddp::parallel::OutputTensors<ddp::testing::Prediction> {
  static void collect(const ddp::testing::Prediction& p, std::vector<at::Tensor>& tensors) {
    tensors.push_back(p.logits);
    tensors.push_back(p.auxiliary_loss);
  }
};

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
using torch::Tensor;
using LstmOutput = std::tuple<Tensor, std::tuple<Tensor, Tensor>>;

constexpr int64_t kRowsPerRank = 4;  // samples per rank and step
constexpr int kTrainingSteps = 3;

// A trunk in a ModuleList that forward() loops over, a classifier head and
// an auxiliary head whose loss comes back beside the logits.
struct AuxiliaryNetImpl : nn::Module {
  nn::ModuleList trunk{
      register_module("trunk", nn::ModuleList(nn::Linear(8, 16), nn::Linear(16, 16)))};
  nn::Linear head{register_module("head", nn::Linear(16, 4))};
  nn::Linear auxiliary{register_module("auxiliary", nn::Linear(16, 1))};
  Prediction forward(Tensor x) {
    for (const auto& layer : *trunk) x = torch::tanh(layer->as<nn::Linear>()->forward(x));
    return {head(x), auxiliary(x).pow(2).mean(), static_cast<int64_t>(trunk->size())};
  }
};
TORCH_MODULE(AuxiliaryNet);

// The auxiliary loss counts on some steps on some ranks only.
bool auxiliary_used(int step, int rank) { return (step + rank) % 2 == 0; }

nn::Sequential make_generator() {
  return nn::Sequential(nn::Linear(4, 16), nn::BatchNorm1d(16), nn::ReLU(), nn::Linear(16, 6),
                        nn::Tanh());
}
nn::Sequential make_discriminator() {
  return nn::Sequential(nn::Linear(6, 16), nn::BatchNorm1d(16),
                        nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
                        nn::Linear(16, 1));
}

std::vector<Tensor> detached(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> copies;
  for (const auto& t : tensors) copies.push_back(t.detach().clone());
  return copies;
}

class AnyModuleChecker {
 public:
  explicit AnyModuleChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  int run() {
    gan();
    lstm();
    auxiliary();
    other_type();
    return checks_.failed();
  }

 private:
  // Rank `rank`'s rows of `whole`; the whole batch for the one-process run.
  Tensor rows(const Tensor& whole, int rank) const {
    return rank < 0 ? whole : whole.narrow(0, rank * kRowsPerRank, kRowsPerRank);
  }
  Tensor batch(int step, int stream, std::vector<int64_t> shape) const {
    torch::manual_seed(1000 * stream + step);
    shape.insert(shape.begin(), world_ * kRowsPerRank);
    return torch::randn(shape);
  }

  // The DCGAN step of LibTorch's C++ example: the discriminator runs three
  // times per step (real, a detached fake, the fake for the generator),
  // each followed by its backward. `rank` < 0: one process, whole batch.
  template <typename Generator, typename Discriminator>
  void gan_steps(Generator& generator, Discriminator& discriminator, int rank) {
    torch::optim::SGD g_optimizer(generator->parameters(),
                                  torch::optim::SGDOptions(0.05).momentum(0.9));
    torch::optim::SGD d_optimizer(discriminator->parameters(),
                                  torch::optim::SGDOptions(0.05).momentum(0.9));
    auto bce = [](const Tensor& logits, double label) {
      return torch::binary_cross_entropy_with_logits(logits, torch::full_like(logits, label));
    };
    for (int step = 0; step < kTrainingSteps; ++step) {
      const Tensor real = rows(batch(step, 1, {6}), rank);
      const Tensor noise = rows(batch(step, 2, {4}), rank);
      discriminator->zero_grad();
      bce(discriminator->forward(real), 1.0).backward();
      const Tensor fake = generator->forward(noise);
      bce(discriminator->forward(fake.detach()), 0.0).backward();
      d_optimizer.step();
      generator->zero_grad();
      bce(discriminator->forward(fake), 1.0).backward();
      g_optimizer.step();
    }
  }

  void gan() {
    torch::manual_seed(11);
    auto g_reference = make_generator();
    auto d_reference = make_discriminator();
    gan_steps(g_reference, d_reference, -1);

    torch::manual_seed(11 + rank_);  // DDP must start every rank from rank 0's weights
    auto g_local = make_generator();
    auto d_local = make_discriminator();
    ddp::nn::convert_sync_batchnorm(g_local.ptr(), group_);
    ddp::nn::convert_sync_batchnorm(d_local.ptr(), group_);
    DistributedDataParallel generator(g_local, group_);
    DistributedDataParallel discriminator(d_local, group_);
    gan_steps(generator, discriminator, rank_);

    checks_.close_all(any_module_check::kGanDiscriminator, discriminator->parameters(),
                      d_reference->parameters(), 1e-5);
    checks_.close_all(any_module_check::kGanGenerator, generator->parameters(),
                      g_reference->parameters(), 1e-5);
    auto buffers = generator->buffers(), expected = g_reference->buffers();
    for (const auto& b : discriminator->buffers()) buffers.push_back(b);
    for (const auto& b : d_reference->buffers()) expected.push_back(b);
    checks_.close_all(any_module_check::kGanBuffers, buffers, expected, 1e-5);
  }

  template <typename Forward>
  std::vector<Tensor> lstm_steps(Forward forward, const std::vector<Tensor>& parameters, int rank) {
    torch::optim::Adam optimizer(parameters, torch::optim::AdamOptions(0.01));
    for (int step = 0; step < kTrainingSteps; ++step) {
      optimizer.zero_grad();
      const auto [output, state] = forward(rows(batch(step, 3, {7, 3}), rank));
      const Tensor loss = torch::mse_loss(output.select(1, -1), rows(batch(step, 4, {5}), rank)) +
                          0.1 * std::get<1>(state).pow(2).mean();
      loss.backward();
      optimizer.step();
    }
    return detached(parameters);
  }

  nn::LSTM make_lstm(uint64_t seed) {
    torch::manual_seed(seed);
    return nn::LSTM(nn::LSTMOptions(3, 5).batch_first(true));
  }

  void lstm() {
    auto reference = make_lstm(21);
    auto expected = lstm_steps([&](const Tensor& x) { return reference->forward(x); },
                               reference->parameters(), -1);
    DistributedDataParallel model(make_lstm(21 + rank_), group_);
    auto got = lstm_steps([&](const Tensor& x) { return model->forward<LstmOutput>(x); },
                          model->parameters(), rank_);
    checks_.close_all(any_module_check::kLstm, got, expected, 1e-5);
  }

  // One step's loss of `prediction` for rank `rank`'s rows.
  Tensor auxiliary_loss(const Prediction& prediction, int step, int rank) {
    const Tensor labels = rows(batch(step, 6, {}), rank).gt(0).to(torch::kLong) +
                          2 * rows(batch(step, 7, {}), rank).gt(0).to(torch::kLong);
    Tensor loss = torch::cross_entropy_loss(prediction.logits, labels);
    if (auxiliary_used(step, rank)) loss = loss + 0.5 * prediction.auxiliary_loss;
    return loss;
  }

  void auxiliary() {
    torch::manual_seed(31);
    AuxiliaryNet reference;
    torch::optim::SGD reference_optimizer(reference->parameters(),
                                          torch::optim::SGDOptions(0.1).momentum(0.9));
    // One process: each rank's rows and loss in turn, averaged over ranks.
    std::vector<Tensor> after_first;
    for (int step = 0; step < kTrainingSteps; ++step) {
      reference_optimizer.zero_grad();
      for (int r = 0; r < world_; ++r) {
        (auxiliary_loss(reference->forward(rows(batch(step, 5, {8}), r)), step, r) / world_)
            .backward();
      }
      reference_optimizer.step();
      if (step == 0) after_first = detached(reference->parameters());
    }

    torch::manual_seed(31 + rank_);
    DistributedDataParallel model(
        AuxiliaryNet(), DistributedDataParallelOptions().find_unused_parameters(true), group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    std::vector<Tensor> got_after_first;
    for (int step = 0; step < kTrainingSteps; ++step) {
      optimizer.zero_grad();
      const auto prediction = model->forward<Prediction>(rows(batch(step, 5, {8}), rank_));
      auxiliary_loss(prediction, step, rank_).backward();
      optimizer.step();
      if (step == 0) got_after_first = detached(model->parameters());
    }
    checks_.close_all(any_module_check::kAuxiliary, model->parameters(), reference->parameters(),
                      1e-5);
    // After step 0 the auxiliary head was used by the even ranks only (by
    // none at world size 1): its gradient is their sum over all ranks.
    checks_.close_all(any_module_check::kAuxiliaryUnused, got_after_first, after_first, 1e-5);
  }

  void other_type() {
    DistributedDataParallel model(make_lstm(41), group_);
    std::string message;
    try {
      torch::NoGradGuard no_grad;
      model->forward(torch::randn({2, 7, 3}));
    } catch (const InvalidArgumentError& e) {
      message = e.what();
    }
    const bool named =
        message.find("forward returned std::tuple<at::Tensor, std::tuple<") != std::string::npos &&
        message.find("but forward was called for at::Tensor; call forward<std::tuple<") !=
            std::string::npos;
    checks_.check(any_module_check::kOtherType, named,
                  message.empty() ? "no InvalidArgumentError" : "message: " + message);
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace

int check_any_module(const std::shared_ptr<ProcessGroup>& group) {
  return AnyModuleChecker(group).run();
}

}  // namespace ddp::testing
