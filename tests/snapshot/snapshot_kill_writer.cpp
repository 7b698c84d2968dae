// snapshot_kill_writer: a trainer that only writes large snapshots, for
// SnapshotKill (snapshot_kill_test.cpp), which SIGKILLs it mid-write.
//
//   snapshot_kill_writer write DIR VALUE   fills a 256 MiB model with VALUE and
//                                          saves it (epoch = VALUE) into DIR,
//                                          printing "writing" just before
//   snapshot_kill_writer write-async DIR VALUE
//                                          the same with save_async(): prints
//                                          "writing", then "training" once
//                                          save_async() returned, trains while
//                                          the background thread writes, and
//                                          "saved PATH after N steps"
//   snapshot_kill_writer check DIR         resumes from DIR and prints
//                                          "resumed epoch E, every weight E" or
//                                          what was wrong

#include <torch/torch.h>

#include <iostream>
#include <string>

#include "ddp/comm/init.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace {

// 8192 x 8192 floats: one 256 MiB parameter.
constexpr int64_t kSide = 8192;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: snapshot_kill_writer write|write-async DIR VALUE | check DIR" << std::endl;
    return 2;
  }
  const std::string mode = argv[1];
  auto group = ddp::init(ddp::InitOptions(), ddp::EnvironmentMap{});
  // Three snapshots kept: the base, and a complete new one while the next
  // write is under way.
  ddp::snapshot::SnapshotManager snapshots(ddp::snapshot::SnapshotOptions(argv[2]).keep_last(3),
                                           group);
  torch::NoGradGuard no_grad;
  torch::nn::Linear model(torch::nn::LinearOptions(kSide, kSide).bias(false));
  ddp::snapshot::TrainingState state;
  state.model = model.ptr().get();
  state.include_rng = false;
  if (mode == "write" && argc == 4) {
    const int64_t value = std::stoll(argv[3]);
    model->weight.fill_(static_cast<float>(value));
    state.epoch = value;
    std::cout << "writing" << std::endl;
    std::cout << "saved " << snapshots.save(state) << std::endl;
    return 0;
  }
  if (mode == "write-async" && argc == 4) {
    const int64_t value = std::stoll(argv[3]);
    model->weight.fill_(static_cast<float>(value));
    state.epoch = value;
    std::cout << "writing" << std::endl;
    const std::string path = snapshots.save_async(state);
    std::cout << "training" << std::endl;
    torch::Tensor x = torch::rand({64, 512}), w = torch::rand({512, 512});
    int64_t steps = 0;
    for (; snapshots.save_in_flight(); ++steps) x = torch::tanh(x.mm(w));  // a compute step
    snapshots.wait();
    std::cout << "saved " << path << " after " << steps << " steps" << std::endl;
    return 0;
  }
  if (mode == "check") {
    if (!snapshots.resume(state)) {
      std::cout << "nothing to resume" << std::endl;
      return 1;
    }
    const bool uniform = model->weight.eq(static_cast<float>(state.epoch)).all().item<bool>();
    std::cout << "resumed epoch " << state.epoch
              << (uniform ? ", every weight " + std::to_string(state.epoch) : ", weights differ")
              << std::endl;
    return uniform ? 0 : 1;
  }
  std::cerr << "unknown mode '" << mode << "'" << std::endl;
  return 2;
}
