// The ATen operator calls of one ddp::optim::SGD step, counted at the top
// level (the calls no other ATen call encloses: the ones the optimizer
// itself makes, as benchmarks/op_count_bench.cpp counts them): a fixed
// number per (device, dtype) list, whatever the number of parameters, and
// fewer than torch::optim::SGD's, which makes its calls per parameter.

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddp/optim/sgd.hpp"

namespace {

using torch::optim::SGDOptions;

// The calls counted on this thread: top-level ATen operator calls by name.
thread_local std::map<std::string, int64_t>* t_top_level_calls = nullptr;
thread_local int t_aten_depth = 0;

bool is_aten_operator(const at::RecordFunction& fn) {
  return fn.operator_name().has_value() && std::strncmp(fn.name(), "aten::", 6) == 0;
}

std::unique_ptr<at::ObserverContext> on_call_start(const at::RecordFunction& fn) {
  if (!is_aten_operator(fn)) return nullptr;
  if (t_aten_depth++ == 0 && t_top_level_calls != nullptr) ++(*t_top_level_calls)[fn.name()];
  return nullptr;
}

void on_call_end(const at::RecordFunction& fn, at::ObserverContext* /*context*/) {
  if (is_aten_operator(fn)) --t_aten_depth;
}

// The top-level ATen calls of one optimizer.step(), by name.
std::map<std::string, int64_t> calls_of_step(torch::optim::Optimizer& optimizer) {
  std::map<std::string, int64_t> calls;
  t_top_level_calls = &calls;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_call_start, on_call_end).scopes({at::RecordScope::FUNCTION}));
  optimizer.step();
  at::removeCallback(handle);
  t_top_level_calls = nullptr;
  return calls;
}

int64_t count_of(const std::map<std::string, int64_t>& calls, const std::string& name) {
  const auto found = calls.find(name);
  return found == calls.end() ? 0 : found->second;
}

int64_t total(const std::map<std::string, int64_t>& calls) {
  int64_t sum = 0;
  for (const auto& item : calls) sum += item.second;
  return sum;
}

std::string listed(const std::map<std::string, int64_t>& calls) {
  std::string text;
  for (const auto& [name, count] : calls) text += name + " x" + std::to_string(count) + " ";
  return text;
}

// `count` parameters (alternately float32 and, with `mixed`, float64) with
// gradients, and `optimizer` stepped once so that every momentum buffer
// exists; then the calls of the second step.
template <typename Optimizer>
std::map<std::string, int64_t> calls_of_second_step(int count, const SGDOptions& options,
                                                    bool mixed = false) {
  torch::manual_seed(8);
  std::vector<at::Tensor> params;
  for (int i = 0; i < count; ++i) {
    const auto dtype = mixed && i % 2 == 1 ? torch::kDouble : torch::kFloat;
    params.push_back(torch::randn({8}, torch::dtype(dtype)).requires_grad_(true));
  }
  Optimizer optimizer(params, options);
  for (int step = 0; step < 2; ++step) {
    optimizer.zero_grad();
    at::Tensor loss = torch::zeros({}, torch::kDouble);
    for (const auto& p : params) loss = loss + p.pow(2).sum().to(torch::kDouble);
    loss.backward();
    if (step == 0) optimizer.step();
  }
  return calls_of_step(optimizer);
}

TEST(OptimSgdCalls, MomentumStepMakesThreeCallsWhateverTheNumberOfParameters) {
  const SGDOptions options = SGDOptions(0.01).momentum(0.9);
  const auto two = calls_of_second_step<ddp::optim::SGD>(2, options);
  const auto sixty_two = calls_of_second_step<ddp::optim::SGD>(62, options);  // ResNet-18's
  // buf.mul_(momentum), buf.add_(d_p, 1 - dampening), p.add_(buf, -lr): one
  // call each for the whole list.
  const std::map<std::string, int64_t> expected{{"aten::_foreach_mul_", 1},
                                                {"aten::_foreach_add_", 2}};
  EXPECT_EQ(two, expected) << listed(two);
  EXPECT_EQ(sixty_two, expected) << listed(sixty_two);
  // LibTorch's makes the same three per parameter.
  const auto libtorch_two = calls_of_second_step<torch::optim::SGD>(2, options);
  const auto libtorch = calls_of_second_step<torch::optim::SGD>(62, options);
  EXPECT_EQ(count_of(libtorch, "aten::mul_"), 62) << listed(libtorch);
  EXPECT_EQ(count_of(libtorch, "aten::add_"), 2 * 62) << listed(libtorch);
  EXPECT_EQ(total(libtorch), 31 * total(libtorch_two)) << listed(libtorch);
  EXPECT_LT(total(sixty_two), total(libtorch));
}

TEST(OptimSgdCalls, EveryOptionMakesAtMostFiveCallsPerList) {
  // With weight decay and Nesterov: d_p.add(p, weight_decay) and
  // d_p.add(buf, momentum) too.
  const SGDOptions options = SGDOptions(0.01).momentum(0.9).nesterov(true).weight_decay(1e-4);
  const auto two = calls_of_second_step<ddp::optim::SGD>(2, options);
  const auto sixty_two = calls_of_second_step<ddp::optim::SGD>(62, options);
  const std::map<std::string, int64_t> expected{
      {"aten::_foreach_add", 2}, {"aten::_foreach_mul_", 1}, {"aten::_foreach_add_", 2}};
  EXPECT_EQ(two, expected) << listed(two);
  EXPECT_EQ(sixty_two, expected) << listed(sixty_two);
  const auto libtorch = calls_of_second_step<torch::optim::SGD>(62, options);
  EXPECT_EQ(count_of(libtorch, "aten::add"), 2 * 62) << listed(libtorch);
  EXPECT_EQ(count_of(libtorch, "aten::mul_"), 62) << listed(libtorch);
  EXPECT_EQ(count_of(libtorch, "aten::add_"), 2 * 62) << listed(libtorch);
  // Without momentum the update alone: p.add_(grad, -lr).
  const auto plain = calls_of_second_step<ddp::optim::SGD>(62, SGDOptions(0.01));
  EXPECT_EQ(plain, (std::map<std::string, int64_t>{{"aten::_foreach_add_", 1}})) << listed(plain);
}

TEST(OptimSgdCalls, OneSetOfCallsPerDtype) {
  const SGDOptions options = SGDOptions(0.01).momentum(0.9);
  const auto mixed = calls_of_second_step<ddp::optim::SGD>(62, options, /*mixed=*/true);
  const std::map<std::string, int64_t> expected{{"aten::_foreach_mul_", 2},
                                                {"aten::_foreach_add_", 4}};
  EXPECT_EQ(mixed, expected) << listed(mixed);
}

}  // namespace
