// DistributedDataParallel's static_graph with 2 real processes: a block
// applied twice under reentrant activation checkpointing trains as one
// process does, and graphs that differ between ranks or iterations are
// named errors on every rank (tests/multiprocess/static_graph_checks.cpp).

#include <gtest/gtest.h>

#include "common/expect_checks.hpp"
#include "multiprocess/harness.hpp"
#include "multiprocess/static_graph_checks.hpp"

namespace ddp::testing {
namespace {

TEST(DdpStaticGraph, CheckpointedSharedBlockMatchesOneProcessAndChangesAreNamed) {
  auto results =
      run_ranks(2, {"static-graph", "--backend", "gloo", "--collective-timeout-ms", "60000"});
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expect_checks(results, static_graph_check_names());
}

}  // namespace
}  // namespace ddp::testing
