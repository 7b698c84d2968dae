// Ranks that disagree fail, every one of them, within the collective
// timeout, with a message naming the parameters, the ranks and the
// iteration; never a hang (tests/multiprocess/disagreement_checks.cpp). A
// ZeroRedundancyOptimizer's disagreement fails at construction.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ddp/base/errors.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

constexpr int kTimeoutMs = 5000;  // the collective timeout the workers get

std::vector<launch::ChildResult> disagree(const std::string& phase) {
  auto results = run_ranks(2, {"ddp-disagree", "--phase", phase, "--backend", "gloo",
                               "--collective-timeout-ms", std::to_string(kTimeoutMs)});
  for (const auto& r : results) {
    EXPECT_FALSE(r.killed_at_deadline) << describe(results);
    // The timeout, then a margin for a loaded machine: never a hang.
    EXPECT_LT(r.seconds, kTimeoutMs / 1000.0 + 20) << describe(results);
  }
  return results;
}

void expect_fails(const launch::ChildResult& r, const std::vector<std::string>& parts,
                  const std::vector<launch::ChildResult>& all) {
  EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::kInvalidArgument)) << describe(all);
  for (const auto& part : parts) {
    EXPECT_NE(r.output.find(part), std::string::npos) << "missing: " << part << "\n"
                                                      << describe(all);
  }
}

const char kUnused[] =
    "parameter 'branch.weight' received no gradient in this backward pass (2 parameter(s) in "
    "all: 'branch.weight', 'branch.bias')";

TEST(DdpDisagreement, ParameterUnusedOnOneRankIsNamedOnEveryRank) {
  for (int culprit : {1, 0}) {  // 0 hosts the store: it must outlive the others' reading
    SCOPED_TRACE("unused on rank " + std::to_string(culprit));
    auto results = disagree("unused-on-rank-" + std::to_string(culprit));
    const int other = 1 - culprit;
    const std::string who = "rank " + std::to_string(culprit);
    expect_fails(results[culprit], {who + ", iteration 3: " + kUnused}, results);
    expect_fails(results[other],
                 {"rank " + std::to_string(other) +
                      ", iteration 3: the gradient collectives did "
                      "not complete",
                  "The ranks disagree:\n  " + who + " failed: DistributedDataParallel: " + who +
                      ", iteration 3: " + kUnused},
                 results);
  }
}

TEST(DdpDisagreement, StaticGraphChangeOnOneRankIsNamedOnEveryRank) {
  auto results = disagree("static-graph-changes-on-rank-1");
  const std::string change =
      "DistributedDataParallel(static_graph): rank 1: 2 parameter(s) received fewer gradients in "
      "synchronized iteration 3 than the first iteration recorded: 'branch.weight' (0 of 1), "
      "'branch.bias' (0 of 1)";
  expect_fails(results[1], {change}, results);
  expect_fails(results[0],
               {"rank 0, iteration 3: the gradient collectives did not complete",
                "The ranks disagree:\n  rank 1 failed: " + change},
               results);
}

TEST(DdpDisagreement, RankThatRanFewerIterationsIsNamed) {
  auto results = disagree("fewer-iterations-on-rank-1");
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
  EXPECT_NE(results[1].output.find("rank 1: finished"), std::string::npos) << describe(results);
  expect_fails(results[0],
               {"rank 0, iteration 3: the gradient collectives did not complete",
                "rank 1 has left, after 2 training forwards, 2 of them synchronized: the ranks ran "
                "different numbers of iterations",
                "ddp::Join"},
               results);
}

TEST(DdpDisagreement, StoreHostThatRanFewerIterationsIsNamed) {
  auto results = disagree("fewer-iterations-on-rank-0");
  EXPECT_EQ(results[0].exit_code, 0) << describe(results);
  const std::string& said = results[1].output;
  EXPECT_NE(said.find("rank 1, iteration 3: the gradient collectives did not complete"),
            std::string::npos)
      << describe(results);
  // Rank 1 reads rank 0's note if the store (in rank 0's process) is still
  // up when rank 1's collective fails; otherwise it says the store is gone.
  const bool named = said.find(
                         "rank 0 has left, after 2 training forwards, 2 of them "
                         "synchronized") != std::string::npos;
  const bool gone =
      said.find("the rendezvous store is gone, so rank 0, which hosts it, has exited") !=
      std::string::npos;
  EXPECT_TRUE(named || gone) << describe(results);
  const int code = results[1].exit_code;
  if (named) EXPECT_EQ(code, static_cast<int>(ExitCode::kInvalidArgument)) << describe(results);
  if (gone) {
    EXPECT_TRUE(code == static_cast<int>(ExitCode::kCollective) ||
                code == static_cast<int>(ExitCode::kTimeout))
        << describe(results);
  }
}

TEST(DdpDisagreement, SkippedBackwardIsNamed) {
  auto results = disagree("skipped-backward");
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
  expect_fails(results[0],
               {"rank 0, iteration 3: the gradient collectives did not complete",
                "rank 1 skipped the backward of its iteration 2",
                "rank 1 has left, after 3 training forwards, 2 of them synchronized"},
               results);
}

TEST(DdpDisagreement, DifferentBucketCapsFailAtConstructionOnEveryRank) {
  auto results = disagree("bucket-caps");
  for (const auto& r : results) {
    expect_fails(r,
                 {"DistributedDataParallel: the DDP options and gradient buckets differ across "
                  "ranks at #0: rank 0 has 'bucket_cap_mb=25.000000",
                  "rank 1 has 'bucket_cap_mb=0.000100",
                  "Give every rank the same DistributedDataParallelOptions"},
                 results);
  }
}

// A ZeroRedundancyOptimizer whose ranks disagree fails at construction, on
// every rank, with an InvalidArgumentError naming the difference, not with
// the TimeoutError its steps' mismatched collectives would end in: their
// timeout outlasts the harness's deadline (90 s), which would kill a hang.
constexpr int kZeroTimeoutMs = 120000;

std::vector<launch::ChildResult> zero_disagree(const std::string& phase) {
  auto results = run_ranks(2, {"ddp-disagree", "--phase", phase, "--backend", "gloo",
                               "--collective-timeout-ms", std::to_string(kZeroTimeoutMs)});
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  return results;
}

const char kZeroOptionsAdvice[] =
    "Give every rank the same ZeroRedundancyOptimizerOptions (stage, bucket_cap_mb, "
    "backward_passes_per_step).";

TEST(ZeroDisagreement, BucketCapOnOneRankIsNamedOnEveryRank) {
  auto results = zero_disagree("zero-bucket-caps");
  for (const auto& r : results) {
    expect_fails(r,
                 {"ZeroRedundancyOptimizer: the options and buckets differ across ranks at #0: "
                  "rank 0 has 'stage=1 bucket_cap_mb=25 (26214400 bytes)",
                  "rank 1 has 'stage=1 bucket_cap_mb=0.0001 (104 bytes)", kZeroOptionsAdvice},
                 results);
  }
}

TEST(ZeroDisagreement, StageOnOneRankIsNamedOnEveryRank) {
  auto results = zero_disagree("zero-stages");
  for (const auto& r : results) {
    expect_fails(r,
                 {"ZeroRedundancyOptimizer: the options and buckets differ across ranks at #0: "
                  "rank 0 has 'stage=1 ",
                  "rank 1 has 'stage=2 ", kZeroOptionsAdvice},
                 results);
  }
}

TEST(ZeroDisagreement, ParameterShapeOnOneRankIsNamedOnEveryRank) {
  auto results = zero_disagree("zero-shapes");
  for (const auto& r : results) {
    expect_fails(r,
                 {"ZeroRedundancyOptimizer: the parameters differ across ranks at #0: rank 0 has "
                  "'#0 float32 [16, 8]', rank 1 has '#0 float32 [12, 8]'",
                  "Pass every rank the same parameters, in the same order"},
                 results);
  }
}

}  // namespace
}  // namespace ddp::testing
