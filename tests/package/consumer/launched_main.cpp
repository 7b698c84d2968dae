// Built outside ddp's tree against the installed package and started by the
// installed ddprun (its variables and job secret): each rank trains a
// DDP-wrapped linear layer for two SGD steps on rank-dependent data, checks
// that both ranks hold the same weights, and saves a snapshot into the
// directory given, which the installed ddp-export then turns into a
// torch.save file. Rank 0 prints the weights it saved.
#include <torch/torch.h>
#include <ddp/ddp.hpp>
#include <ddp/snapshot/snapshot_manager.hpp>

#include <iomanip>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer_launched SNAPSHOT_DIR (under ddprun)" << std::endl;
    return 2;
  }
  try {
    auto group = ddp::init(ddp::InitOptions().backend("gloo"));
    torch::manual_seed(1);
    torch::nn::Linear net(3, 2);
    ddp::DistributedDataParallel model(net, group);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
    for (int step = 0; step < 2; ++step) {
      const auto x = torch::full({4, 3}, 1.0 + group->rank() + step);
      optimizer.zero_grad();
      model->forward(x).pow(2).sum().backward();
      optimizer.step();
    }
    at::Tensor weight = net->weight.detach().clone();
    at::Tensor theirs = weight.clone();
    group->broadcast(theirs, 0);
    if (!torch::equal(weight, theirs)) {
      std::cerr << "rank " << group->rank() << ": weights differ from rank 0's" << std::endl;
      return 1;
    }
    ddp::snapshot::SnapshotManager snapshots(ddp::snapshot::SnapshotOptions(argv[1]), group);
    ddp::snapshot::TrainingState state;
    state.model = net.ptr().get();
    state.optimizer = &optimizer;
    state.epoch = 1;
    snapshots.save(state);
    if (group->rank() == 0) {
      std::cout << "consumer_launched: weight" << std::setprecision(9);
      const auto flat = weight.flatten();
      for (int64_t i = 0; i < flat.numel(); ++i) std::cout << " " << flat[i].item<float>();
      std::cout << std::endl;
    }
    return 0;
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  }
}
