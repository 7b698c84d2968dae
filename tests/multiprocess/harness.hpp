#pragma once

// Runs N ranks of ddp_test_worker as real processes on loopback, with a
// deadline, and reports each rank's exit status and output.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ddp/launch/child_process.hpp"

namespace ddp::testing {

using Environment = std::map<std::string, std::string>;

/// torchrun's variables for `rank` of `world` on one node.
Environment torchrun_environment(int rank, int world, int port);

/// How to describe rank `rank` of `world` meeting at 127.0.0.1:`port`.
using EnvironmentFor = std::function<Environment(int rank, int world, int port)>;

/// torchrun's variables with the ranks split evenly over `nodes` nodes
/// (consecutive ranks share a node; all on this machine).
EnvironmentFor on_nodes(int nodes);

/// torchrun's variables for 3 ranks on two nodes of unequal size: node 0
/// holds ranks 0 and 1, node 1 rank 2.
EnvironmentFor on_uneven_nodes();

/// Starts `world` workers with `args`, each given `environment_for(rank)`
/// (launcher variables inherited from the test's own environment are
/// removed first), and waits at most `deadline` for all of them.
std::vector<launch::ChildResult> run_ranks(
    int world, const std::vector<std::string>& args,
    const EnvironmentFor& environment_for = torchrun_environment,
    std::chrono::milliseconds deadline = std::chrono::seconds(90));

/// How long the worker's failed collective took, as it reported it
/// ("all_reduce failed after N ms"); -1 when it reported none.
long failed_after_ms(const launch::ChildResult& result);

/// Every rank's status and output, for assertion messages.
std::string describe(const std::vector<launch::ChildResult>& results);

}  // namespace ddp::testing
