// Cutting a new partition out of a replicated state's shards (Note
// [Replicated shards] in ddp/parallel/sharded_state.hpp), as a commit in
// memory of a hybrid model holds them: 4 old ranks in rows of 2, each row
// a copy of one 10-element parameter; a new rank owning all of it takes
// each piece from the first of its copies at hand.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ddp/comm/init.hpp"
#include "ddp/parallel/sharded_state.hpp"
#include "ddp/snapshot/errors.hpp"
#include "snapshot/sharded_state.hpp"

namespace ddp::snapshot {
namespace {

using nlohmann::json;

constexpr int64_t kElements = 10;

// A rank of one owning the whole parameter, its values held with the shard.
class WholeParameter final : public parallel::ShardedState {
 public:
  WholeParameter()
      : group_(ddp::init(ddp::InitOptions(), ddp::EnvironmentMap{})),
        value_(torch::zeros({kElements}, torch::requires_grad())),
        optimizer_(std::vector<torch::Tensor>{value_}, torch::optim::SGDOptions(0.1)) {}
  ProcessGroup& group() const override { return *group_; }
  std::vector<int64_t> numels() const override { return {kElements}; }
  std::vector<std::string> names() const override { return {"w"}; }
  std::vector<std::vector<int64_t>> shapes() const override { return {{kElements}}; }
  std::vector<Piece> pieces() const override { return {{0, 0, kElements}}; }
  torch::optim::Optimizer& local_optimizer() override { return optimizer_; }
  const torch::optim::Optimizer& local_optimizer() const override { return optimizer_; }
  bool holds_values() const override { return true; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  torch::Tensor value_;
  torch::optim::SGD optimizer_;
};

// Old rank r holds elements [5 (r % 2), 5 (r % 2) + 5), valued by the row
// that wrote them (row 1's copies are 100 more, so the test sees which
// copy each element came from).
struct OldShards {
  json record = {{"world", 4},
                 {"shard_ranks", 2},
                 {"kind", "FullyShardedDataParallel"},
                 {"numels", {kElements}},
                 {"names", {"w"}},
                 {"shapes", {{kElements}}},
                 {"pieces", json::array()}};
  std::map<int, SnapshotFile> files;

  OldShards() {
    torch::Tensor five = torch::zeros({5}, torch::requires_grad());
    torch::optim::SGD sgd(std::vector<torch::Tensor>{five}, torch::optim::SGDOptions(0.1));
    detail::TensorMap unused;
    const json description = detail::export_optimizer(sgd, unused);
    for (int r = 0; r < 4; ++r) {
      const int64_t begin = 5 * (r % 2);
      const json pieces = json::array({json::array({0, begin, 5})});
      record["pieces"].push_back(pieces);
      SnapshotFile file;
      file.path = "(rank " + std::to_string(r) + "'s shard)";
      file.scalars_json = json{{"optimizer", description}, {"rank", r}, {"pieces", pieces}}.dump();
      file.tensors["value/p0"] = torch::arange(begin, begin + 5, torch::kFloat) + 100 * (r / 2);
      files.emplace(r, std::move(file));
    }
  }
  detail::ShardImport cut(WholeParameter& target, const std::set<int>& at_hand) const {
    return detail::prepare_shard_import("commit 1 in memory", record, target,
                                        [&](int r) -> const SnapshotFile* {
                                          return at_hand.count(r) != 0 ? &files.at(r) : nullptr;
                                        });
  }
};

TEST(SnapshotReplicatedShards, EachPieceComesFromTheFirstRowThatHoldsIt) {
  OldShards old;
  WholeParameter target;
  const auto all = old.cut(target, {0, 1, 2, 3});
  EXPECT_TRUE(torch::equal(all.values.at(0), torch::arange(0, kElements, torch::kFloat)))
      << all.values.at(0);
}

TEST(SnapshotReplicatedShards, ALostRankIsReplacedByItsCopyInAnotherRow) {
  OldShards old;
  WholeParameter target;
  // Ranks 0 and 3 lost: the first half from rank 2 (row 1), the second from rank 1.
  const auto split = old.cut(target, {1, 2});
  torch::Tensor expected = torch::arange(0, kElements, torch::kFloat);
  expected.narrow(0, 0, 5).add_(100);
  EXPECT_TRUE(torch::equal(split.values.at(0), expected)) << split.values.at(0);
}

TEST(SnapshotReplicatedShards, APieceWithNoCopyAtHandIsNamed) {
  OldShards old;
  WholeParameter target;
  try {
    old.cut(target, {1, 3});  // elements 0-4 only on ranks 0 and 2
    FAIL() << "no error";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("commit 1 in memory: rank 0's shard is not at hand"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ddp::snapshot
