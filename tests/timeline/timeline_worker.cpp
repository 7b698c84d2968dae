// timeline_test_worker: one rank of a timeline test, started by
// timeline_test.cpp with DDP_TIMELINE set.
//
//   timeline_test_worker record BACKEND   every kind of collective ddp issues;
//                                         checks its own file (named checks,
//                                         tests/common/named_checks.hpp)
//   timeline_test_worker killed BACKEND   rank 1 SIGKILLs itself mid-run with
//                                         a collective in flight
//
// Exit codes and errors as tests/common/worker_main.hpp says.
//
// Every collective goes through a CountingGroup (counting_group.hpp), which
// hands it on to the real group's public method: the count is independent
// of the timeline, and the nesting is the one `auto` does.

#include <torch/torch.h>

#include <csignal>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "common/worker_main.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/hvd.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/timeline/timeline.hpp"
#include "timeline/counting_group.hpp"
#include "timeline/trace_checks.hpp"

namespace {

using ddp::testing::CountingGroup;

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(6, 8))),
        fc2(register_module("fc2", torch::nn::Linear(8, 8))),
        fc3(register_module("fc3", torch::nn::Linear(8, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

// "name: got N, expected M" for a count check.
std::string counted(const std::vector<nlohmann::json>& events, const std::string& prefix,
                    int64_t expected) {
  return "'" + prefix + "' events: got " +
         std::to_string(ddp::testing::count_named(events, prefix)) + ", expected " +
         std::to_string(expected);
}

// User collectives: 9 in all, 8 outside any scope and 1 named.
void user_collectives(ddp::ProcessGroup& group) {
  const int world = group.size();
  torch::Tensor values = torch::ones({1000});
  group.all_reduce(values, ddp::ReduceOp::kSum);
  group.all_reduce_async(values, ddp::ReduceOp::kAverage).wait();
  group.broadcast(values, world - 1);
  torch::Tensor gathered = torch::empty({world * 1000});
  group.all_gather(gathered, values);
  torch::Tensor scattered = torch::empty({1000});
  group.reduce_scatter(scattered, gathered, ddp::ReduceOp::kSum);
  group.barrier();
  torch::Tensor never_waited = torch::ones({10}, torch::kLong);
  { ddp::Work dropped = group.all_reduce_async(never_waited, ddp::ReduceOp::kMax); }
  group.all_reduce(torch::zeros({3}, torch::kDouble), ddp::ReduceOp::kMin);
  ddp::timeline::NameScope scope("user.metrics");
  group.all_reduce(torch::ones({4}), ddp::ReduceOp::kSum);
}

int64_t train_ddp(const std::shared_ptr<ddp::ProcessGroup>& group, int steps) {
  torch::manual_seed(1);
  ddp::DistributedDataParallel model(Mlp(), group);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  int64_t buckets = 0;
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    model->forward(torch::randn({4, 6})).pow(2).mean().backward();
    optimizer.step();
    buckets += static_cast<int64_t>(model->stats().bucket_bytes.size());
  }
  return buckets;
}

void train_horovod(const std::shared_ptr<ddp::ProcessGroup>& group, int64_t fusion_threshold_bytes,
                   int steps) {
  torch::manual_seed(2);
  Mlp model;
  ddp::hvd::DistributedOptimizer optimizer(
      torch::optim::Adam(model->parameters(), 1e-3),
      ddp::hvd::DistributedOptimizerOptions().process_group(group).fusion_threshold_bytes(
          fusion_threshold_bytes));
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    model->forward(torch::randn({4, 6})).pow(2).mean().backward();
    optimizer.step();
  }
  ddp::hvd::broadcast_parameters(*model, 0, group);
  ddp::hvd::broadcast_optimizer_state(optimizer.optimizer(), 0, group);
}

int record(const std::shared_ptr<ddp::ProcessGroup>& real) {
  using namespace ddp::testing::timeline_check;  // NOLINT(google-build-using-namespace)
  auto group = std::make_shared<CountingGroup>(real);
  ddp::testing::NamedChecks checks;
  checks.check(kStarted, ddp::timeline::recording(), "not recording");
  const std::string path = ddp::timeline::current_path();

  user_collectives(*group);
  const int64_t ddp_buckets = train_ddp(group, 3);
  train_horovod(group, /*fusion_threshold_bytes=*/64 << 20, 2);  // 1 buffer per step
  train_horovod(group, /*fusion_threshold_bytes=*/0, 1);         // 6 gradients, 6 all-reduces
  const int64_t issued = group->issued();

  // The file is read while the timeline is still being recorded: it must
  // be complete JSON at every moment.
  nlohmann::json trace = ddp::testing::read_trace(path);
  checks.check(kParsesWhileRecording, trace.is_array(), "it does not: " + path);
  auto events = ddp::testing::complete_events(trace);
  checks.check(
      kOneEventPerCollective, static_cast<int64_t>(events.size()) == issued,
      std::to_string(events.size()) + " events, " + std::to_string(issued) + " collectives issued");
  checks.check(
      kEventsWritten, ddp::timeline::events_written() == issued,
      std::to_string(ddp::timeline::events_written()) + ", expected " + std::to_string(issued));
  checks.check(kDdpBuckets, ddp::testing::count_named(events, "ddp.bucket ") == ddp_buckets,
               counted(events, "ddp.bucket ", ddp_buckets));
  checks.check(kFusionBuffers, ddp::testing::count_named(events, "hvd.fusion_buffer 0") == 2,
               counted(events, "hvd.fusion_buffer 0", 2));
  checks.check(kUnfused, ddp::testing::count_named(events, "hvd.allreduce ") == 6,
               counted(events, "hvd.allreduce ", 6));
  checks.check(kBroadcastParameters,
               ddp::testing::count_named(events, "hvd.broadcast_parameters") == 2 * 2,
               counted(events, "hvd.broadcast_parameters", 2 * 2));
  checks.check(kBroadcastOptimizerState,
               ddp::testing::count_named(events, "hvd.broadcast_optimizer_state") == 2 * 5,
               counted(events, "hvd.broadcast_optimizer_state", 2 * 5));
  checks.check(kNameScope, ddp::testing::count_named(events, "user.metrics") == 1,
               counted(events, "user.metrics", 1));
  std::string unscoped;
  for (const char* op :
       {"all_reduce(sum)", "all_reduce(average)", "all_reduce(max)", "all_reduce(min)", "broadcast",
        "all_gather", "reduce_scatter(sum)", "barrier"}) {
    unscoped += std::string(unscoped.empty() ? "" : "; ") + counted(events, op, 1);
  }
  checks.check(kUnscoped,
               ddp::testing::count_named(events, "all_reduce(sum)") == 1 &&
                   ddp::testing::count_named(events, "all_reduce(average)") == 1 &&
                   ddp::testing::count_named(events, "all_reduce(max)") == 1 &&
                   ddp::testing::count_named(events, "all_reduce(min)") == 1 &&
                   ddp::testing::count_named(events, "broadcast") == 1 &&
                   ddp::testing::count_named(events, "all_gather") == 1 &&
                   ddp::testing::count_named(events, "reduce_scatter(sum)") == 1 &&
                   ddp::testing::count_named(events, "barrier") == 1,
               unscoped);
  checks.check(kNoOverlap, ddp::testing::first_overlap(events).empty(),
               ddp::testing::first_overlap(events) + " overlap");
  bool fields_ok = !events.empty();
  int never_waited = 0;
  for (const auto& event : events) {
    fields_ok = fields_ok && event.at("pid").get<int>() == real->rank() &&
                event.at("dur").get<double>() >= 0 && event.at("ts").get<double>() > 1.5e15 &&
                event.at("cat") == "collective";
    if (!event.at("args").at("waited").get<bool>()) ++never_waited;
  }
  checks.check(kEventFields, fields_ok, "an event has not (or there are none)");
  checks.check(kNeverWaited, never_waited == 1,
               std::to_string(never_waited) + " events marked waited=false");
  const auto& first = events.front();
  checks.check(kFirstEvent,
               first.at("args").at("bytes") == 4000 && first.at("args").at("numel") == 1000 &&
                   first.at("args").at("dtype") == "float32" &&
                   first.at("args").at("op") == "all_reduce" &&
                   first.at("args").at("reduce") == "sum",
               first.dump());
  std::cout << "rank " << real->rank() << ": collectives issued: " << issued << "\n";
  return ddp::testing::checks_exit_code(real->rank(), checks.failed());
}

// Rank 1 dies by SIGKILL with an all-reduce in flight after 5 complete
// ones; rank 0 carries on until its collective fails.
int killed(const std::shared_ptr<ddp::ProcessGroup>& group) {
  torch::Tensor values = torch::ones({256});
  for (int i = 0; i < 5; ++i) group->all_reduce(values, ddp::ReduceOp::kSum);
  if (group->rank() == 1) {
    ddp::Work pending = group->all_reduce_async(values, ddp::ReduceOp::kSum);
    std::cout << "rank 1: killing myself" << std::endl;
    std::raise(SIGKILL);
  }
  for (int i = 0; i < 1000; ++i) group->all_reduce(values, ddp::ReduceOp::kSum);
  return 0;
}

// The group each scenario runs on: ARGUMENTS are the backend.
std::shared_ptr<ddp::ProcessGroup> group_for(const std::vector<std::string>& arguments) {
  if (arguments.empty()) throw std::invalid_argument("give the backend after the scenario");
  return ddp::init(
      ddp::InitOptions().backend(arguments[0]).collective_timeout(std::chrono::seconds(20)));
}

}  // namespace

int main(int argc, char** argv) {
  return ddp::testing::run_worker(
      argc, argv,
      {{"record", [](const std::vector<std::string>& args) { return record(group_for(args)); }},
       {"killed", [](const std::vector<std::string>& args) { return killed(group_for(args)); }}});
}
