// The README's 20-line training program, built so that it stays true. Laid
// out by hand to read as one screen in the README, so clang-format leaves it.
// clang-format off
#include <ddp/data/distributed_sampler.hpp>
#include <ddp/data/fashion_mnist.hpp>
#include <ddp/ddp.hpp>
#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(784, 128))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(128, 10))};
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
};
TORCH_MODULE(Net);

int main() {
  auto group = ddp::init();                        // alone, or under ddprun/torchrun/mpirun/srun
  ddp::data::FashionMnist data;                    // /usr/share/datasets/fashion-mnist
  ddp::data::DistributedSampler sampler(data.size().value(), group->size(), group->rank());
  ddp::DistributedDataParallel model(Net(), group);  // rank 0's weights on every rank
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int epoch = 0; epoch < 2; ++epoch) {
    sampler.set_epoch(epoch);                      // a new shuffle, the same on every rank
    torch::Tensor loss;
    for (auto batch = sampler.next(64); !batch.empty(); batch = sampler.next(64)) {
      auto index = torch::tensor(batch);           // this rank's samples of the step
      optimizer.zero_grad();
      loss = torch::nn::functional::cross_entropy(
          model->forward(data.images().index_select(0, index)), data.labels().index_select(0, index));
      loss.backward();                             // gradients averaged across ranks
      optimizer.step();
    }
    if (group->rank() == 0) std::cout << "epoch " << epoch + 1 << " loss " << loss.item<float>() << "\n";
  }
}
// clang-format on
