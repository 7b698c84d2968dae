// Note [A port held from choice to use], checked against the kernel: in a
// network namespace of the test's own, whose ephemeral range is narrowed to
// 64 ports so that every bind(0) and connect() choice can be exhausted, the
// reserved port is never handed out, while ddp's store still listens on it.
// A port found free the old way (bound, read back, closed) is handed out.
// Skipped, with the reason, where the machine allows no network namespace.

#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ddp/comm/tcp_store.hpp"
#include "ddp/launch/port_reservation.hpp"

namespace ddp::launch {
namespace {

constexpr int kFirst = 40000;  // the namespace's ephemeral range
constexpr int kLast = 40063;

// A namespace with `lo` up and the range above; "" when made, else why not.
std::string enter_narrow_namespace() {
  if (unshare(CLONE_NEWNET) != 0) {
    return std::string("unshare(CLONE_NEWNET) failed: ") + std::strerror(errno);
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  const bool up = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &request) == 0 &&
                  (request.ifr_flags |= IFF_UP, ioctl(fd, SIOCSIFFLAGS, &request) == 0);
  if (fd >= 0) close(fd);
  if (!up) return "cannot bring up lo in the new namespace";
  std::ofstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range << kFirst << " " << kLast << "\n";
  range.close();
  if (!range) return "cannot narrow net.ipv4.ip_local_port_range in the new namespace";
  return "";
}

sockaddr_in loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

int local_port(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return ntohs(address.sin_port);
}

// Every port bind(0) hands out until the range is exhausted.
std::set<int> ports_bind_zero_gives() {
  std::vector<int> fds;
  std::set<int> ports;
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = loopback(0);
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      close(fd);
      break;
    }
    fds.push_back(fd);
    ports.insert(local_port(fd));
  }
  for (int fd : fds) close(fd);
  return ports;
}

// Every source port connect() takes until the range is exhausted.
std::set<int> ports_connect_takes() {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in server = loopback(30000);  // outside the range
  bind(listener, reinterpret_cast<sockaddr*>(&server), sizeof(server));
  listen(listener, 256);
  std::vector<int> fds = {listener};
  std::set<int> ports;
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) != 0) {
      close(fd);
      break;
    }
    fds.push_back(fd);
    fds.push_back(accept(listener, nullptr, nullptr));
    ports.insert(local_port(fd));
  }
  for (int fd : fds) close(fd);
  return ports;
}

// The checks, in the calling thread's new namespace.
void check_reservation() {
  // The old way: the port is free when looked at, and handed out again.
  int found_free = 0;
  {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = loopback(0);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    found_free = local_port(fd);
    close(fd);
  }
  EXPECT_EQ(ports_bind_zero_gives().count(found_free), 1u) << "port " << found_free;

  const PortReservation reserved;
  ASSERT_GE(reserved.port(), kFirst);
  ASSERT_LE(reserved.port(), kLast);
  const std::set<int> bound = ports_bind_zero_gives();
  EXPECT_EQ(bound.size(), static_cast<size_t>(kLast - kFirst));  // all but the reserved one
  EXPECT_EQ(bound.count(reserved.port()), 0u) << "bind(0) took reserved port " << reserved.port();
  const std::set<int> connected = ports_connect_takes();
  EXPECT_EQ(connected.size(), static_cast<size_t>(kLast - kFirst));
  EXPECT_EQ(connected.count(reserved.port()), 0u)
      << "connect() took reserved port " << reserved.port();

  // Rank 0's store binds the port by number and serves there.
  TcpStore server(TcpStoreOptions().port(reserved.port()).is_server(true));
  TcpStore client(TcpStoreOptions().port(reserved.port()));
  server.set("key", std::vector<uint8_t>{'v'});
  EXPECT_EQ(client.get("key"), std::vector<uint8_t>{'v'});
}

// unshare(CLONE_NEWNET) moves only the calling thread (and the threads it
// starts, such as the store's), so the checks run in a thread of their own
// and the rest of this process keeps the machine's network.
TEST(CorePortReservation, NoBindOrConnectTakesTheReservedPortButTheStoreListensThere) {
  std::string why_not;
  std::thread([&] {
    why_not = enter_narrow_namespace();
    if (why_not.empty()) check_reservation();
  }).join();
  if (!why_not.empty()) GTEST_SKIP() << why_not;
}

}  // namespace
}  // namespace ddp::launch
