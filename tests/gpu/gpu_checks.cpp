#include "gpu/gpu_checks.hpp"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/models.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/amp/mixed_precision.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
using examples::ConvNet;
using examples::LeNet5;
using examples::Mlp;

constexpr int64_t kElements = 1003;  // Odd, so that no size is a power of two.
constexpr int64_t kPerRank = 4;      // Samples per rank and step in the training checks.

// 1, 2, 3, 4, 5, 1, 2, ... as float64 on the GPU.
at::Tensor base(int64_t n) {
  return torch::arange(n, torch::dtype(torch::kLong).device(kGpu))
      .remainder(5)
      .add(1)
      .to(torch::kDouble);
}

int64_t factorial(int n) { return n <= 1 ? 1 : n * factorial(n - 1); }

at::Tensor flat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> pieces;
  for (const auto& t : tensors) pieces.push_back(t.detach().to(torch::kFloat).reshape({-1}));
  return torch::cat(pieces);
}

at::Tensor gradients(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters) {
    grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  }
  return flat(grads);
}

// Whether `t` equals rank 0's copy bit for bit.
bool same_as_rank_zero(ProcessGroup& group, const at::Tensor& t) {
  at::Tensor rank0 = t.detach().clone().contiguous();
  group.broadcast(rank0, 0);
  return torch::equal(rank0, t);
}

// Rows [rank * per_rank, (rank + 1) * per_rank) of a batch shared by all ranks.
at::Tensor mine(const at::Tensor& whole, int rank, int64_t per_rank = kPerRank) {
  return whole.narrow(0, rank * per_rank, per_rank);
}

}  // namespace

void exact_float32() {
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
}

std::vector<c10::ScalarType> gpu_collective_dtypes() {
  return {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kHalf, torch::kInt, torch::kLong};
}

std::vector<std::pair<ReduceOp, std::string>> gpu_reduce_ops() {
  return {{ReduceOp::kSum, "sum"},
          {ReduceOp::kAverage, "average"},
          {ReduceOp::kMin, "min"},
          {ReduceOp::kMax, "max"},
          {ReduceOp::kProduct, "product"}};
}

std::string dtype_label(c10::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat:
      return "float32";
    case torch::kDouble:
      return "float64";
    case torch::kBFloat16:
      return "bfloat16";
    case torch::kHalf:
      return "float16";
    case torch::kInt:
      return "int32";
    case torch::kLong:
      return "int64";
    default:
      return c10::toString(dtype);
  }
}

void check_cuda_collectives(ProcessGroup& group, NamedChecks& checks) {
  const int rank = group.rank();
  const int world = group.size();
  const double w = world;
  const at::Tensor b = base(kElements);
  for (auto dtype : gpu_collective_dtypes()) {
    const std::string label = dtype_label(dtype);
    const bool integral = at::isIntegralType(dtype, /*includeBool=*/false);
    auto expect = [&](const std::string& name, const at::Tensor& got, const at::Tensor& expected) {
      if (!got.is_cuda() || got.scalar_type() != dtype) {
        checks.check(name, false,
                     "result on " + got.device().str() + " as " + dtype_label(got.scalar_type()));
        return;
      }
      checks.equal(name, got, expected.to(dtype));
    };
    for (const auto& [op, op_name] : gpu_reduce_ops()) {
      at::Tensor t = (b * (rank + 1)).to(dtype);
      group.all_reduce(t, op);
      at::Tensor expected;
      switch (op) {
        case ReduceOp::kSum:
          expected = b * (w * (w + 1) / 2);
          break;
        case ReduceOp::kAverage:
          expected = integral ? (b * (w * (w + 1) / 2)).div(w, "trunc") : b * ((w + 1) / 2);
          break;
        case ReduceOp::kMin:
          expected = b;
          break;
        case ReduceOp::kMax:
          expected = b * w;
          break;
        case ReduceOp::kProduct:
          expected = b.pow(w) * static_cast<double>(factorial(world));
          break;
      }
      expect("all_reduce " + op_name + " " + label, t, expected);
    }
    {
      at::Tensor t = (b * (rank + 1)).to(dtype);
      group.broadcast(t, world - 1);
      expect("broadcast " + label, t, b * w);
    }
    {
      at::Tensor input = (b * (rank + 1)).to(dtype);
      at::Tensor output = torch::zeros({world * kElements}, input.options());
      group.all_gather(output, input);
      std::vector<at::Tensor> pieces;
      for (int r = 0; r < world; ++r) pieces.push_back(b * (r + 1));
      expect("all_gather " + label, output, torch::cat(pieces));
    }
    {
      const at::Tensor whole = base(world * kElements);
      at::Tensor input = (whole * (rank + 1)).to(dtype);
      at::Tensor output = torch::zeros({kElements}, input.options());
      group.reduce_scatter(output, input, ReduceOp::kSum);
      expect("reduce_scatter sum " + label, output,
             whole.narrow(0, rank * kElements, kElements) * (w * (w + 1) / 2));
    }
  }
  // CPU tensors work on every backend (NCCL stages them through the GPU).
  {
    const at::Tensor b_cpu = b.to(at::kCPU, at::kFloat);
    at::Tensor t = b_cpu * (rank + 1);
    group.all_reduce(t, ReduceOp::kSum);
    checks.equal("cpu tensor all_reduce sum", t, b_cpu * (w * (w + 1) / 2));
    checks.check("cpu tensor stays on the cpu", t.device().is_cpu(), "on " + t.device().str());
    at::Tensor root = b_cpu * (rank + 1);
    group.broadcast(root, world - 1);
    checks.equal("cpu tensor broadcast", root, b_cpu * w);
    at::Tensor gathered = torch::zeros({world * kElements});
    group.all_gather(gathered, b_cpu * (rank + 1));
    std::vector<at::Tensor> pieces;
    for (int r = 0; r < world; ++r) pieces.push_back(b_cpu * (r + 1));
    checks.equal("cpu tensor all_gather", gathered, torch::cat(pieces));
    const at::Tensor whole = base(world * kElements).to(at::kCPU, at::kFloat);
    at::Tensor scattered = torch::zeros({kElements});
    group.reduce_scatter(scattered, whole * (rank + 1), ReduceOp::kSum);
    checks.equal("cpu tensor reduce_scatter sum", scattered,
                 whole.narrow(0, rank * kElements, kElements) * (w * (w + 1) / 2));
  }
  // Past the barrier, every rank's mark made before it is in the store.
  const auto& store = group.rendezvous_store();
  const std::string mark = "gpu-checks/before-barrier/";
  store->set(mark + std::to_string(rank), std::vector<uint8_t>{1});
  group.barrier();
  std::vector<std::string> marks;
  for (int r = 0; r < world; ++r) marks.push_back(mark + std::to_string(r));
  checks.check("barrier", store->check(marks));
  at::Tensor t = (b * (rank + 1)).to(torch::kFloat);
  group.all_reduce_async(t, ReduceOp::kSum).wait();
  checks.equal("asynchronous all_reduce float32", t, (b * (w * (w + 1) / 2)).to(torch::kFloat));
}

namespace {

// Trains `net` under DDP on this rank's rows and `reference` (an identical
// copy) on the whole batch, `steps` SGD steps with momentum, and checks the
// parameters after each step.
template <typename Net>
void compare_training(const std::string& name, Net net, Net reference,
                      const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks,
                      std::vector<int64_t> input_shape, int64_t outputs,
                      DistributedDataParallelOptions options = {}, int steps = 4) {
  const int rank = group->rank();
  const int64_t rows = group->size() * kPerRank;
  net->to(kGpu);
  reference->to(kGpu);
  DistributedDataParallel model(net, options, group);
  auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9);
  torch::optim::SGD optimizer(model->parameters(), sgd);
  torch::optim::SGD reference_optimizer(reference->parameters(), sgd);
  input_shape.insert(input_shape.begin(), rows);
  for (int step = 0; step < steps; ++step) {
    torch::manual_seed(100 + step);
    const at::Tensor x = torch::randn(input_shape, torch::device(kGpu));
    const at::Tensor y = torch::randn({rows, outputs}, torch::device(kGpu));
    optimizer.zero_grad();
    torch::mse_loss(model->forward(mine(x, rank)), mine(y, rank)).backward();
    optimizer.step();
    reference_optimizer.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    reference_optimizer.step();
    checks.close(name + " step " + std::to_string(step) + " parameters", flat(net->parameters()),
                 flat(reference->parameters()), 1e-5);
  }
  checks.check(name + " replicas identical", same_as_rank_zero(*group, flat(net->parameters())),
               "parameters differ from rank 0's");
}

}  // namespace

void check_cuda_ddp(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks) {
  exact_float32();
  torch::manual_seed(1);
  Mlp mlp(20, 32, 4);
  torch::manual_seed(1);
  Mlp mlp_reference(20, 32, 4);
  compare_training("mlp", mlp, mlp_reference, group, checks, {20}, 4);

  torch::manual_seed(2);
  LeNet5 lenet;
  torch::manual_seed(2);
  LeNet5 lenet_reference;
  compare_training("lenet", lenet, lenet_reference, group, checks, {1, 28, 28}, 10);

  torch::manual_seed(3);
  Mlp viewed(20, 32, 4);
  torch::manual_seed(3);
  Mlp viewed_reference(20, 32, 4);
  compare_training("mlp bucket view", viewed, viewed_reference, group, checks, {20}, 4,
                   DistributedDataParallelOptions().gradient_as_bucket_view(true));

  // Two micro-batches under no_sync, then a synchronized one: the gradients
  // are the sum of three whole-batch gradients.
  const int rank = group->rank();
  const int64_t rows = group->size() * kPerRank;
  torch::manual_seed(4);
  Mlp accumulating(20, 32, 4);
  torch::manual_seed(4);
  Mlp reference(20, 32, 4);
  accumulating->to(kGpu);
  reference->to(kGpu);
  DistributedDataParallel model(accumulating, group);
  for (int micro = 0; micro < 3; ++micro) {
    torch::manual_seed(200 + micro);
    const at::Tensor x = torch::randn({rows, 20}, torch::device(kGpu));
    const at::Tensor y = torch::randn({rows, 4}, torch::device(kGpu));
    if (micro < 2) {
      auto guard = model->no_sync();
      torch::mse_loss(model->forward(mine(x, rank)), mine(y, rank)).backward();
    } else {
      torch::mse_loss(model->forward(mine(x, rank)), mine(y, rank)).backward();
    }
    torch::mse_loss(reference->forward(x), y).backward();
  }
  checks.close("no_sync accumulated gradients", gradients(accumulating->parameters()),
               gradients(reference->parameters()), 1e-5);
}

namespace {

// How far `got` is from `expected`, as a fraction of how far `expected`
// travelled from `initial`: 16-bit training may deviate a little from
// float32 training, by much less than the distance both trained.
void expect_close_to_float32_training(NamedChecks& checks, const std::string& name,
                                      const at::Tensor& got, const at::Tensor& expected,
                                      const at::Tensor& initial, double fraction) {
  const double travelled = (expected - initial).abs().max().item<double>();
  const double deviation = (got - expected).abs().max().item<double>();
  checks.check(name, travelled > 0 && deviation <= fraction * travelled,
               "deviation from float32 training " + std::to_string(deviation) + " > " +
                   std::to_string(fraction) + " x distance trained " + std::to_string(travelled));
}

// One opt level and dtype under DDP against float32 training of the same MLP
// on the whole batch.
void check_opt_level(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks,
                     amp::OptLevel level, c10::ScalarType dtype) {
  const std::string prefix = std::string(amp::to_string(level)) + " " + dtype_label(dtype);
  const int rank = group->rank();
  const int64_t rows = group->size() * kPerRank;
  torch::manual_seed(21);
  Mlp net(16, 64, 4);
  torch::manual_seed(21);
  Mlp reference(16, 64, 4);
  net->to(kGpu);
  reference->to(kGpu);
  const at::Tensor initial = flat(reference->parameters());
  auto sgd = torch::optim::SGDOptions(0.2);
  torch::optim::SGD optimizer(net->parameters(), sgd);
  torch::optim::SGD reference_optimizer(reference->parameters(), sgd);
  amp::MixedPrecision mixed(*net, optimizer, amp::AmpOptions(level).dtype(dtype), group);
  if (level == amp::OptLevel::kO2) {
    bool all_16_bit = true;
    for (const auto& p : net->parameters()) all_16_bit = all_16_bit && p.scalar_type() == dtype;
    checks.check(prefix + " model parameters 16-bit", all_16_bit,
                 "a parameter is not " + dtype_label(dtype));
    const auto masters = mixed.master_weights();
    bool all_float = masters.size() == net->parameters().size();
    for (const auto& [name, master] : masters)
      all_float = all_float && master.scalar_type() == torch::kFloat;
    checks.check(prefix + " float32 masters", all_float,
                 std::to_string(masters.size()) + " masters for " +
                     std::to_string(net->parameters().size()) + " parameters, or not float32");
  }
  DistributedDataParallel model(net, group);
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024), group);
  const bool scaled = dtype == torch::kHalf;
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(300 + step);
    const at::Tensor x = torch::randn({rows, 16}, torch::device(kGpu));
    const at::Tensor y = torch::randn({rows, 4}, torch::device(kGpu));
    mixed.zero_grad();
    const at::Tensor output = mixed.forward(model, mine(x, rank));
    if (step == 0) {
      checks.check(prefix + " output float32", output.scalar_type() == torch::kFloat,
                   "output is " + dtype_label(output.scalar_type()));
    }
    const at::Tensor loss = torch::mse_loss(output, mine(y, rank));
    if (scaled) {
      scaler.scale(loss).backward();
      mixed.step(scaler);
      scaler.update();
    } else {
      loss.backward();
      mixed.step();
    }
    reference_optimizer.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    reference_optimizer.step();
  }
  at::Tensor trained;
  if (level == amp::OptLevel::kO2) {
    std::vector<at::Tensor> masters;
    const auto by_name = mixed.master_weights();
    for (const auto& item : net->named_parameters()) {
      auto found = by_name.find("amp.master/" + item.key());
      masters.push_back(found == by_name.end() ? torch::zeros_like(item.value(), torch::kFloat)
                                               : found->second);
    }
    trained = flat(masters);
  } else {
    trained = flat(net->parameters());
  }
  expect_close_to_float32_training(checks, prefix + " close to float32 training", trained,
                                   flat(reference->parameters()), initial, 0.05);
  checks.check(prefix + " replicas identical", same_as_rank_zero(*group, flat(net->parameters())),
               "parameters differ from rank 0's");
}

// An inf injected into the last rank's gradient after DDP's reduction: every
// rank skips the step and halves the scale; the next clean step runs.
void check_scaler_overflow(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks,
                           c10::ScalarType dtype) {
  const std::string prefix = "scaler " + dtype_label(dtype);
  const int rank = group->rank();
  const int64_t rows = group->size() * kPerRank;
  torch::manual_seed(31);
  Mlp net(16, 64, 4);
  net->to(kGpu);
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  amp::MixedPrecision mixed(*net, optimizer, amp::AmpOptions(amp::OptLevel::kO1).dtype(dtype),
                            group);
  DistributedDataParallel model(net, group);
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024), group);
  for (int step = 0; step < 2; ++step) {
    torch::manual_seed(400 + step);
    const at::Tensor x = torch::randn({rows, 16}, torch::device(kGpu));
    const at::Tensor y = torch::randn({rows, 4}, torch::device(kGpu));
    const at::Tensor before = flat(net->parameters());
    mixed.zero_grad();
    scaler.scale(torch::mse_loss(mixed.forward(model, mine(x, rank)), mine(y, rank))).backward();
    const bool inject = step == 0;
    if (inject && rank == group->size() - 1) {
      torch::NoGradGuard no_grad;
      net->parameters()[0].grad().view({-1})[0] = std::numeric_limits<float>::infinity();
    }
    const bool stepped = mixed.step(scaler);
    scaler.update();
    const at::Tensor after = flat(net->parameters());
    if (inject) {
      checks.check(prefix + " inf on the last rank skips the step", !stepped && scaler.found_inf(),
                   std::string("stepped ") + (stepped ? "true" : "false"));
      checks.equal(prefix + " parameters unchanged after the skipped step", after, before);
      checks.check(prefix + " scale halved", scaler.get_scale() == 512.0,
                   "scale " + std::to_string(scaler.get_scale()));
    } else {
      checks.check(prefix + " clean step runs", stepped && !torch::equal(after, before),
                   std::string("stepped ") + (stepped ? "true" : "false"));
    }
  }
  checks.check(prefix + " replicas identical", same_as_rank_zero(*group, flat(net->parameters())),
               "parameters differ from rank 0's");
}

}  // namespace

void check_cuda_amp(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks) {
  exact_float32();
  for (auto dtype : {torch::kHalf, torch::kBFloat16}) {
    {
      const at::Tensor a = torch::randn({8, 8}, torch::device(kGpu));
      amp::AutocastGuard guard(c10::kCUDA, dtype);
      const at::Tensor product = torch::mm(a, a);
      checks.check("O1 " + dtype_label(dtype) + " autocast runs matmul in 16 bits",
                   product.scalar_type() == dtype,
                   "matmul gave " + dtype_label(product.scalar_type()));
    }
    check_opt_level(group, checks, amp::OptLevel::kO1, dtype);
    check_opt_level(group, checks, amp::OptLevel::kO2, dtype);
    check_scaler_overflow(group, checks, dtype);
  }
}

namespace {

// SyncBatchNorm over ranks of uneven batch sizes (4, 6, 8, ...) against
// BatchNorm on the concatenated batch.
void check_sync_batch_norm_case(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks,
                                const std::string& name, std::vector<int64_t> spatial) {
  const int rank = group->rank();
  const int world = group->size();
  const int64_t channels = 3;
  int64_t rows = 0, offset = 0;
  for (int r = 0; r < world; ++r) {
    if (r == rank) offset = rows;
    rows += 4 + 2 * r;
  }
  const int64_t my_rows = 4 + 2 * rank;
  std::vector<int64_t> shape{rows, channels};
  shape.insert(shape.end(), spatial.begin(), spatial.end());
  torch::manual_seed(50);
  const at::Tensor x = torch::randn(shape, torch::device(kGpu)) * 2 + 0.5;
  const at::Tensor gy = torch::randn(shape, torch::device(kGpu));
  const at::Tensor weight = torch::rand({channels}, torch::device(kGpu)) + 0.5;
  const at::Tensor bias = torch::randn({channels}, torch::device(kGpu));

  auto options = nn::BatchNormOptions(channels).momentum(0.1);
  ddp::nn::SyncBatchNorm layer(options, group);
  nn::AnyModule reference = spatial.empty() ? nn::AnyModule(nn::BatchNorm1d(options))
                                            : nn::AnyModule(nn::BatchNorm2d(options));
  layer->to(kGpu);
  reference.ptr()->to(kGpu);
  auto reference_parameters = reference.ptr()->named_parameters();
  {
    torch::NoGradGuard no_grad;
    layer->weight.copy_(weight);
    layer->bias.copy_(bias);
    reference_parameters["weight"].copy_(weight);
    reference_parameters["bias"].copy_(bias);
  }
  const at::Tensor input = x.narrow(0, offset, my_rows).clone().requires_grad_(true);
  const at::Tensor output = layer->forward(input);
  (output * gy.narrow(0, offset, my_rows)).sum().backward();

  const at::Tensor whole = x.clone().requires_grad_(true);
  const at::Tensor expected = reference.forward(whole);
  (expected * gy).sum().backward();

  checks.check(name + " output on the GPU", output.is_cuda(), "output on " + output.device().str());
  checks.close(name + " output", output, expected.narrow(0, offset, my_rows), 1e-5);
  checks.close(name + " input gradient", input.grad(), whole.grad().narrow(0, offset, my_rows),
               1e-4);
  at::Tensor weight_grad = layer->weight.grad().clone();
  at::Tensor bias_grad = layer->bias.grad().clone();
  group->all_reduce(weight_grad, ReduceOp::kSum);
  group->all_reduce(bias_grad, ReduceOp::kSum);
  checks.close(name + " weight gradient summed over ranks", weight_grad,
               reference_parameters["weight"].grad(), 1e-5);
  checks.close(name + " bias gradient summed over ranks", bias_grad,
               reference_parameters["bias"].grad(), 1e-5);
  auto buffers = reference.ptr()->named_buffers();
  checks.close(name + " running mean", layer->running_mean, buffers["running_mean"], 1e-5);
  checks.close(name + " running var", layer->running_var, buffers["running_var"], 1e-5);
}

}  // namespace

void check_cuda_sync_batch_norm(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks) {
  exact_float32();
  check_sync_batch_norm_case(group, checks, "batch norm 1d", {});
  check_sync_batch_norm_case(group, checks, "batch norm 2d", {5, 5});

  // The tutorial's ConvNet with SyncBatchNorm under DDP equals one process
  // running BatchNorm on the whole batch.
  torch::manual_seed(5);
  ConvNet net;
  torch::manual_seed(5);
  ConvNet reference;
  ddp::nn::convert_sync_batchnorm(net.ptr(), group);
  compare_training("convnet sync batch norm", net, reference, group, checks, {1, 28, 28}, 10,
                   DistributedDataParallelOptions(), 3);
  std::vector<at::Tensor> statistics, expected;
  for (const auto& item : net->named_buffers()) {
    if (item.key().find("running_") != std::string::npos) statistics.push_back(item.value());
  }
  for (const auto& item : reference->named_buffers()) {
    if (item.key().find("running_") != std::string::npos) expected.push_back(item.value());
  }
  checks.close("convnet sync batch norm running statistics", flat(statistics), flat(expected),
               1e-4);
}

}  // namespace ddp::testing
