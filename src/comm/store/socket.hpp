#pragma once

/// \file socket.hpp
/// Small RAII helpers over POSIX TCP sockets for the rendezvous store: name
/// resolution (IPv4 and IPv6), listening on exactly one address, connecting
/// with retries until a deadline, and whole-frame I/O (see
/// Note [Store wire format]). No call raises SIGPIPE.

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "comm/store/wire.hpp"

namespace ddp::comm::store {

using Clock = std::chrono::steady_clock;

/// A deadline that never comes: waits without a timeout use it.
inline constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

/// `now + timeout`, or kNoDeadline when timeout is zero (c10d's kNoTimeout).
Clock::time_point deadline_after(std::chrono::milliseconds timeout);

/// Owns one file descriptor and closes it on destruction. Move-only.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void close();

 private:
  int fd_ = -1;
};

/// A failed send or receive. The kind lets the client phrase its own error.
///
/// Note [Internal store errors stay inside]
/// SocketError and WireError (wire.hpp) describe one socket or one frame;
/// they never reach a caller of a public API. TcpStore turns them into
/// ddp::RendezvousError (the connection is lost), connect_with_retry() into
/// ddp::RendezvousError, and the server drops the connection that caused
/// them. So they derive from std::runtime_error, not from ddp::Error, and
/// have no exit code of their own.
class SocketError : public std::runtime_error {
 public:
  enum class Kind { kClosed, kTimedOut, kFailed };
  SocketError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

/// "host:port", or "[host]:port" for an IPv6 literal.
std::string format_endpoint(const std::string& host, int port);

/// strerror for errno values, thread-safe.
std::string errno_text(int error);

/// Listens on exactly the address `host` resolves to (never on every
/// interface), with SO_REUSEADDR so a restarted job can reuse the port at
/// once. Port 0 picks a free port. The socket is non-blocking. Throws
/// ddp::RendezvousError saying why (port in use, not this machine's address).
Socket listen_on(const std::string& host, int port);

/// The local port a socket is bound to.
int local_port(const Socket& socket);

/// The local address a socket is bound to, numeric ("10.0.0.7", "::1");
/// empty when it cannot be read.
std::string local_address(const Socket& socket);

/// Connects to host:port, retrying refused or failed attempts with backoff
/// until `timeout` has passed (the master may not have started yet). Throws
/// ddp::RendezvousError naming host:port, the timeout and the last error.
/// The returned socket is non-blocking with TCP_NODELAY set.
Socket connect_with_retry(const std::string& host, int port, std::chrono::milliseconds timeout);

void set_non_blocking(int fd);
void set_no_delay(int fd);

/// Writes `length || payload` to a non-blocking socket, waiting for room
/// until `deadline`. Throws SocketError.
void send_frame(const Socket& socket, std::string_view payload, Clock::time_point deadline);

/// Reads one frame's payload from a non-blocking socket, waiting until
/// `deadline`. Throws SocketError (kClosed when the peer went away).
std::string recv_frame(const Socket& socket, Clock::time_point deadline);

/// Prefixes a payload with its u32 length.
std::string encode_frame(std::string_view payload);

/// Moves one complete frame's payload out of `buffer` into `payload`; false
/// if the buffer does not hold a whole frame yet. Throws WireError for a
/// frame longer than `max_bytes`.
bool take_frame(std::string& buffer, std::string& payload,
                std::uint32_t max_bytes = kMaxFrameBytes);

/// Appends what a non-blocking socket has to `buffer`, until the socket is
/// drained or `buffer` holds `limit` bytes (the rest waits in the kernel).
/// Returns false when the peer closed the connection or it failed.
bool read_available(int fd, std::string& buffer, std::size_t limit);

/// Sends as much of `buffer` as the socket takes now and erases it from the
/// front. Returns false when the connection failed.
bool write_available(int fd, std::string& buffer);

}  // namespace ddp::comm::store
