// The wrap-a-model example of docs/guide/ddp.md, built so that it stays true.
#include <torch/torch.h>
#include <ddp/ddp.hpp>

struct NetImpl : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(20, 64))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(64, 1))};
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
};
TORCH_MODULE(Net);

int main() {
  auto group = ddp::init();                          // run under ddprun/torchrun/mpirun/srun
  ddp::DistributedDataParallel model(Net(), group);  // checks ranks agree, copies rank 0's weights
  torch::optim::SGD optimizer(model->parameters(), 1e-3);
  for (int step = 0; step < 100; ++step) {
    auto x = torch::rand({32, 20}), y = torch::rand({32, 1});  // this rank's shard
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();  // gradients averaged across ranks
    optimizer.step();
  }
}
