// ddp_allreduce_check: starts N ranks on this machine (or runs as one rank
// under a launcher), all-reduces a tensor over Gloo, and checks the result
// against its closed form. The main job until the training example exists.
//
//   ddp_allreduce_check --nproc 2            # starts 2 ranks on loopback
//   torchrun --nproc-per-node 2 ddp_allreduce_check   # one rank each

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "ddp/ddp.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
// Internal to ddp, as for ddprun: the job's secret file.
#include "comm/store/job_secret.hpp"

namespace {

struct Options {
  int nproc = 2;
  int64_t numel = 1 << 20;
  std::string backend = "gloo";
  int timeout_s = 120;
};

// One rank: rank r contributes r + 1 everywhere, so every element of the
// sum must be N (N + 1) / 2.
int run_rank(const Options& options) {
  auto group = ddp::init(ddp::InitOptions().backend(options.backend));
  const int world = group->size();
  torch::Tensor t = torch::full({options.numel}, group->rank() + 1, torch::kFloat32);
  const auto start = std::chrono::steady_clock::now();
  group->all_reduce(t, ddp::ReduceOp::kSum);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const float expected = world * (world + 1) / 2.0f;
  const bool ok = torch::all(t == expected).item<bool>();
  std::ostringstream line;
  line << "rank " << group->rank() << "/" << world << " (" << group->backend_name() << ", "
       << ddp::to_string(group->topology().source) << "): all_reduce(sum) of " << options.numel
       << " float32 elements = " << t[0].item<float>() << " (expected " << expected << ") in " << ms
       << " ms: " << (ok ? "OK" : "WRONG");
  std::cout << line.str() << std::endl;
  group->barrier();
  return ok ? 0 : 1;
}

// A private directory (mode 0700) holding a fresh job secret, as ddprun
// makes for a job on one machine, removed when the check ends: the ranks'
// store then admits only them, and rank 0 has nothing to warn about.
class PrivateSecret {
 public:
  PrivateSecret() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ddp-check-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw ddp::IoError("cannot create a private directory in " +
                         std::filesystem::temp_directory_path().string() +
                         " for the check's job secret (" + std::strerror(errno) +
                         "). Point TMPDIR at a writable directory.");
    }
    directory_ = pattern;
    file_ = ddp::comm::store::write_job_secret(directory_);
  }
  ~PrivateSecret() {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  PrivateSecret(const PrivateSecret&) = delete;
  PrivateSecret& operator=(const PrivateSecret&) = delete;
  const std::string& file() const { return file_; }

 private:
  std::string directory_, file_;
};

// Starts `nproc` ranks of this program with torchrun's variables.
int start_ranks(const Options& options, const std::string& self) {
  const ddp::launch::PortReservation reserved;  // Note [A port held from choice to use]
  const int port = reserved.port();
  const PrivateSecret secret;
  std::vector<ddp::launch::ChildSpec> ranks;
  for (int rank = 0; rank < options.nproc; ++rank) {
    ddp::launch::ChildSpec spec;
    spec.argv = {self, "--numel", std::to_string(options.numel), "--backend", options.backend};
    spec.env = {{"RANK", std::to_string(rank)},
                {"WORLD_SIZE", std::to_string(options.nproc)},
                {"LOCAL_RANK", std::to_string(rank)},
                {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)},
                {"OMP_NUM_THREADS", "1"},
                {ddp::comm::store::kJobSecretFileVariable, secret.file()}};
    ranks.push_back(std::move(spec));
  }
  std::cout << "starting " << options.nproc << " ranks on 127.0.0.1:" << port << std::endl;
  auto results = ddp::launch::run_children(ranks, std::chrono::seconds(options.timeout_s));
  int failures = 0;
  for (size_t rank = 0; rank < results.size(); ++rank) {
    std::istringstream output(results[rank].output);
    for (std::string line; std::getline(output, line);)
      std::cout << "[" << rank << "] " << line << "\n";
    if (results[rank].exit_code != 0) {
      ++failures;
      std::cout << "[" << rank << "] " << results[rank].status() << "\n";
    }
  }
  std::cout << (failures == 0 ? "all-reduce check passed on " : "all-reduce check FAILED on ")
            << options.nproc << " ranks" << std::endl;
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Checks an all-reduce across N ranks of ddp on this machine."};
  Options options;
  app.add_option("--nproc", options.nproc, "ranks to start when not under a launcher")
      ->check(CLI::Range(1, 64));
  app.add_option("--numel", options.numel, "elements in the all-reduced tensor")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--backend", options.backend, "gloo, nccl or auto");
  app.add_option("--timeout", options.timeout_s, "seconds before every rank is stopped")
      ->check(CLI::Range(1, 3600));
  CLI11_PARSE(app, argc, argv);
  try {
    const bool under_launcher =
        ddp::resolve_topology(ddp::capture_environment()).source != ddp::LaunchSource::kNone;
    if (under_launcher || options.nproc == 1) return run_rank(options);
    return start_ranks(options, "/proc/self/exe");
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  }
}
