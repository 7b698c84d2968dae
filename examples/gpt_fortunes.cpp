// A decoder-only transformer that no rank holds whole: byte-level language
// modelling on the Debian `fortunes` corpus with FullyShardedDataParallel,
// the model built one block at a time under ddp::ShardedConstruction (each
// block sharded as soon as it is built) and every block's activations
// recomputed in backward (ddp::nn::checkpoint).
//
//   ddprun --standalone --nproc-per-node 4 build/bin/example_gpt_fortunes \
//       --epochs 5 --plot curves.png --snapshot-dir snapshots --export gpt.pt
//
// --size small (the default: 0.8 M parameters, minutes on a laptop's CPU)
// or large (454 M parameters: 16 x 454 M bytes of fp32 AdamW state, more
// than a quarter of a 24 GiB machine, so that DDP on 4 ranks would not fit
// it; see docs/benchmarks.md). Each epoch is --steps-per-epoch steps of
// --batch-size random windows per rank; its line gives the training loss,
// and the validation loss, perplexity and next-byte accuracy on the last 5%
// of the corpus. Rank r's batch at global step g and its dropout masks are
// drawn from seeds of (--seed, g, r), so a run resumed from a snapshot
// continues bit for bit. --export writes the trained weights as torch.save
// does; examples/gpt_reference.py loads them into the same model written in
// plain PyTorch.

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/distributed_eval.hpp"
#include "common/gpt.hpp"
#include "common/metrics_output.hpp"
#include "common/periodic_snapshots.hpp"
#include "common/run_example.hpp"
#include "common/utilization.hpp"
#include "ddp/ddp.hpp"
#include "ddp/snapshot.hpp"
#include "ddp/training/progress.hpp"

namespace {

namespace fs = std::filesystem;

struct Options : ddp::examples::CommonOptions {
  std::string size = "small";
  int64_t batch_size = 16;  // windows per rank and step
  int64_t steps_per_epoch = 100;
  int64_t valid_windows = 256;
  double lr = 1e-3;
  double weight_decay = 0.01;
  bool checkpoint = true;
  std::string export_path;
};

ddp::examples::GptConfig config_for(const Options& o) {
  ddp::examples::GptConfig config;
  if (o.size == "large") {
    config.width = 2048;
    config.heads = 16;
    config.layers = 9;
    config.context = 128;
  }
  config.checkpointed = o.checkpoint;
  return config;
}

// Every fortune file of `directory` (not the .dat indexes nor the .u8
// links), in name order, as one byte tensor.
torch::Tensor read_corpus(const std::string& directory) {
  std::vector<fs::path> files;
  if (fs::is_directory(directory)) {
    for (const auto& entry : fs::directory_iterator(directory)) {
      const auto extension = entry.path().extension();
      if (entry.is_regular_file() && extension != ".dat" && extension != ".u8") {
        files.push_back(entry.path());
      }
    }
  }
  if (files.empty()) {
    throw ddp::ConfigError("example_gpt_fortunes: no fortune files in '" + directory +
                           "'; install Debian's fortunes package (apt-get install fortunes) or "
                           "pass --data-dir.");
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return torch::from_blob(text.data(), {static_cast<int64_t>(text.size())}, torch::kUInt8)
      .to(torch::kLong);
}

// `count` windows of `length` + 1 bytes of `text` starting at `starts`.
torch::Tensor windows(const torch::Tensor& text, const torch::Tensor& starts, int64_t length) {
  return text.index({starts.unsqueeze(1) + torch::arange(length + 1).unsqueeze(0)});
}

struct Evaluation {
  double loss, accuracy;
};

// Mean loss and next-byte accuracy of `model` on `windows` (every rank
// takes its slice; the sums are all-reduced).
Evaluation evaluate(ddp::FullyShardedDataParallel& model, const torch::Tensor& windows,
                    ddp::ProcessGroup& group) {
  torch::NoGradGuard no_grad;
  model->eval();
  double loss_sum = 0, correct = 0, count = 0;
  const int64_t per_rank = (windows.size(0) + group.size() - 1) / group.size();
  const int64_t begin = std::min(windows.size(0), group.rank() * per_rank);
  const int64_t end = std::min(windows.size(0), begin + per_rank);
  // Every rank runs as many forwards (the units' gathers are collectives).
  for (int64_t at = 0; at < per_rank; at += 16) {
    const int64_t from = std::min(end, begin + at), to = std::min(end, begin + at + 16);
    const torch::Tensor chunk =
        from < to ? windows.slice(0, from, to) : windows.slice(0, 0, 1);  // a dummy, not counted
    const int64_t length = chunk.size(1) - 1;
    const torch::Tensor logits = model->forward(chunk.narrow(1, 0, length)).to(torch::kFloat);
    if (from >= to) continue;
    const torch::Tensor targets = chunk.narrow(1, 1, length).reshape({-1});
    const torch::Tensor flat = logits.reshape({-1, logits.size(-1)});
    loss_sum += torch::cross_entropy_loss(flat, targets, {}, at::Reduction::Sum).item<double>();
    correct += flat.argmax(-1).eq(targets).sum().item<double>();
    count += static_cast<double>(targets.numel());
  }
  model->train();
  loss_sum = ddp::examples::sum_across_ranks(loss_sum, group);
  correct = ddp::examples::sum_across_ranks(correct, group);
  count = ddp::examples::sum_across_ranks(count, group);
  return {loss_sum / count, correct / count};
}

int train(const Options& o) {
  const auto started = std::chrono::steady_clock::now();
  auto group = ddp::init();
  const int rank = group->rank(), world = group->size();
  const torch::Tensor corpus = read_corpus(o.data_dir);
  const ddp::examples::GptConfig config = config_for(o);
  const int64_t split = corpus.numel() * 95 / 100;
  const torch::Tensor train_text = corpus.narrow(0, 0, split);
  const torch::Tensor valid_text = corpus.narrow(0, split, corpus.numel() - split);
  // Windows evenly spaced over the validation text (examples/gpt_reference.py takes the same).
  const torch::Tensor valid_windows =
      windows(valid_text,
              torch::arange(o.valid_windows) *
                  ((valid_text.numel() - config.context - 1) / o.valid_windows),
              config.context);

  // Note [Sharded construction]: each block is sharded as soon as it is built.
  ddp::examples::Gpt net{nullptr};
  ddp::FullyShardedDataParallel model{nullptr};
  {
    ddp::ShardedConstruction construction(group);
    torch::manual_seed(o.seed);
    net = ddp::examples::Gpt(config);
    model = ddp::FullyShardedDataParallel(net, group);
  }
  // LibTorch's AdamW in one pass per parameter (ddp/optim/adamw.hpp).
  ddp::optim::AdamW optimizer(model->parameters(),
                              torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  ddp::FullyShardedState sharded(model, optimizer);
  ddp::snapshot::TrainingState state;
  state.model = net.ptr().get();
  state.fully_sharded = &sharded;
  ddp::examples::PeriodicSnapshots snapshots(group, o);
  const bool resumed = snapshots.resume(state);
  int64_t global_step = state.counters["global_step"];
  int64_t steps_to_run = o.epochs * o.steps_per_epoch - global_step;
  if (o.max_steps > 0) steps_to_run = std::min(steps_to_run, o.max_steps - global_step);
  ddp::training::ProgressReporter progress(rank, o.epochs, o.steps_per_epoch,
                                           std::max<int64_t>(0, steps_to_run));
  if (resumed && rank == 0) {
    progress.message("resumed from " + o.snapshot_dir + " at epoch " +
                     std::to_string(state.epoch + 1) + " step " +
                     std::to_string(state.step_in_epoch) + " (global step " +
                     std::to_string(global_step) + ")");
  }
  int64_t shard = 0;
  for (const auto& p : model->parameters()) shard += p.numel();
  progress.message("GPT of " + std::to_string(config.parameter_count()) + " parameters (" +
                   std::to_string(config.layers) + " blocks of width " +
                   std::to_string(config.width) + "), " + std::to_string(shard) +
                   " held on this rank; " + (o.checkpoint ? "checkpointed" : "plain") +
                   " blocks; corpus " + std::to_string(corpus.numel()) + " bytes");
  ddp::examples::MetricsOutput metrics(o, rank, state.epoch,
                                       "GPT on fortunes: validation loss and next-byte accuracy, " +
                                           std::to_string(world) + " ranks");

  ddp::examples::TrainingUtilization utilization(torch::kCPU);
  auto limit_reached = [&] { return o.max_steps > 0 && global_step >= o.max_steps; };
  Evaluation valid{NAN, NAN};
  for (int64_t epoch = state.epoch; epoch < o.epochs && !limit_reached(); ++epoch) {
    const int64_t first_step = epoch == state.epoch ? state.step_in_epoch : 0;
    progress.begin_epoch(epoch, first_step);
    for (int64_t step = first_step; step < o.steps_per_epoch && !limit_reached(); ++step) {
      // Rank r's batch and dropout masks at global step g depend on (seed, g, r) alone.
      torch::manual_seed(o.seed * 1000003 + static_cast<uint64_t>(global_step * world + rank));
      const torch::Tensor batch = windows(
          train_text, torch::randint(split - config.context - 1, {o.batch_size}), config.context);
      optimizer.zero_grad();
      const torch::Tensor logits =
          utilization.forward([&] { return model->forward(batch.narrow(1, 0, config.context)); });
      const torch::Tensor loss =
          torch::cross_entropy_loss(logits.to(torch::kFloat).reshape({-1, config.vocabulary}),
                                    batch.narrow(1, 1, config.context).reshape({-1}));
      loss.backward();
      model->clip_grad_norm(1.0);
      optimizer.step();
      ++global_step;
      progress.step(loss.item<double>(), o.batch_size * world);
      const bool epoch_done = step + 1 == o.steps_per_epoch;
      state.epoch = epoch_done ? epoch + 1 : epoch;
      state.step_in_epoch = epoch_done ? 0 : step + 1;
      state.counters["global_step"] = global_step;
      snapshots.after_step(state, epoch_done, /*stopping=*/limit_reached());
    }
    const ddp::training::EpochProgress done = progress.end_epoch();
    utilization.add_epoch(done);
    valid = evaluate(model, valid_windows, *group);
    metrics.record({epoch + 1, valid.loss, valid.accuracy, done.samples_per_s, done.seconds});
    char text[200];
    std::snprintf(text, sizeof(text),
                  "epoch %lld/%lld: train loss %.4f, validation loss %.4f, perplexity %.2f, "
                  "next-byte accuracy %.2f%%",
                  static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs),
                  ddp::examples::sum_across_ranks(done.mean_loss, *group) / world, valid.loss,
                  std::exp(valid.loss), 100 * valid.accuracy);
    if (rank == 0) progress.message(text);
  }
  if (std::isnan(valid.loss)) valid = evaluate(model, valid_windows, *group);
  // One unit gathered at a time: full_parameters() would hold the whole model.
  ddp::examples::WeightsDigest weights;
  model->for_each_full_parameter(
      [&](const std::string&, const at::Tensor& value) { weights.add(value); });
  const std::string digest = weights.hex();
  if (!o.export_path.empty()) {
    // Gathered unit by unit into one file, then written as torch.save does.
    const std::string consolidated = o.export_path + ".ddpsnap";
    ddp::snapshot::save_consolidated(model, consolidated);
    if (rank == 0) {
      ddp::snapshot::export_checkpoint(ddp::snapshot::read_snapshot_file(consolidated),
                                       o.export_path);
      fs::remove(consolidated);
    }
  }
  const std::string outputs = metrics.finish();
  const std::string mfu = utilization.summary(*group);
  if (rank == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char text[200];
    std::snprintf(text, sizeof(text), "done: %lld steps, validation loss %.4f, %.1f s in all",
                  static_cast<long long>(global_step), valid.loss, seconds);
    progress.message(text);
    if (!mfu.empty()) progress.message(mfu);
    if (!outputs.empty()) progress.message(outputs);
    if (!o.export_path.empty()) progress.message("weights for PyTorch in " + o.export_path);
    std::printf("params-digest=%s\nfinal loss=%.6f accuracy=%.4f\n", digest.c_str(), valid.loss,
                valid.accuracy);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "A GPT trained byte by byte on Debian's fortunes with FullyShardedDataParallel, built "
      "sharded and checkpointed.\nRun alone, or under ddprun/torchrun for several ranks.",
      "example_gpt_fortunes"};
  Options o;
  o.data_dir = "/usr/share/games/fortunes";
  ddp::examples::add_common_options(app, o, /*reads_data=*/false);
  app.add_option("--data-dir", o.data_dir, "directory of the fortune files")->capture_default_str();
  app.add_option("--size", o.size, "small (0.8 M parameters) or large (454 M)")
      ->check(CLI::IsMember({"small", "large"}))
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "windows per rank and step")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--steps-per-epoch", o.steps_per_epoch, "steps in an epoch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--valid-windows", o.valid_windows,
                 "validation windows, evenly spaced over the last 5% of the corpus")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "AdamW learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--checkpoint,!--no-checkpoint", o.checkpoint,
               "recompute each block's activations in backward")
      ->capture_default_str();
  app.add_option("--export", o.export_path,
                 "write the trained weights here as torch.save does (examples/gpt_reference.py "
                 "loads them)");
  CLI11_PARSE(app, argc, argv);
  return ddp::examples::run_example([&] { return train(o); });
}
