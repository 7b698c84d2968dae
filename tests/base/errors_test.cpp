// Every error type, those of ddp/base/errors.hpp and those the parts declare
// (ddp/snapshot/errors.hpp, ddp/data/errors.hpp, ddp/training/errors.hpp,
// ddp/launch/errors.hpp), has its own exit code, the one that
// Note [Exit codes] lists: the table below is the closed list of kinds, and
// a new kind must be added to it. Adding context (rethrow_with_prefix, as
// DataParallel does for a failed replica) keeps the kind.

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "ddp/base/errors.hpp"
#include "ddp/data/errors.hpp"
#include "ddp/formats/errors.hpp"
#include "ddp/launch/errors.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/training/errors.hpp"

namespace ddp {
namespace {

struct Kind {
  std::string name;
  std::function<void(const std::string&)> raise;
  ExitCode code;
  int value;  // The number scripts see; never changes once released.
};

template <typename E>
std::function<void(const std::string&)> raising() {
  return [](const std::string& message) { throw E(message); };
}

const std::vector<Kind>& all_kinds() {
  static const std::vector<Kind> kinds = {
      {"ConfigError", raising<ConfigError>(), ExitCode::kConfig, 3},
      {"RendezvousError", raising<RendezvousError>(), ExitCode::kRendezvous, 4},
      {"TimeoutError", raising<TimeoutError>(), ExitCode::kTimeout, 5},
      {"CollectiveError", raising<CollectiveError>(), ExitCode::kCollective, 6},
      {"InvalidArgumentError", raising<InvalidArgumentError>(), ExitCode::kInvalidArgument, 7},
      {"BackendUnavailableError", raising<BackendUnavailableError>(), ExitCode::kBackendUnavailable,
       8},
      {"SnapshotError", raising<SnapshotError>(), ExitCode::kSnapshot, 9},
      {"DataError", raising<DataError>(), ExitCode::kData, 10},
      {"MetricsError", raising<MetricsError>(), ExitCode::kMetrics, 11},
      {"PlotError", raising<PlotError>(), ExitCode::kPlot, 12},
      {"IoError", raising<IoError>(), ExitCode::kIo, 13},
      {"LaunchError", raising<LaunchError>(), ExitCode::kLaunch, 14},
      {"FormatError", raising<ddp::formats::FormatError>(), ExitCode::kFormat, 15},
  };
  return kinds;
}

TEST(BaseExitCodes, EveryKindMapsToItsOwnDocumentedCode) {
  for (const Kind& kind : all_kinds()) {
    SCOPED_TRACE(kind.name);
    EXPECT_EQ(static_cast<int>(kind.code), kind.value);
    try {
      kind.raise("what went wrong");
      ADD_FAILURE() << "nothing thrown";
    } catch (const Error& e) {  // Every kind is a ddp::Error ...
      EXPECT_STREQ(e.what(), "what went wrong");
      EXPECT_EQ(exit_code_for(e), kind.code);
      // ... and is classified as well through a std::exception.
      const std::exception& plain = e;
      EXPECT_EQ(exit_code_for(plain), kind.code);
      EXPECT_EQ(e.exit_code(), kind.code);
      try {
        e.rethrow_with_prefix("replica 1: ");
      } catch (const Error& again) {
        EXPECT_STREQ(again.what(), "replica 1: what went wrong");
        EXPECT_EQ(again.exit_code(), kind.code);
        EXPECT_EQ(typeid(again), typeid(e)) << typeid(again).name();
      }
    }
  }
  // ddp::Error itself, and any other exception, is kFailure.
  try {
    Error("plain").rethrow_with_prefix("context: ");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "context: plain");
    EXPECT_EQ(typeid(e), typeid(Error));
    EXPECT_EQ(exit_code_for(e), ExitCode::kFailure);
  }
  EXPECT_EQ(exit_code_for(std::runtime_error("foreign")), ExitCode::kFailure);
}

TEST(BaseExitCodes, CodesAreDistinctAndFollowSuccessAndFailure) {
  std::map<int, std::string> owner;
  for (const Kind& kind : all_kinds()) {
    const auto [it, inserted] = owner.emplace(kind.value, kind.name);
    EXPECT_TRUE(inserted) << kind.name << " shares exit code " << kind.value << " with "
                          << it->second;
  }
  EXPECT_EQ(static_cast<int>(ExitCode::kSuccess), 0);
  EXPECT_EQ(static_cast<int>(ExitCode::kFailure), 1);
  // 0, 1 and 2 belong to no kind; the kinds take 3, 4, ... without gaps.
  std::set<int> expected;
  for (int value = 3; value < 3 + static_cast<int>(all_kinds().size()); ++value) {
    expected.insert(value);
  }
  std::set<int> actual;
  for (const auto& entry : owner) actual.insert(entry.first);
  EXPECT_EQ(actual, expected);
}

// Every enumerator of ExitCode, written out: the kinds' codes, kSuccess and
// kFailure must all differ, including the codes of kinds that live in
// different parts' headers.
TEST(BaseExitCodes, EveryExitCodeValueIsDistinct) {
  const std::vector<std::pair<std::string, ExitCode>> codes = {
      {"kSuccess", ExitCode::kSuccess},
      {"kFailure", ExitCode::kFailure},
      {"kConfig", ExitCode::kConfig},
      {"kRendezvous", ExitCode::kRendezvous},
      {"kTimeout", ExitCode::kTimeout},
      {"kCollective", ExitCode::kCollective},
      {"kInvalidArgument", ExitCode::kInvalidArgument},
      {"kBackendUnavailable", ExitCode::kBackendUnavailable},
      {"kSnapshot", ExitCode::kSnapshot},
      {"kData", ExitCode::kData},
      {"kMetrics", ExitCode::kMetrics},
      {"kPlot", ExitCode::kPlot},
      {"kIo", ExitCode::kIo},
      {"kLaunch", ExitCode::kLaunch},
      {"kFormat", ExitCode::kFormat},
  };
  // Two per kind in all_kinds() besides kSuccess and kFailure: none forgotten.
  EXPECT_EQ(codes.size(), all_kinds().size() + 2);
  std::map<int, std::string> owner;
  for (const auto& [name, code] : codes) {
    const auto [it, inserted] = owner.emplace(static_cast<int>(code), name);
    EXPECT_TRUE(inserted) << name << " has the value " << static_cast<int>(code) << " of "
                          << it->second;
  }
  EXPECT_EQ(owner.size(), codes.size());
  // And each kind's code is its own enumerator, not another kind's.
  std::set<ExitCode> kind_codes;
  for (const Kind& kind : all_kinds()) kind_codes.insert(kind.code);
  EXPECT_EQ(kind_codes.size(), all_kinds().size());
  EXPECT_EQ(kind_codes.count(ExitCode::kSuccess), 0u);
  EXPECT_EQ(kind_codes.count(ExitCode::kFailure), 0u);
}

// The kinds the parts declare keep the names users wrote before they moved
// (ddp::SnapshotError), and those are the parts' types.
TEST(BaseExitCodes, PartsKindsAreAlsoDdpNames) {
  EXPECT_EQ(typeid(ddp::SnapshotError), typeid(ddp::snapshot::SnapshotError));
  EXPECT_EQ(typeid(ddp::DataError), typeid(ddp::data::DataError));
  EXPECT_EQ(typeid(ddp::MetricsError), typeid(ddp::training::MetricsError));
  EXPECT_EQ(typeid(ddp::PlotError), typeid(ddp::training::PlotError));
  EXPECT_EQ(typeid(ddp::LaunchError), typeid(ddp::launch::LaunchError));
  EXPECT_EQ(exit_code_for(ddp::snapshot::SnapshotError("x")), ExitCode::kSnapshot);
  EXPECT_EQ(exit_code_for(ddp::launch::LaunchError("x")), ExitCode::kLaunch);
}

TEST(BaseExitCodes, OtherExceptionsAreGenericFailures) {
  EXPECT_EQ(exit_code_for(Error("a failure of no particular kind")), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(std::runtime_error("foreign")), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(std::logic_error("foreign")), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(std::out_of_range("foreign")), ExitCode::kFailure);
}

}  // namespace
}  // namespace ddp
