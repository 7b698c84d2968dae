// ddp_launch_worker: a worker for the launcher tests, started by ddprun.
//
//   env              prints the launcher variables (and a line to stderr),
//                    all-reduces the ranks
//   grow             rendezvous round 0: sleeps until stopped; later: env
//   shrink           round 0: all-reduces until a peer is lost; later: env
//   uncaught         throws a TimeoutError out of main(), recording nothing
//   fail RANK        rank RANK records an error and exits 3 at every start;
//                    the others wait to be stopped
//   kill-once RANK   on the first attempt rank RANK kills itself (SIGKILL)
//                    after joining; later attempts all-reduce and succeed
//   stop-once RANK   on the first attempt rank RANK stops itself (SIGSTOP)
//                    after joining; the others' all-reduce times out
//   stall RANK       3 ranks: four all-reduces and a broadcast, then rank RANK
//                    sleeps until stopped and the others' sixth collective,
//                    an all-reduce, times out (1500 ms)
//   sleep            prints its pid and sleeps until stopped
//   linger SECONDS   as env, then rank 0 sleeps SECONDS before it exits
//   spare-refused    under ddprun --spares: rank 0 waits (60 s at most) for
//                    a hot spare's error file, then as env; the spare
//                    itself fails in ddp::init(), which refuses a spare
//   intrude          rank 1 also tries the job's store without the secret
//                    and with a wrong one, then all ranks all-reduce

#include <ATen/ATen.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "ddp/base/allocator.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/error_file.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/comm/tcp_store.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace {

const ddp::EnvironmentMap kEnv = ddp::capture_environment();

std::string var(const std::string& name) {
  auto it = kEnv.find(name);
  return it == kEnv.end() ? "<unset>" : it->second;
}

int attempt() { return std::stoi(var("TORCHELASTIC_RESTART_COUNT")); }

void sleep_forever() {
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// ddprun keeps a worker's error file at <dir>/attempt_<k>/<local rank>/
// and a hot spare's at <dir>/spare_<id>/: waits until a spare has recorded
// its error (ddp::init() refuses a spare), so that the job outlives it.
void wait_for_spare_error() {
  const std::filesystem::path dir = std::filesystem::path(var("TORCHELASTIC_ERROR_FILE"))
                                        .parent_path()
                                        .parent_path()
                                        .parent_path();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < give_up) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().filename().string().rfind("spare_", 0) == 0 &&
          std::filesystem::exists(entry.path() / "error.json")) {
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw ddp::TimeoutError("no hot spare recorded an error in " + dir.string() + " within 60 s");
}

int all_reduce_ranks(const std::shared_ptr<ddp::ProcessGroup>& group) {
  at::Tensor t = at::full({1}, group->rank(), at::kLong);
  group->all_reduce(t);
  std::cout << "attempt " << attempt() << ": sum of ranks " << t.item<int64_t>() << std::endl;
  return 0;
}

int all_reduce_ranks(std::chrono::milliseconds timeout) {
  return all_reduce_ranks(
      ddp::init(ddp::InitOptions().backend("gloo").collective_timeout(timeout)));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const int target = argc > 2 ? std::stoi(argv[2]) : -1;
  const int rank = kEnv.count("RANK") ? std::stoi(var("RANK")) : -1;  // -1: a hot spare
  if (scenario == "uncaught") {  // no try, no record_error(): ddp::init() has it covered
    auto group = ddp::init(ddp::InitOptions().backend("gloo"));
    throw ddp::TimeoutError("rank " + std::to_string(rank) + " gave up waiting, on purpose");
  }
  try {
    const int round =
        kEnv.count("DDP_RENDEZVOUS_ROUND") ? std::stoi(var("DDP_RENDEZVOUS_ROUND")) : 0;
    if (scenario == "spare-refused" && rank == 0) wait_for_spare_error();
    if (scenario == "env" || scenario == "spare-refused" || scenario == "linger" ||
        ((scenario == "grow" || scenario == "shrink") && round > 0)) {
      for (const char* name :
           {"RANK", "LOCAL_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE",
            "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE",
            "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DDP_BLAS_REPORTED", "DDP_RENDEZVOUS_ROUND",
            "LD_PRELOAD"}) {
        std::cout << name << "=" << var(name) << "\n";
      }
      std::cout << ddp::allocator_in_use().summary() << "\n";
      std::cerr << "stderr of local rank " << var("LOCAL_RANK") << std::endl;
      all_reduce_ranks(std::chrono::seconds(30));
      if (scenario == "linger" && rank == 0)
        std::this_thread::sleep_for(std::chrono::seconds(target));
      std::cout << "a line without a newline at exit";
      return 0;
    }
    if (scenario == "grow") {  // round 0
      std::cout << "waiting in round 0" << std::endl;
      sleep_forever();
    }
    if (scenario == "shrink") {  // round 0: all-reduce until a peer is lost
      auto group = ddp::init(
          ddp::InitOptions().backend("gloo").collective_timeout(std::chrono::seconds(10)));
      for (int i = 0;; ++i) {
        at::Tensor t = at::ones({1});
        group->all_reduce(t);
        if (i == 0) std::cout << "round 0: all-reduced over " << t.item<float>() << std::endl;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    if (scenario == "fail") {
      if (rank != target) sleep_forever();
      std::cout << "attempt " << attempt() << ": failing on purpose" << std::endl;
      throw ddp::InvalidArgumentError("rank " + std::to_string(rank) +
                                      " failed on purpose at attempt " + std::to_string(attempt()));
    }
    if (scenario == "snapshot-fails") {
      // A real save into the directory named by the argument after the rank, whose
      // writes the test makes fail (common/failing_writes.cpp): a
      // SnapshotError (exit 9) on every rank, which a restart meets again.
      auto group = ddp::init(ddp::InitOptions().backend("gloo"));
      torch::nn::Linear model(3, 2);
      ddp::snapshot::SnapshotManager snapshots(ddp::snapshot::SnapshotOptions().directory(argv[3]),
                                               group);
      ddp::snapshot::TrainingState state;
      state.model = model.ptr().get();
      std::cout << "attempt " << attempt() << ": saving" << std::endl;
      try {
        snapshots.save(state);
      } catch (const ddp::snapshot::SnapshotError& error) {  // its own exit code, as a program's
        ddp::record_error(error);
        std::cerr << "error: " << error.what() << std::endl;
        return static_cast<int>(error.exit_code());
      }
      return 0;
    }
    if (scenario == "kill-once" || scenario == "stop-once") {
      const bool stop = scenario == "stop-once";
      // A stopped peer is only noticed through the others' collective timeout.
      auto group = ddp::init(ddp::InitOptions().backend("gloo").collective_timeout(
          std::chrono::milliseconds(stop && attempt() == 0 ? 1500 : 30000)));
      if (attempt() == 0 && rank == target) {
        std::cout << (stop ? "stopping myself" : "killing myself") << std::endl;
        raise(stop ? SIGSTOP : SIGKILL);
      }
      at::Tensor t = at::full({1}, rank, at::kLong);
      group->all_reduce(t);
      std::cout << "attempt " << attempt() << ": sum of ranks " << t.item<int64_t>() << std::endl;
      return 0;
    }
    if (scenario == "intrude") {
      auto group = ddp::init(ddp::InitOptions().backend("gloo"));
      struct stat info {};
      const std::string file = var("DDP_JOB_SECRET_FILE");
      if (::stat(file.c_str(), &info) == 0) {
        std::cout << "secret file " << file << " mode " << std::oct << (info.st_mode & 0777)
                  << std::dec << std::endl;
      }
      if (rank == 1) {
        for (const std::string secret : {"", "a wrong secret, long enough"}) {
          const char* who = secret.empty() ? "without a secret" : "with a wrong secret";
          try {
            ddp::TcpStore intruder(ddp::TcpStoreOptions()
                                       .host(var("MASTER_ADDR"))
                                       .port(std::stoi(var("MASTER_PORT")))
                                       .timeout(std::chrono::seconds(10))
                                       .secret(secret));
            std::cout << "intruder " << who << ": admitted" << std::endl;
          } catch (const ddp::RendezvousError& error) {
            std::cout << "intruder " << who << ": refused" << std::endl;
          }
        }
      }
      return all_reduce_ranks(group);
    }
    if (scenario == "stall") {
      auto group = ddp::init(
          ddp::InitOptions().backend("gloo").collective_timeout(std::chrono::milliseconds(1500)));
      for (int i = 0; i < 4; ++i) group->all_reduce(at::ones({1}, at::kLong));
      group->broadcast(at::zeros({4}));
      if (rank == target) {
        std::cout << "stalling after 5 collectives" << std::endl;
        sleep_forever();
      }
      group->all_reduce(at::ones({1}, at::kLong));
      return 0;
    }
    if (scenario == "sleep") {
      std::cout << "pid " << getpid() << std::endl;
      sleep_forever();
    }
    std::cerr << "unknown scenario '" << scenario << "'" << std::endl;
    return 2;
  } catch (const std::exception& e) {
    ddp::record_error(e);
    std::cerr << "error: " << e.what() << std::endl;
    return 3;
  }
}
