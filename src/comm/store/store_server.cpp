#include "comm/store/store_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "base/str.hpp"
#include "comm/store/handshake.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::store {
namespace {

// Parses a value written by ADD. c10d's TCPStore stores counters as decimal
// strings, and so does ddp, so that code reading them with get() agrees.
bool parse_integer(const std::string& text, std::int64_t& value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  value = parsed;
  return true;
}

std::chrono::milliseconds clamped_millis(std::uint64_t ms) {
  const auto max =
      static_cast<std::uint64_t>(std::numeric_limits<std::chrono::milliseconds::rep>::max());
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(std::min(ms, max)));
}

// The address a connection came from, for the log of refused clients.
std::string peer_name(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    port = ntohs(v6.sin6_port);
  }
  return format_endpoint(text, port);
}

// Input held per connection: one whole frame and a read's worth more.
std::size_t input_limit(bool admitted) {
  return (admitted ? std::size_t{kMaxFrameBytes} : std::size_t{kMaxHandshakeFrame}) + 4 + 64 * 1024;
}

// Refusals logged before the server stops logging them (a port scan or a
// fuzzer would flood the rank's log); all are counted.
constexpr std::uint64_t kRefusalsLogged = 10;

}  // namespace

StoreServer::StoreServer(const std::string& host, int port, std::string secret)
    : listener_(listen_on(host, port)), port_(local_port(listener_)), secret_(std::move(secret)) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw RendezvousError("cannot host the rendezvous store on " + format_endpoint(host, port_) +
                          ": pipe2 failed (" + errno_text(errno) +
                          "). The process may have run out of file descriptors; raise "
                          "`ulimit -n`.");
  }
  wake_read_ = Socket(fds[0]);
  wake_write_ = Socket(fds[1]);
  thread_ = std::thread([this] { run(); });
}

StoreServer::~StoreServer() {
  const char byte = 1;
  while (::write(wake_write_.fd(), &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
}

void StoreServer::run() {
  try {
    while (!stopping_) poll_once();
  } catch (const std::exception& error) {
    // Nothing can be thrown to a caller from here. Closing every socket below
    // makes each waiting client fail at once instead of at its deadline.
    std::fprintf(stderr, "ddp: the rendezvous store server stopped: %s\n", error.what());
  }
  connections_.clear();
  listener_.close();
}

void StoreServer::poll_once() {
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> ids;
  fds.reserve(connections_.size() + 2);
  fds.push_back({wake_read_.fd(), POLLIN, 0});
  fds.push_back({listener_.fd(), POLLIN, 0});
  for (auto& [id, connection] : connections_) {
    // A client that sends faster than it is served, or does not read its
    // replies, waits in the kernel: the server holds a bounded amount of it.
    short events = connection.output.empty() ? 0 : POLLOUT;
    if (connection.input.size() < input_limit(connection.admitted)) events |= POLLIN;
    fds.push_back({connection.socket.fd(), events, 0});
    ids.push_back(id);
  }
  const int rc = ::poll(fds.data(), fds.size(), nearest_deadline_timeout());
  if (rc < 0) {
    const int error = errno;
    if (error == EINTR) return;
    // Caught in run(), which reports it and closes every connection.
    throw RendezvousError("the rendezvous store server's poll() failed (" + errno_text(error) +
                          "); it stops serving, and every rank connected to it will fail. "
                          "Restart the job.");
  }
  if (fds[0].revents != 0) {
    stopping_ = true;
    return;
  }
  if (fds[1].revents != 0) accept_clients();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const short revents = fds[i + 2].revents;
    Connection& connection = connections_.at(ids[i]);
    if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0 &&
        !read_available(connection.socket.fd(), connection.input,
                        input_limit(connection.admitted))) {
      connection.broken = true;
    }
    if ((revents & (POLLHUP | POLLERR)) != 0 &&
        connection.input.size() >= input_limit(connection.admitted)) {
      connection.broken = true;  // gone, and its input cannot be taken in
    }
    if ((revents & POLLOUT) != 0 && !connection.broken &&
        !write_available(connection.socket.fd(), connection.output)) {
      connection.broken = true;
    }
  }

  expire_deadlines();
  // Serving one connection can create keys another one waits for, and a
  // request answered that way lets its connection's queued requests run.
  // Repeat until no parked request was answered.
  bool progress = true;
  while (progress) {
    for (auto& [id, connection] : connections_) serve(connection);
    progress = false;
    if (keys_added_) {
      keys_added_ = false;
      for (auto& [id, connection] : connections_) {
        if (!connection.broken && connection.parked && all_exist(connection.parked->keys)) {
          reply_parked(connection, /*timed_out=*/false);
          progress = true;
        }
      }
    }
  }

  for (auto it = connections_.begin(); it != connections_.end();) {
    it = it->second.broken ? connections_.erase(it) : std::next(it);
  }
}

void StoreServer::accept_clients() {
  for (;;) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = ::accept4(listener_.fd(), reinterpret_cast<sockaddr*>(&address), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: all accepted; anything else: retry on the next poll.
    }
    set_no_delay(fd);
    Connection& connection = connections_[next_connection_id_++];
    connection.socket = Socket(fd);
    connection.peer = peer_name(address);
    connection.admitted = secret_.empty();
    if (!connection.admitted) {
      connection.nonce = random_bytes(kNonceBytes);
      connection.handshake_deadline = Clock::now() + kHandshakeTimeout;
    }
    connection.output = encode_frame(hello_payload(connection.nonce));
    if (!write_available(fd, connection.output)) connection.broken = true;
  }
}

void StoreServer::admit(Connection& connection, const std::string& payload) {
  const HandshakeVerdict verdict = judge_client(payload, secret_, connection.nonce);
  connection.output += encode_frame(verdict.reply);
  // A refusal is counted and logged before the client can read it, so whoever
  // sees the refusal also sees it on record.
  if (!verdict.admitted) refuse(connection, verdict.reason);
  const bool sent = write_available(connection.socket.fd(), connection.output);
  if (!verdict.admitted) return;
  connection.admitted = true;
  connection.handshake_deadline = kNoDeadline;
  if (!sent) connection.broken = true;
}

void StoreServer::refuse(Connection& connection, const std::string& reason) {
  connection.broken = true;
  const std::uint64_t count = ++refused_;
  if (count <= kRefusalsLogged) {
    std::fprintf(stderr,
                 "ddp: the rendezvous store on port %d refused a client from %s: %s; nothing "
                 "it sent was stored.%s\n",
                 port_, connection.peer.c_str(), reason.c_str(),
                 count == kRefusalsLogged ? " (Further refused clients are not logged.)" : "");
  }
}

void StoreServer::serve(Connection& connection) {
  std::string payload;
  try {
    while (!connection.broken && !connection.admitted &&
           take_frame(connection.input, payload, kMaxHandshakeFrame)) {
      admit(connection, payload);
    }
    // Replies a client leaves unread hold back its next requests.
    while (!connection.broken && !connection.parked && connection.output.size() < kMaxFrameBytes &&
           take_frame(connection.input, payload)) {
      handle(connection, payload);
    }
  } catch (const WireError& error) {
    // Not a ddp client, or one out of step: nothing it sends can be trusted.
    if (!connection.admitted) refuse(connection, error.what());
    connection.broken = true;
  }
}

void StoreServer::handle(Connection& connection, const std::string& payload) {
  WireReader request(payload);
  const auto op = static_cast<Op>(request.u8());
  WireWriter response;
  switch (op) {
    case Op::kSet: {
      std::string key = request.bytes();
      store(key, request.bytes());
      response.u8(static_cast<std::uint8_t>(Status::kOk));
      break;
    }
    case Op::kGet: {
      const std::uint64_t timeout_ms = request.u64();
      handle_wait_or_get(connection, op, {request.bytes()}, timeout_ms);
      return;
    }
    case Op::kWait: {
      const std::uint64_t timeout_ms = request.u64();
      handle_wait_or_get(connection, op, request.keys(), timeout_ms);
      return;
    }
    case Op::kAdd: {
      const std::string key = request.bytes();
      const std::int64_t delta = request.i64();
      std::int64_t current = 0;
      const auto it = data_.find(key);
      if (it != data_.end() && !parse_integer(it->second, current)) {
        response.u8(static_cast<std::uint8_t>(Status::kError))
            .bytes("cannot add to key '" + key +
                   "': its value is not a decimal integer (it was set with "
                   "set(), not add()). Use a separate key for counters.");
        break;
      }
      std::int64_t updated = 0;
      if (__builtin_add_overflow(current, delta, &updated)) {
        response.u8(static_cast<std::uint8_t>(Status::kError))
            .bytes(base::detail::str("cannot add ", delta, " to key '", key, "' holding ", current,
                                     ": the sum overflows a 64-bit integer."));
        break;
      }
      store(key, std::to_string(updated));
      response.u8(static_cast<std::uint8_t>(Status::kOk)).i64(updated);
      break;
    }
    case Op::kCompareSet: {
      const std::string key = request.bytes();
      std::string expected = request.bytes();
      std::string desired = request.bytes();
      // c10d's semantics: a missing key only counts as matching an empty
      // expected value; the reply is the value the key holds afterwards,
      // except that a failed compare on a missing key echoes `expected`.
      const auto it = data_.find(key);
      std::string result;
      if (it == data_.end()) {
        if (expected.empty()) {
          store(key, desired);
          result = std::move(desired);
        } else {
          result = std::move(expected);
        }
      } else if (it->second == expected) {
        store(key, desired);
        result = std::move(desired);
      } else {
        result = it->second;
      }
      response.u8(static_cast<std::uint8_t>(Status::kOk)).bytes(result);
      break;
    }
    case Op::kCheck:
      response.u8(static_cast<std::uint8_t>(Status::kOk)).u8(all_exist(request.keys()) ? 1 : 0);
      break;
    case Op::kDelete:
      response.u8(static_cast<std::uint8_t>(Status::kOk))
          .u8(data_.erase(request.bytes()) > 0 ? 1 : 0);
      break;
    case Op::kNumKeys:
      response.u8(static_cast<std::uint8_t>(Status::kOk))
          .i64(static_cast<std::int64_t>(data_.size()));
      break;
    default:
      throw WireError(base::detail::str("unknown store op ", static_cast<int>(op)));
  }
  reply(connection, response);
}

void StoreServer::handle_wait_or_get(Connection& connection, Op op, std::vector<std::string> keys,
                                     std::uint64_t timeout_ms) {
  connection.parked =
      ParkedRequest{op, std::move(keys), deadline_after(clamped_millis(timeout_ms))};
  if (all_exist(connection.parked->keys)) {
    reply_parked(connection, /*timed_out=*/false);
  }
}

void StoreServer::reply(Connection& connection, WireWriter& writer) {
  connection.output += encode_frame(writer.payload());
  if (!write_available(connection.socket.fd(), connection.output)) {
    connection.broken = true;
  }
}

void StoreServer::reply_parked(Connection& connection, bool timed_out) {
  const ParkedRequest request = std::move(*connection.parked);
  connection.parked.reset();
  WireWriter response;
  if (timed_out) {
    std::vector<std::string> missing;
    for (const auto& key : request.keys) {
      if (data_.count(key) == 0) missing.push_back(key);
    }
    response.u8(static_cast<std::uint8_t>(Status::kTimedOut)).keys(missing);
  } else {
    response.u8(static_cast<std::uint8_t>(Status::kOk));
    if (request.op == Op::kGet) response.bytes(data_.at(request.keys[0]));
  }
  reply(connection, response);
}

void StoreServer::expire_deadlines() {
  const auto now = Clock::now();
  for (auto& [id, connection] : connections_) {
    if (!connection.broken && !connection.admitted && connection.handshake_deadline <= now) {
      refuse(connection, base::detail::str("it did not authenticate within ",
                                           kHandshakeTimeout.count(), " ms"));
    }
    if (connection.broken || !connection.parked || connection.parked->deadline > now) {
      continue;
    }
    // A key that appeared in the same instant still counts as in time.
    reply_parked(connection, !all_exist(connection.parked->keys));
  }
}

bool StoreServer::all_exist(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(),
                     [this](const std::string& key) { return data_.count(key) > 0; });
}

void StoreServer::store(const std::string& key, std::string value) {
  data_[key] = std::move(value);
  keys_added_ = true;
}

int StoreServer::nearest_deadline_timeout() const {
  auto nearest = kNoDeadline;
  for (const auto& [id, connection] : connections_) {
    if (connection.broken) continue;
    if (connection.parked) nearest = std::min(nearest, connection.parked->deadline);
    nearest = std::min(nearest, connection.handshake_deadline);
  }
  if (nearest == kNoDeadline) return -1;
  // Round up: waking a little late is harmless, waking early spins.
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(nearest - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, INT_MAX));
}

}  // namespace ddp::comm::store
