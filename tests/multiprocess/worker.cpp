// ddp_test_worker: one rank of a multi-process test. Started N times by the
// test harness with a launcher's environment; reads its rank from there
// through ddp::init(), runs one scenario and reports through its exit code
// and output.
//
//   ddp_test_worker SCENARIO [--backend B] [--rendezvous-timeout-ms T]
//                            [--collective-timeout-ms T] [--stall-ms T]
//                            [--stall-rank R]
//
// Scenarios:
//   collectives  every collective, dtype and op against closed forms
//   collective-memory  what a 16 MiB-chunk all-gather and reduce-scatter hold
//   topology     prints the resolved topology, then all-reduces the ranks
//   stall        every rank but --stall-rank (1) all-reduces and reports how
//                long it took to fail; that rank issues nothing and leaves
//                only once every other rank's process is gone (or after
//                --stall-ms, 60000), so no collective can have completed
//                by its arrival
//   exit-early   rank 0 all-reduces; the others join (a barrier), then
//                exit at once
//   leave-subgroup  rank 0 all-reduces on a shared-memory subgroup (a
//                DeviceMesh row) that the others destroy, their processes
//                alive until rank 0's ends
//   ddp          DistributedDataParallel against single-process training
//   fsdp-hybrid  FullyShardedDataParallel on a DeviceMesh of a row per node
//   ddp-mismatch wraps a model that differs on the last rank (must fail)
//   ddp-unused   trains with a parameter no rank uses, without
//                find_unused_parameters (must fail)
//   ddp-disagree ranks that disagree (--phase, see disagreement_checks.hpp)
//   join         uneven inputs under ddp::Join (3 ranks)
//   static-graph DistributedDataParallel's static_graph (2 ranks)
//   powersgd     the PowerSGD comm hook (2 ranks)
//   zero         ZeroRedundancyOptimizer against plain DDP
//   zero-snapshot  ZeroRedundancyOptimizer snapshots (--phase save|resume --directory D)
//   frozen-optimizer  an optimizer over the trainable parameters only, under
//                FSDP, ZeRO-2 and DDP (--phase save|resume|load-pytorch
//                --directory D; frozen_optimizer_checks.hpp)
//   full-disk    every writer on a disk that fills or fails under it
//                (--phase enospc|eio --directory D; full_disk_checks.hpp)
//   fsdp-snapshot  FullyShardedDataParallel snapshots (--phase save|save-async|resume,
//                  their -hybrid forms, resume-from-hybrid; --directory D)
//   shm-vs-gloo  (with --backend gloo) starts a second, shared-memory group
//                and checks it against the Gloo one (tests/comm/shm/)
//   stress       overlapping randomly sized collectives, each checked
// Exit codes and errors as tests/common/worker_main.hpp says.

#include <ATen/ATen.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/shm/shm_checks.hpp"
#include "common/worker_main.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/device_mesh.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "multiprocess/any_module_checks.hpp"
#include "multiprocess/checkpoint_checks.hpp"
#include "multiprocess/collective_memory_checks.hpp"
#include "multiprocess/ddp_checks.hpp"
#include "multiprocess/disagreement_checks.hpp"
#include "multiprocess/frozen_optimizer_checks.hpp"
#include "multiprocess/fsdp_checks.hpp"
#include "multiprocess/fsdp_construction_checks.hpp"
#include "multiprocess/fsdp_dcp_checks.hpp"
#include "multiprocess/fsdp_generated_checks.hpp"
#include "multiprocess/fsdp_hybrid_checks.hpp"
#include "multiprocess/fsdp_lost_rank_checks.hpp"
#include "multiprocess/fsdp_paths_checks.hpp"
#include "multiprocess/fsdp_snapshot_checks.hpp"
#include "multiprocess/fsdp_transformer_checks.hpp"
#include "multiprocess/full_disk_checks.hpp"
#include "multiprocess/join_checks.hpp"
#include "multiprocess/powersgd_checks.hpp"
#include "multiprocess/static_graph_checks.hpp"
#include "multiprocess/worker_checks.hpp"
#include "multiprocess/zero_checks.hpp"
#include "multiprocess/zero_snapshot_checks.hpp"

namespace {

using ddp::testing::checks_exit_code;

struct Arguments {
  ddp::InitOptions init;
  int stall_ms = 60000;
  int stall_rank = 1;
  std::string phase;            // zero-snapshot: save or resume
  std::string directory;        // zero-snapshot: where snapshots go
  std::string seeds = "suite";  // fsdp-generated: FIRST:COUNT or suite
};

Arguments parse(const std::vector<std::string>& arguments) {
  Arguments args;
  for (size_t i = 0; i + 1 < arguments.size(); i += 2) {
    const std::string& flag = arguments[i];
    const std::string& value = arguments[i + 1];
    if (flag == "--backend") {
      args.init.backend(value);
    } else if (flag == "--rendezvous-timeout-ms") {
      args.init.rendezvous_timeout(std::chrono::milliseconds(std::stoll(value)));
    } else if (flag == "--collective-timeout-ms") {
      args.init.collective_timeout(std::chrono::milliseconds(std::stoll(value)));
    } else if (flag == "--stall-ms") {
      args.stall_ms = std::stoi(value);
    } else if (flag == "--stall-rank") {
      args.stall_rank = std::stoi(value);
    } else if (flag == "--phase") {
      args.phase = value;
    } else if (flag == "--directory") {
      args.directory = value;
    } else if (flag == "--seeds") {
      args.seeds = value;
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  return args;
}

int run_topology(ddp::ProcessGroup& group) {
  const auto& t = group.topology();
  std::cout << "rank=" << t.rank << " world_size=" << t.world_size << " local_rank=" << t.local_rank
            << " local_world_size=" << t.local_world_size << " group_rank=" << t.group_rank
            << " master=" << t.master_addr << ":" << t.master_port
            << " source=" << ddp::to_string(t.source) << " backend=" << group.backend_name()
            << "\n";
  at::Tensor t_rank = at::full({4}, group.rank(), at::kLong);
  group.all_reduce(t_rank);
  std::cout << "sum of ranks=" << t_rank[0].item<int64_t>() << "\n";
  return 0;
}

// All-reduces 1024 ones; on failure, says after how long, then rethrows.
int timed_all_reduce(ddp::ProcessGroup& group) {
  at::Tensor t = at::ones({1024});
  const auto start = std::chrono::steady_clock::now();
  try {
    group.all_reduce(t);
  } catch (const ddp::Error&) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::cout << "rank " << group.rank() << ": all_reduce failed after " << ms << " ms\n";
    throw;
  }
  std::cout << "rank " << group.rank() << ": all_reduce returned\n";
  return 0;
}

int run_exit_early(ddp::ProcessGroup& group) {
  // Every rank's backend is up before one leaves: a peer lost while the
  // backend connects is init's error, not the collective's (Note [A peer
  // lost while Gloo connects] in src/comm/backends/gloo_process_group.cpp).
  group.barrier();
  if (group.rank() == 0) return timed_all_reduce(group);
  std::cout << "rank " << group.rank() << ": leaving without the collective\n";
  std::cout.flush();
  std::_Exit(0);  // Leave abruptly, as a crashed peer would.
}

// A subgroup's peer that leaves it, alive (an elastic job's survivor that
// moves to the next generation): rank 0's collective on it fails at once.
int run_leave_subgroup(const std::shared_ptr<ddp::ProcessGroup>& world) {
  at::Tensor pids = at::empty({world->size()}, at::kLong);
  world->all_gather(pids, at::full({1}, static_cast<int64_t>(getpid()), at::kLong));
  auto mesh = std::make_shared<ddp::DeviceMesh>(world, 1, world->size());
  if (world->rank() == 0) return timed_all_reduce(*mesh->shard_group());
  mesh.reset();  // its row's communicator with it
  std::cout << "rank " << world->rank() << ": left the subgroup\n";
  std::cout.flush();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (kill(static_cast<pid_t>(pids[0].item<int64_t>()), 0) == 0 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

// Note [A stall that outlasts its peers]
// The stalled rank waits for its peers' processes to end instead of
// sleeping a fixed time: a peer that fails its collective has then provably
// failed while the stalled rank was still away, whatever the machine's load,
// and no upper bound on the peer's time is needed (the harness deadline
// catches a hang).
int run_stall(ddp::ProcessGroup& group, const Arguments& args) {
  at::Tensor pids = at::empty({group.size()}, at::kLong);
  group.all_gather(pids, at::full({1}, static_cast<int64_t>(getpid()), at::kLong));
  if (group.rank() != args.stall_rank) return timed_all_reduce(group);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(args.stall_ms);
  auto alive = [&] {
    for (int r = 0; r < group.size(); ++r) {
      if (r != group.rank() && kill(static_cast<pid_t>(pids[r].item<int64_t>()), 0) == 0)
        return true;
    }
    return false;
  };
  while (alive() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::cout << "rank " << group.rank() << ": "
            << (alive() ? "gave up waiting for the other ranks to exit"
                        : "every other rank had exited")
            << "; leaving without the collective\n";
  std::cout.flush();
  std::_Exit(0);
}

// A shared-memory group beside `gloo`, meeting at a port rank 0 holds until
// its store listens there (Note [A port held from choice to use]).
int run_shm_against_gloo(ddp::ProcessGroup& gloo, const Arguments& args) {
  std::optional<ddp::launch::PortReservation> reserved;
  if (gloo.rank() == 0) reserved.emplace();
  at::Tensor port = at::full({1}, reserved ? reserved->port() : 0, at::kInt);
  gloo.broadcast(port, 0);
  ddp::InitOptions options = args.init;
  auto shm = ddp::init(options.backend("shm").master_port(port.item<int>()));
  return checks_exit_code(gloo.rank(), ddp::testing::check_shm_against_gloo(gloo, *shm));
}

using Group = std::shared_ptr<ddp::ProcessGroup>;

// A scenario run on the group its options describe.
ddp::testing::WorkerScenario on_group(std::function<int(const Group&, const Arguments&)> body) {
  return [body](const std::vector<std::string>& arguments) {
    const Arguments args = parse(arguments);
    return body(ddp::init(args.init), args);
  };
}

// A scenario whose checks print one line each and return how many failed.
ddp::testing::WorkerScenario checking(std::function<int(const Group&, const Arguments&)> checks) {
  return on_group([checks](const Group& group, const Arguments& args) {
    return checks_exit_code(group->rank(), checks(group, args));
  });
}

}  // namespace

int main(int argc, char** argv) {
  namespace t = ddp::testing;
  return t::run_worker(
      argc, argv,
      {{"collectives",
        checking([](const Group& g, auto&) { return t::check_all_collectives(*g); })},
       {"collective-memory",
        checking([](const Group& g, auto&) { return t::check_collective_memory(*g); })},
       {"topology", on_group([](const Group& g, auto&) { return run_topology(*g); })},
       {"stall",
        on_group([](const Group& g, const Arguments& args) { return run_stall(*g, args); })},
       {"exit-early", on_group([](const Group& g, auto&) { return run_exit_early(*g); })},
       {"leave-subgroup", on_group([](const Group& g, auto&) { return run_leave_subgroup(g); })},
       {"ddp",
        checking([](const Group& g, auto&) { return t::check_distributed_data_parallel(g); })},
       {"ddp-any-module", checking([](const Group& g, auto&) { return t::check_any_module(g); })},
       {"fsdp", checking([](const Group& g, auto&) {
          std::cout << "backend=" << g->backend_name() << "\n";  // FsdpOnHierarchical reads it
          return t::check_fully_sharded(g);
        })},
       {"fsdp-hybrid",
        checking([](const Group& g, auto&) { return t::check_fully_sharded_hybrid(g); })},
       {"fsdp-paths", checking([](const Group& g, auto&) { return t::check_fsdp_paths(g); })},
       {"fsdp-skip", checking([](const Group& g, auto&) { return t::check_fsdp_skipped_unit(g); })},
       {"checkpoint", checking([](const Group& g, auto&) { return t::check_checkpoint(g); })},
       {"fsdp-construction",
        checking([](const Group& g, auto&) { return t::check_fsdp_construction(g); })},
       {"fsdp-transformer",
        checking([](const Group& g, auto&) { return t::check_fsdp_transformer(g); })},
       {"fsdp-checkpoint",
        checking([](const Group& g, auto&) { return t::check_fsdp_checkpoint(g); })},
       {"fsdp-generated", checking([](const Group& g, const Arguments& args) {
          return t::check_fsdp_generated(g, t::parse_fsdp_generated_seeds(args.seeds));
        })},
       {"ddp-mismatch", on_group([](const Group& g, auto&) {
          t::wrap_mismatched_model(g);
          std::cout << "rank " << g->rank() << ": the mismatched model was accepted\n";
          return 1;
        })},
       {"ddp-unused", on_group([](const Group& g, auto&) {
          t::train_with_unused_parameter(g);
          std::cout << "rank " << g->rank() << ": the unused parameter went unnoticed\n";
          return 1;
        })},
       {"ddp-disagree", on_group([](const Group& g, const Arguments& args) {
          t::run_disagreement(g, args.phase);
          return 0;
        })},
       {"join", checking([](const Group& g, auto&) { return t::check_join(g); })},
       {"static-graph", checking([](const Group& g, auto&) { return t::check_static_graph(g); })},
       {"powersgd", checking([](const Group& g, auto&) { return t::check_power_sgd(g); })},
       {"zero", checking([](const Group& g, auto&) { return t::check_zero(g); })},
       {"zero-snapshot", checking([](const Group& g, const Arguments& args) {
          return t::check_zero_snapshot(g, args.phase, args.directory);
        })},
       {"fsdp-snapshot", checking([](const Group& g, const Arguments& args) {
          return t::check_fsdp_snapshot(g, args.phase, args.directory);
        })},
       {"fsdp-dcp", checking([](const Group& g, const Arguments& args) {
          return t::check_fsdp_dcp(g, args.phase, args.directory);
        })},
       {"frozen-optimizer", checking([](const Group& g, const Arguments& args) {
          return t::check_frozen_optimizer(g, args.phase, args.directory);
        })},
       {"full-disk", checking([](const Group& g, const Arguments& args) {
          return t::check_full_disk(g, args.phase, args.directory);
        })},
       {"fsdp-lost-rank", checking([](const Group& g, const Arguments& args) {
          return t::check_fsdp_lost_rank(g, args.phase, args.directory);
        })},
       {"shm-vs-gloo", on_group([](const Group& g, const Arguments& args) {
          return run_shm_against_gloo(*g, args);
        })},
       {"stress", checking([](const Group& g, auto&) {
          return t::stress_collectives(*g, t::kStressIterations);
        })}});
}
