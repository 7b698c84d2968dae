// Note [The launcher's protocol] in comm/store/worker_protocol.hpp: every
// key builder gives a key of its own, and the store file reads back as the
// launcher wrote it, or is a ConfigError that shows what it held.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "comm/store/worker_protocol.hpp"
#include "ddp/base/errors.hpp"

namespace store = ddp::comm::store;

namespace {

// A fresh directory for one test's files, removed at its end.
class ProtocolDir {
 public:
  ProtocolDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ddp-protocol-XXXXXX").string();
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~ProtocolDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace

TEST(CoreWorkerProtocol, EveryKeyBuilderGivesADistinctKey) {
  const std::vector<std::string> keys = {
      store::generations_key(),
      store::finished_key(),
      store::generation_prefix(3),
      store::generation_prefix(4),
      store::reseat_key(3, 0),
      store::reseat_key(3, 1),
      store::reseat_key(4, 0),
      store::spare_ready_key("a1"),
      store::spare_seat_key("a1"),
      store::spare_running_key("a1"),
      store::spare_ready_key("b2"),
      store::run_id_key(),
      store::takeover_key(),
      store::rendezvous_key("job", -1, "closed"),
      store::rendezvous_key("job", 0, "closed"),
      store::rendezvous_key("job", 1, "closed"),
      store::rendezvous_key("other", -1, "closed"),
      store::attempt_key("job", 0, "port"),
      store::attempt_key("job", 1, "port"),
      store::attempt_key("job", 0, "failure"),
      store::recovery_store_key("job"),
      store::recovery_store_key("other"),
  };
  const std::set<std::string> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size());
  for (const auto& key : keys) EXPECT_FALSE(key.empty());
  // The worker-side keys live under ddp/, the agents' under ddprun/.
  EXPECT_EQ(store::finished_key().rfind("ddp/", 0), 0u);
  EXPECT_EQ(store::takeover_key().rfind("ddprun/", 0), 0u);
}

TEST(CoreWorkerProtocol, TheStoreFileReadsBackAsWritten) {
  ProtocolDir dir;
  const std::string path = dir.file("recovery_store");
  EXPECT_FALSE(store::read_store_file(path).has_value());  // not written yet
  store::write_store_file(path, {1, "node0.example:29512"});
  auto first = store::read_store_file(path);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->count, 1);
  EXPECT_EQ(first->address, "node0.example:29512");
  store::write_store_file(path, {2, "10.0.0.7:40001"});  // the store moved
  auto second = store::read_store_file(path);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->count, 2);
  EXPECT_EQ(second->address, "10.0.0.7:40001");
  EXPECT_FALSE(std::filesystem::exists(path + ".new"));
  EXPECT_EQ(store::format_store_file({2, "10.0.0.7:40001"}), "2 10.0.0.7:40001\n");
}

TEST(CoreWorkerProtocol, AMalformedStoreFileIsAConfigErrorShowingItsContent) {
  ProtocolDir dir;
  const std::string path = dir.file("recovery_store");
  for (const std::string text : {"", "node0:29512", "x node0:29512", "1 node0", "0 node0:29512",
                                 "1 :29512", "1 node0:29512 trailing"}) {
    {
      std::ofstream file(path, std::ios::trunc);
      file << text;
    }
    try {
      store::read_store_file(path);
      ADD_FAILURE() << "'" << text << "' was read as a store file entry";
    } catch (const ddp::ConfigError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_NE(message.find("holds '" + text + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("<count> HOST:PORT"), std::string::npos) << message;
    }
  }
}

TEST(CoreWorkerProtocol, ASeatReadsBackAsEncoded) {
  const std::map<std::string, std::string> seat = {
      {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "node0"}};
  EXPECT_EQ(store::decode_seat(store::encode_seat(seat)), seat);
}

TEST(CoreWorkerProtocol, AFailureReadsBackWithWhetherItRepeats) {
  const store::AttemptFailure repeats{"rank 1 (node 0) ended with exit 9: disk full", true};
  const store::AttemptFailure parsed = store::parse_failure_value(store::failure_value(repeats));
  EXPECT_EQ(parsed.text, repeats.text);
  EXPECT_TRUE(parsed.repeats);
  const store::AttemptFailure restart =
      store::parse_failure_value(store::failure_value({"repeats\nin the text", false}));
  EXPECT_EQ(restart.text, "repeats\nin the text");
  EXPECT_FALSE(restart.repeats);
  // An older agent's value: all text, restarted as before.
  const store::AttemptFailure old = store::parse_failure_value("node 1 stopped its heartbeat");
  EXPECT_EQ(old.text, "node 1 stopped its heartbeat");
  EXPECT_FALSE(old.repeats);
}
