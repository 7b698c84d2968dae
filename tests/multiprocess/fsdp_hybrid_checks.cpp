// Hybrid sharding on a DeviceMesh of a row per node against one process
// (Note [Hybrid sharding] in src/parallel/fully_sharded/sharded_unit.hpp).

#include "multiprocess/fsdp_hybrid_checks.hpp"

#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <string>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/collective_observer.hpp"
#include "ddp/comm/device_mesh.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/checkpoint.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/sharded_construction.hpp"
#include "multiprocess/fsdp_models.hpp"
#include "multiprocess/fsdp_observers.hpp"
#include "multiprocess/fsdp_trainer.hpp"

namespace ddp::testing {
namespace {

using namespace fsdp_models;  // NOLINT(google-build-using-namespace)

namespace nn = torch::nn;

// An MLP like make_mlp's, each Linear sharded as built while a
// ShardedConstruction is alive (a plain model otherwise).
nn::Sequential built_mlp(uint64_t seed) {
  torch::manual_seed(seed);
  auto first = shard_as_built(nn::Linear(7, 13));
  auto second = shard_as_built(nn::Linear(13, 9));
  auto third = shard_as_built(nn::Linear(9, 5));
  return nn::Sequential(first, nn::ReLU(), second, nn::Tanh(), third);
}

// make_mlp's Linear layers, each run through ddp::nn::checkpoint: a unit
// each (wrap_by_type<nn::LinearImpl>), recomputed in backward.
struct CheckpointedMlpImpl : nn::Module {
  explicit CheckpointedMlpImpl(const nn::Sequential& mlp)
      : first(register_module("first", nn::Linear(mlp->ptr<nn::LinearImpl>(0)))),
        second(register_module("second", nn::Linear(mlp->ptr<nn::LinearImpl>(2)))),
        third(register_module("third", nn::Linear(mlp->ptr<nn::LinearImpl>(4)))) {}
  Tensor forward(Tensor x) {
    x = torch::relu(ddp::nn::checkpoint(first, x));
    x = torch::tanh(ddp::nn::checkpoint(second, x));
    return ddp::nn::checkpoint(third, x);
  }
  nn::Linear first, second, third;
};
TORCH_MODULE(CheckpointedMlp);

class FsdpHybridChecker : FsdpTrainer {
 public:
  explicit FsdpHybridChecker(const std::shared_ptr<ProcessGroup>& group)
      : FsdpTrainer(group, c10::kCPU) {}

  // Note [Hybrid sharding]: a row per node (the launcher's nodes).
  int run() {
    auto mesh = DeviceMesh::by_node(group_);
    std::cout << "mesh=" << mesh->describe() << "\n";  // FsdpHybrid reads it
    mesh_groups(*mesh);
    const auto options = FullyShardedDataParallelOptions().device_mesh(mesh);
    const auto expected = reference(make_mlp(6), adamw());
    auto [got, sizes, freed] = train(make_mlp(6 + rank_), adamw(), options);
    checks_.close_all(fsdp_check::kHybridAdamW, got, expected, 1e-5);
    checks_.check(fsdp_check::kHybridShards, sizes.empty() && freed.empty(), sizes + freed);
    {  // Note [Sharded construction], each row building the same shards;
       // without a construction alive the same code builds a plain model
      const auto plain = reference(built_mlp(6), adamw());
      ShardedConstruction construction(mesh->shard_group());
      FullyShardedDataParallel built(built_mlp(6), options, group_);
      checks_.close_all(fsdp_check::kHybridBuiltSharded, steps(built), plain, 1e-5);
    }
    replication_overlaps(mesh, options);
    hybrid_clip(options);
    resharded_to_the_node(mesh);
    hybrid_refusals(mesh);
    return checks_.failed();
  }

 private:
  // kShardedSteps of AdamW on this rank's rows; `around_backward(true)`
  // runs before each backward, `around_backward(false)` after it. The full
  // parameters after.
  std::vector<Tensor> steps(FullyShardedDataParallel& model,
                            const std::function<void(bool)>& around_backward = nullptr) {
    auto optimizer = adamw()(model->parameters());
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      auto loss = torch::mse_loss(model->forward(rows(batch(step, 1, 7), rank_)),
                                  rows(batch(step, 2, 5), rank_));
      if (around_backward) around_backward(true);
      loss.backward();
      if (around_backward) around_backward(false);
      optimizer->step();
    }
    std::vector<Tensor> full;
    for (const auto& item : model->full_parameters()) full.push_back(item.value());
    return full;
  }

  // Rows and columns against closed forms: rank r adds r + 1.
  void mesh_groups(const DeviceMesh& mesh) {
    const int shard = mesh.shard(), replicate = mesh.replicate();
    const int row = mesh.replicate_rank(), column = mesh.shard_rank();
    Tensor across_row = torch::full({3}, rank_ + 1.0), across_column = across_row.clone();
    mesh.shard_group()->all_reduce(across_row);
    mesh.replicate_group()->all_reduce(across_column);
    const double row_sum = shard * row * shard + shard * (shard + 1) / 2.0;
    const double column_sum =
        shard * replicate * (replicate - 1) / 2.0 + replicate * (column + 1.0);
    const std::string column_backend = replicate > 1 ? "gloo" : "shm";
    const bool ok = replicate * shard == world_ && shard == group_->topology().local_world_size &&
                    mesh.shard_group()->rank() == column && mesh.replicate_group()->rank() == row &&
                    across_row.eq(row_sum).all().item<bool>() &&
                    across_column.eq(column_sum).all().item<bool>() &&
                    mesh.shard_group()->backend_name() == "shm" &&
                    mesh.replicate_group()->backend_name() == column_backend;
    checks_.check(fsdp_check::kMeshGroups, ok,
                  mesh.describe() + ": row sum " + std::to_string(across_row[0].item<double>()) +
                      " (expected " + std::to_string(row_sum) + "), column sum " +
                      std::to_string(across_column[0].item<double>()) + " (expected " +
                      std::to_string(column_sum) + ")");
  }

  // Each unit's all-reduce across the rows runs on beside the backward of
  // the unit before it, past that unit's reduce-scatter: with 3 units, two
  // reduce-scatters per step start while one is on its way.
  void replication_overlaps(const std::shared_ptr<DeviceMesh>& mesh,
                            const FullyShardedDataParallelOptions& options) {
    auto seen = std::make_shared<ReplicationsInFlight>();
    FullyShardedDataParallel model(on(make_mlp(9 + rank_)), options, group_);
    mesh->shard_group()->add_observer(seen);
    mesh->replicate_group()->add_observer(seen);
    steps(model);
    const bool replicated = mesh->replicate() > 1;
    const int units = static_cast<int>(model->unit_numels().size());
    const int replications = replicated ? units * kShardedSteps : 0;
    const int overlapped = replicated ? (units - 1) * kShardedSteps : 0;
    checks_.check(
        fsdp_check::kHybridReplicationOverlaps,
        seen->replications == replications && seen->overlapped == overlapped && seen->running == 0,
        "all-reduces across the rows " + std::to_string(seen->replications) + " (expected " +
            std::to_string(replications) + "), reduce-scatters started beside one " +
            std::to_string(seen->overlapped) + " (expected " + std::to_string(overlapped) +
            "), still running after the steps " + std::to_string(seen->running));
  }

  // clip_grad_norm's norm over the whole gradient, once per row.
  void hybrid_clip(const FullyShardedDataParallelOptions& options) {
    auto reference_model = on(make_mlp(7));
    torch::mse_loss(reference_model->forward(batch(0, 1, 7)), batch(0, 2, 5)).backward();
    double squares = 0;
    for (const auto& p : reference_model->parameters())
      squares += p.grad().pow(2).sum().item<double>();
    FullyShardedDataParallel model(on(make_mlp(7 + rank_)), options, group_);
    torch::mse_loss(model->forward(rows(batch(0, 1, 7), rank_)), rows(batch(0, 2, 5), rank_))
        .backward();
    const double norm = model->clip_grad_norm(1e9), expected = std::sqrt(squares);
    checks_.check(fsdp_check::kHybridClip, std::abs(norm - expected) <= 1e-5 * expected,
                  "norm " + std::to_string(norm) + ", one process " + std::to_string(expected));
  }

  // Note [Resharding to the node]: sharded across the world, each unit kept
  // sharded across the node from its forward to its backward, whose
  // gathers stay there.
  void resharded_to_the_node(const std::shared_ptr<DeviceMesh>& mesh) {
    bool in_backward = false;
    auto on_world = std::make_shared<UnitGathers>(&in_backward);
    auto on_node = std::make_shared<UnitGathers>(&in_backward);
    group_->add_observer(on_world);
    mesh->shard_group()->add_observer(on_node);
    const auto expected = reference(make_mlp(6), adamw());
    FullyShardedDataParallel model(
        on(make_mlp(6 + rank_)), FullyShardedDataParallelOptions().reshard_after_forward_mesh(mesh),
        group_);
    int64_t held = 0;  // after the last forward
    const auto got = steps(model, [&](bool backward) {
      if (backward) held = model->memory().gathered_bytes;
      in_backward = backward;
    });
    checks_.close_all(fsdp_check::kNodeReshardAdamW, got, expected, 1e-5);
    // Three units: the backward gathers two or three (the last one run is
    // kept gathered once the order is known), each within the node. After a
    // forward the first two hold their node slices, the last its whole.
    const bool node_only = on_world->backward == 0 && on_node->forward == 0 &&
                           on_node->backward >= 2 * kShardedSteps &&
                           on_world->forward >= 3 * kShardedSteps;
    const auto numels = model->unit_numels();
    int64_t expected_held = 0;
    for (size_t u = 0; u < numels.size(); ++u) {
      const int64_t padded = (numels[u] + world_ - 1) / world_ * world_;
      expected_held += (u + 1 < numels.size() ? padded / mesh->shard() : padded) * 4;
    }
    checks_.check(fsdp_check::kNodeReshardGathers, node_only && held == expected_held,
                  "forward gathers on the world " + std::to_string(on_world->forward) +
                      ", on the node " + std::to_string(on_node->forward) +
                      "; backward gathers on the world " + std::to_string(on_world->backward) +
                      ", on the node " + std::to_string(on_node->backward) +
                      "; bytes held after the last forward " + std::to_string(held) +
                      " (expected " + std::to_string(expected_held) + ")");
    // Checkpointed units: each recompute in backward gathers from the slice
    // kept since the first run, within the node.
    on_world->forward = on_world->backward = on_node->forward = on_node->backward = 0;
    FullyShardedDataParallel checkpointed(CheckpointedMlp(on(make_mlp(6 + rank_))),
                                          FullyShardedDataParallelOptions()
                                              .wrap_policy(wrap_by_type<nn::LinearImpl>())
                                              .reshard_after_forward_mesh(mesh),
                                          group_);
    const auto recomputed = steps(checkpointed, [&](bool backward) { in_backward = backward; });
    const bool recomputed_on_node =
        on_world->backward == 0 && on_node->forward == 0 && on_node->backward == 3 * kShardedSteps;
    if (!recomputed_on_node) {
      checks_.check(fsdp_check::kNodeReshardCheckpointed, false,
                    "backward gathers on the world " + std::to_string(on_world->backward) +
                        ", on the node " + std::to_string(on_node->backward) + " (expected " +
                        std::to_string(3 * kShardedSteps) + "); forward gathers on the node " +
                        std::to_string(on_node->forward));
    } else {
      checks_.close_all(fsdp_check::kNodeReshardCheckpointed, recomputed, expected, 1e-5);
    }
  }

  void hybrid_refusals(const std::shared_ptr<DeviceMesh>& mesh) {
    std::string problems;
    auto expect_named = [&](const std::string& what, const std::string& needle, auto&& action) {
      try {
        action();
        problems += what + ": no error; ";
      } catch (const ConfigError& error) {
        if (std::string(error.what()).find(needle) == std::string::npos) {
          problems += what + ": " + error.what() + "; ";
        }
      }
    };
    expect_named("a mesh of the wrong shape", "replicate x shard must be the world size",
                 [&] { DeviceMesh(group_, world_ + 1, 1); });
    expect_named("a mesh of another group", "the device_mesh's world is another process group",
                 [&] {
                   FullyShardedDataParallel(on(make_mlp(8)),
                                            FullyShardedDataParallelOptions().device_mesh(mesh),
                                            mesh->shard_group());
                 });
    expect_named("a construction over the world", "ddp::ShardedConstruction(mesh->shard_group())",
                 [&] {
                   ShardedConstruction construction(group_);
                   FullyShardedDataParallel(
                       built_mlp(8), FullyShardedDataParallelOptions().device_mesh(mesh), group_);
                 });
    expect_named("hpZ beside a device_mesh", "but device_mesh is set", [&] {
      FullyShardedDataParallel(
          on(make_mlp(8)),
          FullyShardedDataParallelOptions().device_mesh(mesh).reshard_after_forward_mesh(mesh),
          group_);
    });
    expect_named("hpZ without reshard_after_forward", "but reshard_after_forward is false", [&] {
      FullyShardedDataParallel(
          on(make_mlp(8)),
          FullyShardedDataParallelOptions().reshard_after_forward(false).reshard_after_forward_mesh(
              mesh),
          group_);
    });
    checks_.check(fsdp_check::kHybridRefusals, problems.empty(), problems);
  }

  NamedChecks checks_;
};

}  // namespace

int check_fully_sharded_hybrid(const std::shared_ptr<ProcessGroup>& group) {
  return FsdpHybridChecker(group).run();
}

}  // namespace ddp::testing
