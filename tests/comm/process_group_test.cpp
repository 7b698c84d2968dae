// A process group of one (no launcher variables, no network), and the
// argument checks every collective makes before an backend sees it.

#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <stdexcept>

#include "common/auto_backend_name.hpp"
#include "common/error_capture.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp {
namespace {

using ddp::testing::error_of;

std::shared_ptr<ProcessGroup> single() { return init(InitOptions(), EnvironmentMap{}); }

TEST(CoreProcessGroup, AloneWithoutVariables) {
  auto group = single();
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->backend_name(), ddp::testing::auto_backend_name("shm"));
  torch::Tensor t = torch::arange(5, torch::kFloat32);
  group->all_reduce(t, ReduceOp::kAverage);
  EXPECT_TRUE(torch::equal(t, torch::arange(5, torch::kFloat32)));
}

TEST(CoreProcessGroup, RejectsBadArguments) {
  auto group = single();
  EXPECT_EQ(
      error_of<InvalidArgumentError>([&] { group->all_reduce(torch::ones({2}, torch::kBool)); }),
      "all_reduce: the input tensor has dtype bool, which ddp's collectives do not carry; "
      "use float32, float64, bfloat16, float16, int32 or int64 (tensor.to(...)).");
  EXPECT_NE(error_of<InvalidArgumentError>([&] {
              group->all_reduce(torch::ones({4, 4}).t());
            }).find("is not contiguous"),
            std::string::npos);
  EXPECT_NE(
      error_of<InvalidArgumentError>([&] { group->all_reduce(torch::Tensor()); }).find("undefined"),
      std::string::npos);
  EXPECT_EQ(error_of<InvalidArgumentError>([&] { group->broadcast(torch::ones({2}), 1); }),
            "broadcast: root rank 1 is outside the group (ranks 0 to 0); pass an existing rank.");
  EXPECT_NE(error_of<InvalidArgumentError>([&] {
              group->all_gather(torch::ones({3}), torch::ones({2}));
            }).find("output has 3 elements but must hold every rank's input: 1 ranks x 2 = 2"),
            std::string::npos);
  EXPECT_NE(error_of<InvalidArgumentError>([&] {
              group->reduce_scatter(torch::ones({2}), torch::ones({2}, torch::kInt32));
            }).find("output is float32 on cpu but input is int32 on cpu"),
            std::string::npos);
}

TEST(CoreProcessGroup, InvalidOptionsAreConfigErrors) {
  EXPECT_THROW(init(InitOptions().rendezvous_timeout(std::chrono::milliseconds(0)), {}),
               ConfigError);
  EXPECT_THROW(init(InitOptions().backend("mpi"), {}), ConfigError);
}

void custom_sigpipe_handler(int) {}

// Note [A dead peer is an error, not a signal] in src/comm/init.cpp: after
// init() a write to a dead peer fails with EPIPE instead of killing the
// process, unless the program handles SIGPIPE itself.
TEST(CoreProcessGroup, InitIgnoresSigpipeUnlessTheProgramHandlesIt) {
  auto disposition = [] {
    struct sigaction current {};
    ::sigaction(SIGPIPE, nullptr, &current);
    return current.sa_handler;
  };
  ::signal(SIGPIPE, SIG_DFL);
  init(InitOptions(), EnvironmentMap{});
  EXPECT_EQ(disposition(), SIG_IGN);
  ::signal(SIGPIPE, custom_sigpipe_handler);
  init(InitOptions(), EnvironmentMap{});
  EXPECT_EQ(disposition(), &custom_sigpipe_handler);
  ::signal(SIGPIPE, SIG_DFL);
}

// A store that loses its connection once the ranks have joined: every read
// and wait but the rendezvous's fails as a socket to a dead peer does.
class StoreLostAfterJoining : public c10d::HashStore {
 public:
  std::vector<uint8_t> get(const std::string& key) override {
    if (!joining(key)) lost();
    return c10d::HashStore::get(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const std::string& key : keys) {
      if (!joining(key)) lost();
    }
    c10d::HashStore::wait(keys, timeout);
  }

 private:
  static bool joining(const std::string& key) { return key.rfind("ddp/joined/", 0) == 0; }
  [[noreturn]] static void lost() {
    throw std::runtime_error("Connection closed by peer [127.0.0.1]:29500\nsecond line");
  }
};

// Note [A peer lost while Gloo connects] in
// src/comm/backends/gloo_process_group.cpp: Gloo's constructor reads every
// peer's address from the store; its failure there is the rendezvous's.
TEST(CoreProcessGroup, AStoreLostWhileGlooConnectsIsARendezvousError) {
  auto store = c10::make_intrusive<StoreLostAfterJoining>();
  store->set("ddp/joined/1", std::vector<uint8_t>{'2'});  // rank 1 joined, then was lost
  auto options =
      InitOptions().backend("gloo").store(store).rank(0).world_size(2).master_addr("127.0.0.1");
  // LibTorch 2.x's Gloo prefixes the cause with "Gloo connectFullMesh failed with ".
  const std::string message = error_of<RendezvousError>([&] { init(options, EnvironmentMap{}); });
  EXPECT_EQ(message.rfind("gloo could not connect rank 0 of 2 to its peers: ", 0), 0u) << message;
  EXPECT_NE(message.find("Connection closed by peer [127.0.0.1]:29500. A peer rank may have "
                         "exited, or lost its connection to the store, while the ranks "
                         "connected; check every rank's log."),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("second line"), std::string::npos) << message;
}

// Note [A collective lets go of its tensors] in
// src/comm/backends/gloo_backend.cpp: once wait() returns, the caller's
// tensors are the caller's alone, the Work still held, so that a buffer
// given back then (FSDP's full gradient) can be taken again at once.
TEST(CoreProcessGroup, ACollectiveLetsGoOfItsTensorsBeforeWaitReturns) {
  for (const std::string backend : {"gloo", "shm"}) {
    auto group = init(InitOptions().backend(backend), EnvironmentMap{});
    torch::Tensor input = torch::arange(6, torch::kFloat32);
    torch::Tensor output = torch::empty({6});
    Work reduced = group->reduce_scatter_async(output, input);
    reduced.wait();
    EXPECT_TRUE(torch::equal(output, input)) << backend;
    EXPECT_EQ(input.use_count(), 1) << backend << ": reduce_scatter's input";
    EXPECT_EQ(output.use_count(), 1) << backend << ": reduce_scatter's output";
    torch::Tensor gathered = torch::empty({6});
    Work all_gathered = group->all_gather_async(gathered, input);
    all_gathered.wait();
    EXPECT_TRUE(torch::equal(gathered, input)) << backend;
    EXPECT_EQ(input.use_count(), 1) << backend << ": all_gather's input";
    EXPECT_EQ(gathered.use_count(), 1) << backend << ": all_gather's output";
  }
}

}  // namespace
}  // namespace ddp
