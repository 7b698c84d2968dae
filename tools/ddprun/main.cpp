// ddprun: starts the workers of a data-parallel job on this node, with
// torchrun's command line and worker environment, and restarts the whole job
// when any worker fails (see src/launch/agent.hpp).
//
//   ddprun --standalone --nproc-per-node 2 ./build/bin/example_toy_trainer
//   ddprun --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 \
//          --nproc-per-node 4 --max-restarts 3 ./train --epochs 10
//   ddprun --nnodes 1:4 --nproc-per-node 4 --rdzv-backend c10d \
//          --rdzv-endpoint node0:29400 --rdzv-id job7 ./train --epochs 10
//
// Exit status: 0 when the job succeeded, 1 when it failed after its last
// restart, 128 + signal when interrupted; when ddprun itself fails, the code
// of the error's kind (Note [Exit codes] in ddp/base/errors.hpp): 3 for a bad
// option, 4 for a rendezvous between nodes that failed, 5 for a timeout, 13
// for a log or error file that cannot be created, 14 for a worker that
// cannot be started; CLI11's own codes for a command line it cannot parse.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <iostream>

#include "ddp/base/blas.hpp"
#include "ddp/base/errors.hpp"
#include "launch/agent.hpp"

namespace {

void on_signal(int signal) { ddp::launch::Agent::request_stop(signal); }

void parse(CLI::App& app, ddp::launch::LaunchOptions& o) {
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc_per_node,
                 "workers on this node: a number, 'gpu', 'cpu', or 'auto' (per GPU, else core)");
  app.add_option("--nnodes", o.nnodes, "nodes in the job: N, or MIN:MAX (with c10d)");
  app.add_option("--node-rank,--node_rank", o.node_rank,
                 "this node's index, 0 to nnodes-1 (static backend)");
  app.add_option("--master-addr,--master_addr", o.master_addr,
                 "address of node 0 (static backend)");
  app.add_option("--master-port,--master_port", o.master_port,
                 "port of node 0's rendezvous (static backend)");
  app.add_flag("--standalone", o.standalone, "one node: loopback and a free port");
  app.add_option("--rdzv-backend,--rdzv_backend", o.rdzv_backend,
                 "static (node ranks given) or c10d (nodes meet at --rdzv-endpoint)");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", o.rdzv_endpoint,
                 "HOST[:PORT] where the nodes meet (port 29400 by default)");
  app.add_option("--rdzv-id,--rdzv_id,--run-id,--run_id", o.run_id,
                 "job id; nodes of one job share it");
  app.add_option("--rdzv-conf,--rdzv_conf", o.rdzv_conf,
                 "join_timeout=S,last_call_timeout=S,node_timeout=S,is_host=true|false");
  app.add_option("--local-addr,--local_addr", o.local_addr,
                 "this node's address, given to the workers when it is node 0");
  app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                 "times the job is restarted after a failure");
  app.add_option("--recovery", o.recovery,
                 "after a worker fails: disk (restart every worker, which resume from their "
                 "snapshot) or memory (restart it alone; the others keep their state: "
                 "ddp::elastic::run)")
      ->capture_default_str();
  app.add_option("--spares", o.spares,
                 "with --recovery memory: hot spares per node, started ahead of need, which "
                 "take a failed worker's rank without starting a process (each use counts as a "
                 "restart, so --max-restarts 0 never uses one)")
      ->capture_default_str();
  app.add_option("--monitor-interval,--monitor_interval", o.monitor_interval_s,
                 "seconds between checks of the other nodes");
  app.add_option("--log-dir,--log_dir", o.log_dir,
                 "directory for the workers' error files and redirected streams");
  app.add_option("-r,--redirects", o.redirects,
                 "streams to log files only: 0 none, 1 stdout, 2 stderr, 3 both; or "
                 "LOCAL_RANK:VALUE,...");
  app.add_option("-t,--tee", o.tee, "streams to log files and the console, as --redirects");
  app.add_flag("--no-python,--no_python", o.no_python,
               "run the program itself, even a .py file (without it, a .py or non-executable "
               "file runs as `python3 -u PROGRAM`)");
  app.add_option("--stop-grace,--stop_grace", o.stop_grace_s,
                 "seconds between SIGTERM and SIGKILL when stopping workers");
  app.add_option("--rendezvous-timeout,--rendezvous_timeout", o.rendezvous_timeout_s,
                 "seconds nodes wait for each other (--rdzv-conf join_timeout)");
  app.add_option("--secret-file,--secret_file", o.secret_file,
                 "the job's secret (mode 0600), the same file on every node; one node makes "
                 "its own");
  app.add_option("--allocator", o.allocator,
                 "the host allocator preloaded into the workers: auto (tcmalloc where installed, "
                 "else glibc's malloc; a set LD_PRELOAD is left alone), tcmalloc, glibc, or a "
                 "malloc library's path");
}

// Note [Where the launcher's options end]
// Everything from the first argument that is not one of ddprun's options
// (or their values) on belongs to the program, so `ddprun -n 2 ./train
// --epochs 3` passes --epochs to ./train, while an unknown option before
// the program is an error instead of silently becoming the program.
size_t program_start(int argc, char** argv, const CLI::App& app) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return i + 1;
    if (arg.empty() || arg[0] != '-') return i;
    if (arg.find('=') != std::string::npos) continue;
    const CLI::Option* option = app.get_option_no_throw(arg);
    if (option && option->get_items_expected_max() > 0) ++i;  // skip its value
  }
  return argc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddprun: start a data-parallel job, torchrun style, with elastic restarts.",
               "ddprun"};
  app.footer(
      "After the options: PROGRAM [ARGS...], started once per worker with torchrun's\n"
      "worker environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...). A .py (or\n"
      "non-executable) PROGRAM runs as `python3 -u PROGRAM ARGS...`, python3 from PATH.");
  ddp::launch::LaunchOptions options;
  parse(app, options);
  const size_t start = program_start(argc, argv, app);
  std::vector<std::string> own(argv + 1, argv + start);
  if (!own.empty() && own.back() == "--") own.pop_back();
  std::reverse(own.begin(), own.end());  // CLI11 parses a vector from the back.
  try {
    app.parse(own);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  options.command.assign(argv + start, argv + argc);
  try {
    ddp::launch::LaunchPlan plan = ddp::launch::resolve_launch(options);
    ddp::base::report_blas_once("ddprun: ");  // its workers inherit DDP_BLAS_REPORTED
    std::cerr << "ddprun: " << plan.allocator.summary << "\n";
    if (!plan.allocator.warning.empty()) std::cerr << "ddprun: " << plan.allocator.warning << "\n";
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, on_signal);
    ddp::launch::Agent agent(std::move(plan));
    return agent.run();
  } catch (const ddp::Error& e) {
    std::cerr << "ddprun: error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  } catch (const std::exception& e) {
    std::cerr << "ddprun: error: " << e.what() << std::endl;
    return 1;
  }
}
