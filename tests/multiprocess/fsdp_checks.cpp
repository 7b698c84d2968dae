#include "multiprocess/fsdp_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <vector>

#include "base/dtype_name.hpp"
#include "comm/collective_name.hpp"
#include "common/named_checks.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/collective_observer.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/fsdp_models.hpp"
#include "multiprocess/fsdp_observers.hpp"
#include "multiprocess/fsdp_trainer.hpp"

namespace ddp::testing {
namespace {

using namespace fsdp_models;  // NOLINT(google-build-using-namespace)

namespace nn = torch::nn;
using torch::Tensor;

class FsdpChecker : FsdpTrainer {
 public:
  FsdpChecker(const std::shared_ptr<ProcessGroup>& group, c10::Device device)
      : FsdpTrainer(group, device) {}

  int run() {
    const auto sgd_reference = reference(make_mlp(5), sgd());  // on device_, as every model
    auto [sgd_params, sizes_ok, freed] = train(make_mlp(5 + rank_), sgd(), {});
    checks_.close_all(fsdp_check::kSgd, sgd_params, sgd_reference, 1e-5);
    checks_.check(fsdp_check::kShardSizes, sizes_ok.empty(), sizes_ok);
    checks_.check(fsdp_check::kFreed, freed.empty(), freed);
    // Four equal units between two smaller ones: holding a third unit's
    // worth would break the bound.
    auto deep = [] {
      torch::manual_seed(16);
      nn::Sequential model(nn::Linear(7, 16), nn::Tanh());
      for (int k = 0; k < 4; ++k) {
        model->push_back(nn::Linear(16, 16));
        model->push_back(nn::Tanh());
      }
      model->push_back(nn::Linear(16, 5));
      return model;
    };
    train(deep(), sgd(), {}, &peak_);
    checks_.check(fsdp_check::kPeak, peak_.empty(), peak_);

    const auto adamw_reference = reference(make_mlp(6), adamw());
    auto adamw_params = std::get<0>(train(make_mlp(6 + rank_), adamw(), {}));
    checks_.close_all(fsdp_check::kAdamW, adamw_params, adamw_reference, 1e-5);
    auto fused = std::get<0>(train(make_mlp(6 + rank_), fused_adamw(), {}));
    checks_.check(fsdp_check::kFusedAdamW, identical(fused, adamw_params), "they differ");
    auto kept = std::get<0>(train(make_mlp(6 + rank_), adamw(),
                                  FullyShardedDataParallelOptions().reshard_after_forward(false)));
    checks_.check(fsdp_check::kKeepGathered, identical(kept, adamw_params), "they differ");
    auto unprefetched = std::get<0>(
        train(make_mlp(6 + rank_), adamw(), FullyShardedDataParallelOptions().prefetch(0)));
    checks_.check(fsdp_check::kNoPrefetch, identical(unprefetched, adamw_params), "they differ");
    const auto overlapping = FullyShardedDataParallelOptions().overlap_reduction(true);
    std::string overlapped_peak;
    train(deep(), sgd(), overlapping, &overlapped_peak);
    const bool overlapped_equal =
        identical(std::get<0>(train(make_mlp(6 + rank_), adamw(), overlapping)), adamw_params);
    checks_.check(fsdp_check::kOverlapReduction, overlapped_equal && overlapped_peak.empty(),
                  overlapped_equal ? overlapped_peak : "they differ");

    cached_buffers(adamw_params);

    torch::manual_seed(8);
    TwoLayer whole_reference = on(TwoLayer());
    const auto whole_expected =
        reference_steps(*whole_reference, whole_reference->parameters(), sgd());
    torch::manual_seed(8 + rank_);
    checks_.close_all(fsdp_check::kWholeModel, std::get<0>(train(TwoLayer(), sgd(), {})),
                      whole_expected, 1e-5);
    frozen();
    transformer();
    convnet();
    accumulation_and_clipping();
    unused_branch();
    mixed_precision();
    bad_param_dtype();
    mismatch();
    grad_scaler();
    collective_names();
    reduction_overlaps();
    return checks_.failed();
  }

 private:
  // Note [Buffers kept between steps]: `expected` is the default run's
  // parameters (buffers kept).
  void cached_buffers(const std::vector<Tensor>& expected) {
    std::string problem, held_on;
    auto inspect_kept = [&](FullyShardedDataParallel& model) {
      const auto memory = model->memory();
      held_on = buffers_held_past_wait(model);
      const bool kept_ok = device_.is_cpu()
                               ? memory.cached_bytes > 0 &&
                                     memory.cached_bytes <= memory.peak_buffer_bytes &&
                                     memory.peak_buffer_bytes >= memory.peak_gathered_bytes
                               : memory.cached_bytes == 0;
      model->empty_cache();
      const int64_t emptied = model->memory().cached_bytes;
      if (!kept_ok || emptied != 0) {
        problem = "kept " + std::to_string(memory.cached_bytes) + " bytes (peak in use " +
                  std::to_string(memory.peak_buffer_bytes) + ", peak gathered " +
                  std::to_string(memory.peak_gathered_bytes) + "), " + std::to_string(emptied) +
                  " after empty_cache()";
      }
    };
    train(make_mlp(6 + rank_), adamw(), {}, nullptr, inspect_kept);
    int64_t kept_off = -1;
    auto off = std::get<0>(
        train(make_mlp(6 + rank_), adamw(), FullyShardedDataParallelOptions().cache_buffers(false),
              nullptr,
              [&](FullyShardedDataParallel& model) { kept_off = model->memory().cached_bytes; }));
    if (problem.empty() && kept_off != 0) {
      problem = "cache_buffers(false) kept " + std::to_string(kept_off) + " bytes";
    }
    if (problem.empty() && !identical(off, expected)) problem = "cache_buffers(false) differs";
    checks_.check(fsdp_check::kCachedBuffers, problem.empty(), problem);
    checks_.check(fsdp_check::kBuffersLetGo, held_on.empty(), held_on);
  }

  // "" when the buffers in use at once (every one the backend still holds
  // included) are the gathered parameters and gradients at their peak plus
  // the largest unit's reduced shard at most, else the figures.
  std::string buffers_held_past_wait(FullyShardedDataParallel& model) const {
    const auto memory = model->memory();
    if (!device_.is_cpu()) {
      return memory.peak_buffer_bytes == 0 ? "" : "on a GPU the host buffers were used";
    }
    int64_t largest_shard = 0;
    for (int64_t numel : model->unit_numels()) {
      largest_shard = std::max(largest_shard, (numel + world_ - 1) / world_ * 4);
    }
    const int64_t beyond = memory.peak_buffer_bytes - memory.peak_gathered_bytes;
    if (beyond >= 0 && beyond <= largest_shard && memory.peak_gathered_bytes > 0) return "";
    return "in use at once " + std::to_string(memory.peak_buffer_bytes) + " bytes, gathered " +
           std::to_string(memory.peak_gathered_bytes) + ": " + std::to_string(beyond) +
           " beyond, where the largest reduced shard is " + std::to_string(largest_shard);
  }

  void frozen() {
    auto freeze = [](nn::Sequential model) {
      for (auto& p : model[0]->parameters()) p.set_requires_grad(false);
      return model;
    };
    auto reference_model = on(freeze(make_mlp(9)));
    const auto initial = reference_model[0]->parameters().front().detach().clone();
    std::vector<Tensor> trainable;
    for (const auto& p : reference_model->parameters()) {
      if (p.requires_grad()) trainable.push_back(p);
    }
    reference_steps(*reference_model, trainable, adamw());
    std::vector<Tensor> expected;
    for (const auto& p : reference_model->parameters()) expected.push_back(p.detach().clone());
    auto got = std::get<0>(train(freeze(make_mlp(9 + rank_)), adamw(), {}));
    if (!torch::equal(got.front(), initial)) {
      checks_.check(fsdp_check::kFrozen, false, "the frozen weight changed");
      return;
    }
    checks_.close_all(fsdp_check::kFrozen, got, expected, 1e-5);
  }

  void transformer() {
    auto tokens = [&](int step) {
      torch::manual_seed(300 + step);
      return torch::randint(0, 11, {world_ * kSamplesPerRank, 5}).to(device_);
    };
    auto loss_of = [](const Tensor& logits, const Tensor& targets) {
      return torch::cross_entropy_loss(logits.reshape({-1, 11}), targets.reshape({-1}));
    };
    torch::manual_seed(12);
    TinyLm reference = on(TinyLm());
    // SGD, not Adam: the key part of the attention's in_proj_bias gets a
    // gradient that is zero but for rounding (softmax ignores a bias shared
    // by all keys), which Adam's normalisation would blow up to its full
    // step in whichever direction the rounding went.
    auto reference_optimizer = sgd()(distinct(reference->parameters()));
    for (int step = 0; step < kShardedSteps; ++step) {
      reference_optimizer->zero_grad();
      loss_of(reference->forward(tokens(step)), tokens(step + 50)).backward();
      reference_optimizer->step();
    }
    torch::manual_seed(12 + rank_);
    FullyShardedDataParallel model(
        on(TinyLm()), FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<BlockImpl>()),
        group_);
    auto optimizer = sgd()(model->parameters());
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      loss_of(model->forward(rows(tokens(step), rank_)), rows(tokens(step + 50), rank_)).backward();
      optimizer->step();
    }
    std::vector<Tensor> got, expected;
    const auto full = model->full_parameters();
    std::string missing;
    for (const auto& item : reference->named_parameters()) {
      expected.push_back(item.value());
      if (!full.contains(item.key())) missing += " '" + item.key() + "'";
      got.push_back(full.contains(item.key()) ? full[item.key()] : torch::Tensor());
    }
    if (!missing.empty()) {
      checks_.check(fsdp_check::kTransformer, false, "full_parameters() lacks" + missing);
    } else {
      checks_.close_all(fsdp_check::kTransformer, got, expected, 1e-5);
    }
    // One shard for the tie, which the export names twice.
    const auto units = model->unit_names();
    const bool one_shard = units == std::vector<std::string>{"(root)", "blocks.0", "blocks.1"} &&
                           full.contains("head.weight") && full.contains("embed.weight") &&
                           torch::equal(full["head.weight"], full["embed.weight"]) &&
                           model->unit_numels().front() == 88 &&
                           model->named_parameters().contains("embed.weight") &&
                           !model->named_parameters().contains("head.weight");
    checks_.check(fsdp_check::kTiedOnce, one_shard,
                  "units " + c10::Join(", ", units) + ", root unit of " +
                      std::to_string(model->unit_numels().front()) + " elements, pieces named " +
                      c10::Join(", ", model->named_parameters().keys()));
  }

  void convnet() {
    auto images = [&](int step) {
      torch::manual_seed(400 + step);
      return torch::randn({world_ * kSamplesPerRank, 1, 6, 6}).to(device_);
    };
    auto reference = on(make_cnn(13));
    auto reference_optimizer = sgd()(reference->parameters());
    for (int step = 0; step < kShardedSteps; ++step) {
      reference_optimizer->zero_grad();
      torch::mse_loss(reference->forward(images(step)), batch(step, 2, 5)).backward();
      reference_optimizer->step();
    }
    auto local = on(make_cnn(13 + rank_));
    ddp::nn::convert_sync_batchnorm(local.ptr(), group_);
    FullyShardedDataParallel model(local, group_);
    auto optimizer = sgd()(model->parameters());
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      torch::mse_loss(model->forward(rows(images(step), rank_)), rows(batch(step, 2, 5), rank_))
          .backward();
      optimizer->step();
    }
    std::vector<Tensor> got, expected = reference->parameters();
    for (const auto& item : model->full_parameters()) got.push_back(item.value());
    for (const auto& b : model->module()->buffers()) got.push_back(b);
    for (const auto& b : reference->buffers()) expected.push_back(b);
    checks_.close_all(fsdp_check::kConvNet, got, expected, 1e-5);
  }

  // Steps of 3 micro-batches, the first 2 under no_sync(), then clipping
  // to 0.05 (below the gradients' norm, so it acts).
  void accumulation_and_clipping() {
    auto reference = on(make_mlp(14));
    auto reference_optimizer = sgd()(reference->parameters());
    std::vector<double> expected_norms;
    for (int step = 0; step < 2; ++step) {
      reference_optimizer->zero_grad();
      for (int m = 0; m < 3; ++m) {
        torch::mse_loss(reference->forward(batch(10 * step + m, 1, 7)), batch(10 * step + m, 2, 5))
            .backward();
      }
      expected_norms.push_back(torch::nn::utils::clip_grad_norm_(reference->parameters(), 0.05));
      reference_optimizer->step();
    }
    FullyShardedDataParallel model(on(make_mlp(14 + rank_)), group_);
    auto optimizer = sgd()(model->parameters());
    auto counter = std::make_shared<ReduceScatterCounter>();
    group_->add_observer(counter);
    std::vector<int> reductions;  // after each micro-batch
    std::string norms;
    bool norms_equal = true;
    for (int step = 0; step < 2; ++step) {
      optimizer->zero_grad();
      for (int m = 0; m < 3; ++m) {
        auto pass = [&] {
          torch::mse_loss(model->forward(rows(batch(10 * step + m, 1, 7), rank_)),
                          rows(batch(10 * step + m, 2, 5), rank_))
              .backward();
        };
        if (m < 2) {
          auto no_sync = model->no_sync();
          pass();
        } else {
          pass();
        }
        reductions.push_back(counter->count);
      }
      const double norm = model->clip_grad_norm(0.05);
      norms += std::to_string(norm) + " (expected " + std::to_string(expected_norms[step]) + ") ";
      norms_equal &= std::abs(norm - expected_norms[step]) <= 1e-5 * expected_norms[step] &&
                     expected_norms[step] > 0.05;
      optimizer->step();
    }
    std::vector<Tensor> got;
    for (const auto& item : model->full_parameters()) got.push_back(item.value());
    checks_.close_all(fsdp_check::kNoSync, got, reference->parameters(), 1e-5);
    checks_.check(fsdp_check::kClip, norms_equal, "norms " + norms);
    // 3 units with parameters: 3 reduce-scatters per synchronized backward.
    checks_.check(fsdp_check::kNoSyncReducesOnce, reductions == std::vector<int>{0, 0, 3, 3, 3, 6},
                  "reduce-scatters after each micro-batch: " + c10::Join(", ", reductions));
  }

  // One process: each rank's rows in turn, with its choice of branch.
  void unused_branch() {
    torch::manual_seed(15);
    Branchy reference = on(Branchy());
    auto reference_optimizer = sgd()(reference->parameters());
    for (int step = 0; step < kShardedSteps; ++step) {
      reference_optimizer->zero_grad();
      for (int r = 0; r < world_; ++r) {
        reference->take_branch = branch_taken(step, r);
        (torch::mse_loss(reference->forward(rows(batch(step, 1, 7), r)),
                         rows(batch(step, 2, 5), r)) /
         world_)
            .backward();
      }
      reference_optimizer->step();
    }
    torch::manual_seed(15 + rank_);
    Branchy local = on(Branchy());
    FullyShardedDataParallel model(local,
                                   FullyShardedDataParallelOptions()
                                       .wrap_policy(wrap_by_type<nn::LinearImpl>())
                                       .find_unused_units(true),
                                   group_);
    auto optimizer = sgd()(model->parameters());
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      local->take_branch = branch_taken(step, rank_);
      torch::mse_loss(model->forward(rows(batch(step, 1, 7), rank_)),
                      rows(batch(step, 2, 5), rank_))
          .backward();
      optimizer->step();
    }
    std::vector<Tensor> got;
    for (const auto& item : model->full_parameters()) got.push_back(item.value());
    checks_.close_all(fsdp_check::kUnusedBranch, got, reference->parameters(), 1e-5);
  }

  void mixed_precision() {
    const auto expected = reference(make_mlp(17), sgd());
    auto dtypes = std::make_shared<CollectiveDtypes>();
    group_->add_observer(dtypes);
    FullyShardedDataParallel model(on(make_mlp(17 + rank_)),
                                   FullyShardedDataParallelOptions().param_dtype(torch::kBFloat16),
                                   group_);
    auto optimizer = sgd()(model->parameters());
    dtypes->seen.clear();  // the construction's agreement check gathers integers
    std::set<std::string> tensor_dtypes;
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      const Tensor out = model->forward(rows(batch(step, 1, 7), rank_));  // an fp32 input
      tensor_dtypes.insert("output " + base::detail::dtype_name(out.scalar_type()));
      torch::mse_loss(out.to(torch::kFloat), rows(batch(step, 2, 5), rank_)).backward();
      for (const auto& shard : model->parameters()) {
        tensor_dtypes.insert("shard " + base::detail::dtype_name(shard.scalar_type()));
        tensor_dtypes.insert("shard gradient " +
                             base::detail::dtype_name(shard.grad().scalar_type()));
      }
      optimizer->step();
    }
    const std::set<std::string> training_dtypes = dtypes->seen;  // the export gathers fp32
    std::vector<Tensor> got;
    std::string exported;  // the fp32 masters, not bf16 copies
    for (const auto& item : model->full_parameters()) {
      got.push_back(item.value());
      if (item.value().scalar_type() != torch::kFloat) {
        exported =
            item.key() + " exported in " + base::detail::dtype_name(item.value().scalar_type());
      }
    }
    const double error = worst_relative_error(got, expected);
    checks_.check(fsdp_check::kMixedPrecision, exported.empty() && error <= 2e-2 && error > 1e-6,
                  exported.empty() ? "max relative error " + std::to_string(error) +
                                         " against fp32 (expected within 2e-2 and above 1e-6)"
                                   : exported);
    std::set<std::string> seen = training_dtypes;
    seen.insert(tensor_dtypes.begin(), tensor_dtypes.end());
    const std::set<std::string> wanted{"all_gather bfloat16", "reduce_scatter float32",
                                       "output bfloat16", "shard float32",
                                       "shard gradient float32"};
    checks_.check(fsdp_check::kMixedPrecisionDtypes, seen == wanted,
                  "saw " + c10::Join(", ", std::vector<std::string>(seen.begin(), seen.end())));
  }

  // Step 2's overflow is in the last rank's first shard alone (as when one
  // rank's elements overflow), so only the group's vote makes the others
  // skip it too.
  void grad_scaler() {
    constexpr int kOverflowStep = 2;
    auto reference = on(make_mlp(18));
    auto reference_optimizer = sgd()(reference->parameters());
    for (int step = 0; step < kShardedSteps; ++step) {
      if (step == kOverflowStep) continue;
      reference_optimizer->zero_grad();
      torch::mse_loss(reference->forward(batch(step, 1, 7)), batch(step, 2, 5)).backward();
      reference_optimizer->step();
    }
    FullyShardedDataParallel model(on(make_mlp(18 + rank_)), group_);
    auto optimizer = sgd()(model->parameters());
    amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024), group_);
    std::vector<int> stepped;
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      scaler
          .scale(torch::mse_loss(model->forward(rows(batch(step, 1, 7), rank_)),
                                 rows(batch(step, 2, 5), rank_)))
          .backward();
      if (step == kOverflowStep && rank_ == world_ - 1) {
        torch::NoGradGuard no_grad;
        for (const auto& piece : model->parameters()) {  // this rank's first element
          if (piece.numel() == 0) continue;
          piece.grad().view({-1})[0].fill_(std::numeric_limits<float>::infinity());
          break;
        }
      }
      stepped.push_back(scaler.step(*optimizer) ? 1 : 0);
      scaler.update();
    }
    std::vector<Tensor> got;
    for (const auto& item : model->full_parameters()) got.push_back(item.value());
    const bool agreed = stepped == std::vector<int>{1, 1, 0, 1} && scaler.get_scale() == 512;
    if (!agreed) {
      checks_.check(fsdp_check::kScaler, false,
                    "stepped " + c10::Join(", ", stepped) + ", scale " +
                        std::to_string(scaler.get_scale()) + " (expected 1, 1, 0, 1 and 512)");
      return;
    }
    checks_.close_all(fsdp_check::kScaler, got, reference->parameters(), 1e-5);
  }

  // Note [The order of a sharded step]: unit u+1's reduce-scatter is
  // issued before unit u's backward computation starts and waited for only
  // after, in the second step (the first records the order).
  void reduction_overlaps() {
    torch::manual_seed(23);
    FullyShardedDataParallel model(
        on(nn::Sequential(ProbedLinear(7, 9, 0), ProbedLinear(9, 9, 1), ProbedLinear(9, 5, 2))),
        group_);
    group_->add_observer(std::make_shared<ReductionEvents>());
    std::vector<std::string> events;
    for (int step = 0; step < 2; ++step) {
      events.clear();
      backward_events = &events;
      torch::mse_loss(model->forward(rows(batch(step, 1, 7), rank_)),
                      rows(batch(step, 2, 5), rank_))
          .backward();
      backward_events = nullptr;
    }
    auto at = [&](const std::string& event) {
      return std::find(events.begin(), events.end(), event) - events.begin();
    };
    bool overlapped = true;
    for (int unit = 2; unit >= 1; --unit) {
      const std::string u = std::to_string(unit), before = std::to_string(unit - 1);
      overlapped = overlapped && at("issue " + u) < at("backward " + before) &&
                   at("backward " + before) < at("end " + u) &&
                   at("end " + u) < static_cast<std::ptrdiff_t>(events.size());
    }
    checks_.check(fsdp_check::kReductionOverlaps, overlapped, "events " + c10::Join(", ", events));
  }

  // One step of the 3-unit MLP.
  void collective_names() {
    FullyShardedDataParallel model(on(make_mlp(19 + rank_)), group_);
    auto names = std::make_shared<CollectiveNames>();
    group_->add_observer(names);
    torch::mse_loss(model->forward(rows(batch(0, 1, 7), rank_)), rows(batch(0, 2, 5), rank_))
        .backward();
    std::set<std::string> expected;
    for (int unit = 0; unit < 3; ++unit) {
      expected.insert("all_gather fsdp.gather " + std::to_string(unit));
      expected.insert("reduce_scatter fsdp.reduce " + std::to_string(unit));
    }
    checks_.check(
        fsdp_check::kCollectiveNames, names->seen == expected,
        "saw " + c10::Join(", ", std::vector<std::string>(names->seen.begin(), names->seen.end())));
  }

  void bad_param_dtype() {
    std::string message;
    try {
      FullyShardedDataParallel model(
          on(make_mlp(1)), FullyShardedDataParallelOptions().param_dtype(torch::kInt), group_);
    } catch (const ConfigError& e) {
      message = e.what();
    }
    checks_.check(fsdp_check::kBadParamDtype,
                  message.find("param_dtype is int32; mixed precision gathers the units in a "
                               "floating-point dtype") != std::string::npos,
                  message.empty() ? "no ConfigError" : message);
  }

  void mismatch() {
    std::string message;
    try {
      FullyShardedDataParallel model(on(make_mlp(1, rank_ == world_ - 1 && world_ > 1 ? 14 : 13)),
                                     group_);
      message = world_ == 1 ? "alone: nothing to differ" : "accepted";
    } catch (const InvalidArgumentError& e) {
      message = e.what();
    }
    const bool named = world_ == 1 || message.find(
                                          "the units differ across ranks at #2: rank 0 "
                                          "has '  0.weight float32 [13, 7]'") != std::string::npos;
    checks_.check(fsdp_check::kUnitMismatch, named, message);
  }

  NamedChecks checks_;
  std::string peak_;
};

}  // namespace

int check_fully_sharded(const std::shared_ptr<ProcessGroup>& group, c10::Device device) {
  return FsdpChecker(group, device).run();
}

}  // namespace ddp::testing
