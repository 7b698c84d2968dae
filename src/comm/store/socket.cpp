#include "comm/store/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/str.hpp"
#include "comm/store/wire.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::store {
namespace {

// A peer that went away must not kill the process with SIGPIPE.
constexpr int kSendFlags = MSG_NOSIGNAL;

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Resolves host:port for TCP. On failure returns null and sets `error`.
AddrInfoList resolve(const std::string& host, int port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    error = "could not resolve '" + host +
            "': " + (rc == EAI_SYSTEM ? errno_text(errno) : gai_strerror(rc));
    return nullptr;
  }
  return AddrInfoList(result);
}

Socket open_socket(const addrinfo& address) {
  return Socket(::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                         address.ai_protocol));
}

// Milliseconds until `deadline` for poll(): -1 for no deadline, never
// negative, capped so it fits an int.
int poll_timeout(Clock::time_point deadline) {
  if (deadline == kNoDeadline) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, INT_MAX));
}

// Waits until `fd` is ready for `events`; false when the deadline passed.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int rc = ::poll(&entry, 1, poll_timeout(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      if (Clock::now() >= deadline) return false;
      continue;  // poll rounds down; wait out the remainder.
    }
    if (errno != EINTR) {
      throw SocketError(SocketError::Kind::kFailed, "poll failed: " + errno_text(errno));
    }
  }
}

// True when a loopback connect landed on its own ephemeral port: with no
// listener, TCP's simultaneous open can connect a socket to itself.
bool connected_to_itself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return false;
  }
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

// One connect attempt to one address, bounded by `deadline`. On failure
// returns an invalid socket and sets `error`.
Socket try_connect(const addrinfo& address, Clock::time_point deadline, std::string& error) {
  Socket socket = open_socket(address);
  if (!socket.valid()) {
    error = "socket() failed: " + errno_text(errno);
    return Socket();
  }
  if (::connect(socket.fd(), address.ai_addr, address.ai_addrlen) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      error = errno_text(errno);
      return Socket();
    }
    if (!wait_ready(socket.fd(), POLLOUT, deadline)) {
      error = "connection attempt timed out";
      return Socket();
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0) {
      error = errno_text(so_error);
      return Socket();
    }
  }
  if (connected_to_itself(socket.fd())) {
    error = errno_text(ECONNREFUSED);
    return Socket();
  }
  set_no_delay(socket.fd());
  return socket;
}

}  // namespace

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds::zero()) return kNoDeadline;
  const auto now = Clock::now();
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(kNoDeadline - now)) {
    return kNoDeadline;
  }
  return now + timeout;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::close() {
  // close() is not retried on EINTR: on Linux the descriptor is gone anyway,
  // and retrying could close a descriptor another thread just opened.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string format_endpoint(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) {
    return base::detail::str("[", host, "]:", port);
  }
  return base::detail::str(host, ":", port);
}

std::string errno_text(int error) {
  char buffer[256];
  // The GNU strerror_r returns the message (maybe not in buffer); the XSI
  // one fills buffer. Handle both.
  const auto result = strerror_r(error, buffer, sizeof(buffer));
  if constexpr (std::is_same_v<decltype(result), char* const>) {
    return result;
  } else {
    return result == 0 ? buffer : base::detail::str("errno ", error);
  }
}

Socket listen_on(const std::string& host, int port) {
  const std::string endpoint = format_endpoint(host, port);
  const std::string prefix = "cannot host the rendezvous store on " + endpoint + ": ";
  std::string error;
  AddrInfoList addresses = resolve(host, port, error);
  if (!addresses) {
    throw RendezvousError(prefix + error +
                          ". Set MASTER_ADDR to an address or host name of "
                          "the machine that runs rank 0.");
  }
  // A host name may resolve to several addresses (::1 and 127.0.0.1 for
  // localhost); the first one this machine can bind is used. A port in use is
  // final: trying the next address would only hide the conflict.
  for (const addrinfo* address = addresses.get(); address != nullptr; address = address->ai_next) {
    Socket socket = open_socket(*address);
    if (!socket.valid()) {
      error = "socket() failed: " + errno_text(errno);
      continue;
    }
    int one = 1;
    setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (address->ai_family == AF_INET6) {
      // Bound to one IPv6 address, never to IPv4-mapped ones as well.
      setsockopt(socket.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    if (::bind(socket.fd(), address->ai_addr, address->ai_addrlen) != 0) {
      const int bind_errno = errno;
      if (bind_errno == EADDRINUSE) {
        throw RendezvousError(prefix +
                              "the port is already in use. Another job or an earlier "
                              "run holds it; choose another MASTER_PORT or stop that process.");
      }
      if (bind_errno == EACCES) {
        throw RendezvousError(prefix + "permission denied (" + errno_text(bind_errno) +
                              "). Ports below 1024 need privileges; choose a MASTER_PORT of "
                              "1024 or above.");
      }
      if (bind_errno == EADDRNOTAVAIL) {
        error = "'" + host + "' is not an address of this machine (" + errno_text(bind_errno) + ")";
      } else {
        error = "bind failed (" + errno_text(bind_errno) + ")";
      }
      continue;
    }
    if (::listen(socket.fd(), SOMAXCONN) != 0) {
      error = "listen failed (" + errno_text(errno) + ")";
      continue;
    }
    return socket;
  }
  throw RendezvousError(prefix + error +
                        ". On rank 0, MASTER_ADDR must name one of this "
                        "machine's own addresses (see `ip addr`).");
}

int local_port(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return -1;
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

std::string local_address(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  char text[NI_MAXHOST] = {};
  if (getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&address), length, text, sizeof(text), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return {};
  }
  return text;
}

Socket connect_with_retry(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = deadline_after(timeout);
  // Start retrying quickly (rank 0 usually comes up within milliseconds)
  // and back off so that many ranks do not hammer a slow master.
  auto backoff = std::chrono::milliseconds(10);
  const auto max_backoff = std::chrono::milliseconds(1000);
  std::string last_error = "no attempt was made";
  for (;;) {
    AddrInfoList addresses = resolve(host, port, last_error);
    for (const addrinfo* address = addresses.get(); address != nullptr;
         address = address->ai_next) {
      Socket socket;
      try {
        socket = try_connect(*address, deadline, last_error);
      } catch (const SocketError& error) {
        // poll() itself failed: retrying cannot help. SocketError is
        // internal (Note [Internal store errors stay inside] in socket.hpp).
        throw RendezvousError("could not reach the rendezvous store at " +
                              format_endpoint(host, port) + ": " + error.what() +
                              ". The process may have run out of memory or "
                              "file descriptors; check `ulimit -n` and restart the job.");
      }
      if (socket.valid()) return socket;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, max_backoff);
  }
  throw RendezvousError(base::detail::str(
      "could not reach the rendezvous store at ", format_endpoint(host, port), " within ",
      timeout.count(), " ms (last error: ", last_error,
      "). Check MASTER_ADDR and MASTER_PORT, that rank 0 has started, and that no "
      "firewall blocks the port; or raise the rendezvous timeout."));
}

void set_non_blocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void set_no_delay(int fd) {
  // Requests and replies are small and strictly alternate; Nagle's algorithm
  // would delay each one by up to 40 ms.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string encode_frame(std::string_view payload) {
  WireWriter writer;
  writer.bytes(payload);
  return std::move(writer.payload());
}

bool take_frame(std::string& buffer, std::string& payload, std::uint32_t max_bytes) {
  if (buffer.size() < 4) return false;
  const std::uint32_t length = WireReader(buffer).u32();
  if (length > max_bytes) {
    throw WireError(
        base::detail::str("store frame of ", length, " bytes exceeds the limit of ", max_bytes));
  }
  if (buffer.size() - 4 < length) return false;
  payload.assign(buffer, 4, length);
  buffer.erase(0, 4 + static_cast<std::size_t>(length));
  return true;
}

bool read_available(int fd, std::string& buffer, std::size_t limit) {
  char chunk[64 * 1024];
  while (buffer.size() < limit) {
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer.append(chunk, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

bool write_available(int fd, std::string& buffer) {
  std::size_t sent = 0;
  bool ok = true;
  while (sent < buffer.size()) {
    const ssize_t n = ::send(fd, buffer.data() + sent, buffer.size() - sent, kSendFlags);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    ok = errno == EAGAIN || errno == EWOULDBLOCK;
    break;
  }
  buffer.erase(0, sent);
  return ok;
}

void send_frame(const Socket& socket, std::string_view payload, Clock::time_point deadline) {
  std::string pending = encode_frame(payload);
  while (!pending.empty()) {
    if (!write_available(socket.fd(), pending)) {
      throw SocketError(SocketError::Kind::kClosed, "send failed: " + errno_text(errno));
    }
    if (!pending.empty() && !wait_ready(socket.fd(), POLLOUT, deadline)) {
      throw SocketError(SocketError::Kind::kTimedOut, "send timed out");
    }
  }
}

std::string recv_frame(const Socket& socket, Clock::time_point deadline) {
  std::string buffer;
  std::string payload;
  for (;;) {
    // A reply followed at once by the server closing still counts.
    const bool open = read_available(socket.fd(), buffer, std::size_t{kMaxFrameBytes} + 4);
    try {
      if (take_frame(buffer, payload)) break;
    } catch (const WireError& error) {
      throw SocketError(SocketError::Kind::kFailed, error.what());
    }
    if (!open) {
      throw SocketError(SocketError::Kind::kClosed,
                        "the connection was closed by the store server");
    }
    if (!wait_ready(socket.fd(), POLLIN, deadline)) {
      throw SocketError(SocketError::Kind::kTimedOut, "no reply in time");
    }
  }
  if (!buffer.empty()) {
    // One request, one reply: extra bytes mean the stream is out of step.
    throw SocketError(SocketError::Kind::kFailed, "unexpected extra bytes after a store reply");
  }
  return payload;
}

}  // namespace ddp::comm::store
