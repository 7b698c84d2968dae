// Unit tests of ddp::TcpStore: servers and clients in one process, on
// loopback. Every server uses port 0 so parallel test runs cannot collide,
// and every store has a short timeout so that no test can hang.

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ddp/base/errors.hpp"
#include "ddp/comm/tcp_store.hpp"

namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using StorePtr = c10::intrusive_ptr<ddp::TcpStore>;

constexpr milliseconds kTestTimeout = std::chrono::seconds(10);

ddp::TcpStoreOptions options(const std::string& host, int port) {
  return ddp::TcpStoreOptions().host(host).port(port).timeout(kTestTimeout);
}

StorePtr start_server(const std::string& host = "127.0.0.1") {
  return c10::make_intrusive<ddp::TcpStore>(options(host, 0).is_server(true));
}

StorePtr connect_to(const ddp::TcpStore& server) {
  return c10::make_intrusive<ddp::TcpStore>(options(server.host(), server.port()));
}

std::vector<uint8_t> bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

std::string text(const std::vector<uint8_t>& data) { return std::string(data.begin(), data.end()); }

milliseconds elapsed_since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// A socket listening on 127.0.0.1 at a port the kernel picked; closes itself.
class ListeningSocket {
 public:
  ListeningSocket() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(fd_, 1) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "could not set up a listening socket";
    }
    port_ = ntohs(address.sin_port);
  }
  ~ListeningSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// An IPv4 address of this machine other than loopback, or "" if none.
std::string non_loopback_i_pv4() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (const ifaddrs* entry = list; entry != nullptr && found.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) {
      continue;
    }
    const auto* ipv4 = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if ((ntohl(ipv4->sin_addr.s_addr) >> 24) == 127) continue;
    char buffer[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &ipv4->sin_addr, buffer, sizeof(buffer))) {
      found = buffer;
    }
  }
  freeifaddrs(list);
  return found;
}

TEST(CoreStore, SetGetAcrossClients) {
  auto server = start_server();
  EXPECT_GT(server->port(), 0);  // the port the server picked
  EXPECT_EQ(server->host(), "127.0.0.1");
  server->set("from_server", bytes("s"));
  auto run_client = [&](const std::string& name, const std::string& peer) {
    auto client = connect_to(*server);
    client->set("from_" + name, bytes(name + "_value"));
    EXPECT_EQ(text(client->get("from_server")), "s");
    return text(client->get("from_" + peer));  // blocks until the peer set it
  };
  auto first = std::async(std::launch::async, run_client, "a", "b");
  auto second = std::async(std::launch::async, run_client, "b", "a");
  EXPECT_EQ(first.get(), "b_value");
  EXPECT_EQ(second.get(), "a_value");
  EXPECT_EQ(text(server->get("from_a")), "a_value");
  EXPECT_EQ(text(server->get("from_b")), "b_value");
}

TEST(CoreStore, GetBlocksUntilAnotherThreadSetsTheKey) {
  auto server = start_server();
  auto client = connect_to(*server);
  const auto start = Clock::now();
  auto value = std::async(std::launch::async, [&] { return text(client->get("late")); });
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(value.wait_for(milliseconds(0)), std::future_status::timeout)
      << "get() returned before the key was set";
  server->set("late", bytes("here"));
  EXPECT_EQ(value.get(), "here");
  EXPECT_GE(elapsed_since(start), milliseconds(300));
}

TEST(CoreStore, AddReturnsExactRunningTotalsFromFourThreads) {
  auto server = start_server();
  constexpr int kThreads = 4;
  constexpr int kAddsPerThread = 1000;
  std::vector<std::future<std::vector<int64_t>>> results;
  for (int t = 0; t < kThreads; ++t) {
    results.push_back(std::async(std::launch::async, [&] {
      auto client = connect_to(*server);
      std::vector<int64_t> totals;
      for (int i = 0; i < kAddsPerThread; ++i) {
        totals.push_back(client->add("counter", 1));
      }
      return totals;
    }));
  }
  // Each add returns the total after it, so together the threads must have
  // seen every total from 1 to 4000 exactly once.
  std::set<int64_t> seen;
  for (auto& result : results) {
    for (int64_t total : result.get()) {
      EXPECT_TRUE(seen.insert(total).second) << "total seen twice: " << total;
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kAddsPerThread));
  EXPECT_EQ(*seen.begin(), 1);
  EXPECT_EQ(*seen.rbegin(), kThreads * kAddsPerThread);
  EXPECT_EQ(server->add("counter", 0), 4000);
  // Stored as a decimal string, like c10d's TCPStore.
  EXPECT_EQ(text(server->get("counter")), "4000");
  EXPECT_EQ(server->add("counter", -4010), -10);
}

TEST(CoreStore, AddToANonIntegerValueThrowsInvalidArgumentError) {
  auto server = start_server();
  server->set("word", bytes("abc"));
  try {
    server->add("word", 1);
    FAIL() << "add() on a non-integer value did not throw";
  } catch (const ddp::InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("'word'"), std::string::npos) << error.what();
  }
  EXPECT_EQ(server->add("other", 2), 2);  // the connection is still usable
}

TEST(CoreStore, CompareSetFollowsC10dSemantics) {
  auto server = start_server();
  // Missing key, empty expected value: the desired value is set.
  EXPECT_EQ(text(server->compareSet("a", bytes(""), bytes("one"))), "one");
  EXPECT_EQ(text(server->get("a")), "one");
  // Missing key, non-empty expected value: nothing is set, expected echoed.
  EXPECT_EQ(text(server->compareSet("b", bytes("x"), bytes("y"))), "x");
  EXPECT_FALSE(server->check({"b"}));
  // Current value matches: replaced, desired returned.
  EXPECT_EQ(text(server->compareSet("a", bytes("one"), bytes("two"))), "two");
  EXPECT_EQ(text(server->get("a")), "two");
  // Current value differs: unchanged, current returned.
  EXPECT_EQ(text(server->compareSet("a", bytes("one"), bytes("three"))), "two");
  EXPECT_EQ(text(server->get("a")), "two");
}

TEST(CoreStore, CheckDeleteKeyAndGetNumKeys) {
  auto server = start_server();
  auto client = connect_to(*server);
  EXPECT_EQ(client->getNumKeys(), 0);
  EXPECT_TRUE(client->check({}));
  client->set("x", bytes("1"));
  server->set("y", bytes("2"));
  EXPECT_EQ(client->getNumKeys(), 2);
  EXPECT_TRUE(client->check({"x"}));
  EXPECT_TRUE(client->check({"x", "y"}));
  EXPECT_FALSE(client->check({"x", "z"}));
  EXPECT_TRUE(server->deleteKey("x"));
  EXPECT_FALSE(server->deleteKey("x"));
  EXPECT_FALSE(client->check({"x"}));
  EXPECT_EQ(client->getNumKeys(), 1);
  EXPECT_TRUE(client->deleteKey("y"));
  EXPECT_EQ(server->getNumKeys(), 0);
  server->set("key", bytes("first"));
  client->set("key", bytes("second"));  // set() overwrites
  EXPECT_EQ(text(server->get("key")), "second");
  EXPECT_EQ(client->getNumKeys(), 1);
}

TEST(CoreStore, WaitTimesOutWithTimeoutErrorNamingKeysAndTimeout) {
  auto server = start_server();
  auto client = connect_to(*server);
  client->set("present", bytes("1"));
  const milliseconds timeout(500);
  const auto start = Clock::now();
  try {
    client->wait({"present", "missing_key"}, timeout);
    FAIL() << "wait() returned although a key never appeared";
  } catch (const ddp::TimeoutError& error) {
    const auto elapsed = elapsed_since(start);
    EXPECT_GE(elapsed, timeout);
    EXPECT_LT(elapsed, timeout + std::chrono::seconds(2));
    const std::string message = error.what();
    EXPECT_NE(message.find("missing_key"), std::string::npos) << message;
    EXPECT_NE(message.find("500 ms"), std::string::npos) << message;
    EXPECT_NE(message.find("still missing: [\"missing_key\"]"), std::string::npos) << message;
  }
  // The timed-out request left nothing behind on the connection.
  client->set("after", bytes("ok"));
  EXPECT_EQ(text(client->get("after")), "ok");
}

TEST(CoreStore, GetTimesOutAfterTheStoreTimeout) {
  auto server = start_server();
  auto client = connect_to(*server);
  client->setTimeout(milliseconds(300));
  const auto start = Clock::now();
  try {
    client->get("never_set");
    FAIL() << "get() returned for a key that was never set";
  } catch (const ddp::TimeoutError& error) {
    EXPECT_GE(elapsed_since(start), milliseconds(300));
    EXPECT_LT(elapsed_since(start), milliseconds(2300));
    const std::string message = error.what();
    EXPECT_NE(message.find("never_set"), std::string::npos) << message;
    EXPECT_NE(message.find("300 ms"), std::string::npos) << message;
  }
}

TEST(CoreStore, WaitReturnsOnceAllKeysExist) {
  auto server = start_server();
  auto client = connect_to(*server);
  auto waiter = std::async(std::launch::async, [&] {
    client->wait({"k1", "k2"}, c10d::Store::kNoTimeout);
  });
  server->set("k1", bytes("1"));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(waiter.wait_for(milliseconds(0)), std::future_status::timeout);
  server->add("k2", 1);
  EXPECT_EQ(waiter.wait_for(kTestTimeout), std::future_status::ready);
  waiter.get();
}

TEST(CoreStore, ClientThrowsRendezvousErrorWhenNothingListens) {
  const int port = ListeningSocket().port();  // closed again at once
  const milliseconds timeout(500);
  const auto start = Clock::now();
  try {
    ddp::TcpStore client(options("127.0.0.1", port).timeout(timeout));
    FAIL() << "connected to a port where nothing listens";
  } catch (const ddp::RendezvousError& error) {
    EXPECT_GE(elapsed_since(start), timeout);
    EXPECT_LT(elapsed_since(start), timeout + std::chrono::seconds(2));
    const std::string message = error.what();
    EXPECT_NE(message.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
    EXPECT_NE(message.find("500 ms"), std::string::npos) << message;
  }
}

TEST(CoreStore, ServerOnAPortInUseThrowsRendezvousError) {
  ListeningSocket taken;
  try {
    ddp::TcpStore server(options("127.0.0.1", taken.port()).is_server(true));
    FAIL() << "hosted a store on a port that is already taken";
  } catch (const ddp::RendezvousError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(std::to_string(taken.port())), std::string::npos) << message;
    EXPECT_NE(message.find("already in use"), std::string::npos) << message;
  }
}

TEST(CoreStore, ServerBoundToLoopbackIsNotReachableOnOtherAddresses) {
  const std::string other = non_loopback_i_pv4();
  if (other.empty()) {
    GTEST_SKIP() << "this machine has no non-loopback IPv4 address to try";
  }
  auto server = start_server("127.0.0.1");
  EXPECT_NO_THROW(connect_to(*server));  // reachable where it is bound
  EXPECT_THROW(ddp::TcpStore(options(other, server->port()).timeout(milliseconds(300))),
               ddp::RendezvousError)
      << "a store bound to 127.0.0.1 answered on " << other;
}

TEST(CoreStore, ServerOnIPv6Loopback) {
  StorePtr server;
  try {
    server = start_server("::1");
  } catch (const ddp::RendezvousError& error) {
    GTEST_SKIP() << "IPv6 loopback is not available here: " << error.what();
  }
  auto client = connect_to(*server);
  client->set("v6", bytes("yes"));
  EXPECT_EQ(text(server->get("v6")), "yes");
}

TEST(CoreStore, ClientThrowsWhenTheServerGoesAwayDuringAWait) {
  auto server = start_server();
  auto client = connect_to(*server);
  auto waiter =
      std::async(std::launch::async, [&] { client->wait({"never"}, std::chrono::seconds(30)); });
  std::this_thread::sleep_for(milliseconds(200));
  const auto start = Clock::now();
  server.reset();  // stops the server and closes its sockets
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "the client kept waiting after the server went away";
  EXPECT_THROW(waiter.get(), ddp::RendezvousError);
  EXPECT_LT(elapsed_since(start), std::chrono::seconds(5));
  // Later calls fail at once too, saying the connection was lost.
  try {
    client->set("k", bytes("v"));
    FAIL() << "set() succeeded on a lost connection";
  } catch (const ddp::RendezvousError& error) {
    EXPECT_NE(std::string(error.what()).find("lost"), std::string::npos) << error.what();
  }
}

TEST(CoreStore, BinaryValuesRoundTrip) {
  auto server = start_server();
  auto client = connect_to(*server);
  std::vector<uint8_t> all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(static_cast<uint8_t>(i));
  const std::vector<uint8_t> edges = {0x00, 0xff, 0x00, 0x00, 0xff};
  client->set("all", all_bytes);
  client->set("edges", edges);
  client->set("empty", std::vector<uint8_t>{});
  EXPECT_EQ(server->get("all"), all_bytes);
  EXPECT_EQ(server->get("edges"), edges);
  EXPECT_EQ(server->get("empty"), std::vector<uint8_t>{});
  const std::vector<uint8_t> big(1 << 20, 0xab);
  client->set("big", big);
  EXPECT_EQ(server->get("big"), big);
}

TEST(CoreStore, CloneConnectsToTheSameServer) {
  auto server = start_server();
  auto clone = server->clone();
  clone->set("through_clone", bytes("1"));
  EXPECT_TRUE(server->check({"through_clone"}));
}

TEST(CoreStore, InvalidOptionsThrowConfigError) {
  using ddp::TcpStoreOptions;
  EXPECT_THROW(ddp::TcpStore(TcpStoreOptions().port(70000)), ddp::ConfigError);
  EXPECT_THROW(ddp::TcpStore(TcpStoreOptions().port(-1)), ddp::ConfigError);
  EXPECT_THROW(ddp::TcpStore(TcpStoreOptions().port(0)), ddp::ConfigError);
  EXPECT_THROW(ddp::TcpStore(TcpStoreOptions().host("")), ddp::ConfigError);
  EXPECT_THROW(ddp::TcpStore(TcpStoreOptions().timeout(milliseconds(-1))), ddp::ConfigError);
}

}  // namespace
