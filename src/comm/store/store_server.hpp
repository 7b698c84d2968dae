#pragma once

/// \file store_server.hpp
/// The rendezvous store's server: the key-value map behind ddp::TcpStore,
/// hosted by rank 0 in its own process on a background thread.
///
/// Note [One thread, one poll()]
/// The server is a single thread that poll()s the listening socket, every
/// client socket, and a self-pipe used to stop it. All state (the map, each
/// connection's buffers, each parked wait) belongs to that thread, so nothing
/// needs a lock. GET and WAIT block on the server (see Note [Store wire
/// format]): a request whose keys are missing is parked on its connection
/// and answered when a later SET/ADD/COMPARE_SET creates the last key, or
/// with TIMED_OUT at its deadline; poll()'s timeout is the nearest deadline.
/// While a connection has a parked request, its later requests stay queued
/// in its input buffer, so replies always come back in request order.
///
/// A client must first pass the handshake (Note [Store authentication] in
/// handshake.hpp). No client can make the server hold more than about one
/// frame of its input (reads stop at kMaxFrameBytes, kMaxHandshakeFrame
/// before the handshake) or of its replies (requests wait while replies are
/// unread); a malformed frame or a refused handshake drops that client only.

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/store/socket.hpp"
#include "comm/store/wire.hpp"

namespace ddp::comm::store {

class StoreServer {
 public:
  /// Binds exactly host:port (port 0 picks a free port) and starts serving
  /// on a background thread. With a non-empty `secret`, only clients that
  /// prove they know it are served. Throws ddp::RendezvousError when the
  /// address cannot be bound (port in use, not an address of this machine).
  StoreServer(const std::string& host, int port, std::string secret = {});

  /// Stops the thread and closes every socket; clients still connected see
  /// the connection close.
  ~StoreServer();

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// The port actually bound (the chosen one when constructed with 0).
  int port() const { return port_; }

  /// Clients refused so far (wrong or missing secret, malformed frames
  /// before the handshake, too slow to authenticate).
  std::uint64_t refused_clients() const { return refused_; }

 private:
  // A GET or WAIT whose keys do not all exist yet.
  struct ParkedRequest {
    Op op;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  struct Connection {
    Socket socket;
    std::string input;   // bytes received, not yet parsed into requests
    std::string output;  // replies not yet accepted by the kernel
    std::optional<ParkedRequest> parked;
    bool broken = false;    // closed by the peer or out of step; to be dropped
    bool admitted = false;  // passed the handshake (or none is asked)
    std::string nonce;      // the server's nonce in its HELLO
    Clock::time_point handshake_deadline = kNoDeadline;
    std::string peer;  // the client's address, for the log
  };

  void run();
  void poll_once();
  void accept_clients();
  void serve(Connection& connection);
  void admit(Connection& connection, const std::string& payload);
  void refuse(Connection& connection, const std::string& reason);
  void handle(Connection& connection, const std::string& payload);
  void handle_wait_or_get(Connection& connection, Op op, std::vector<std::string> keys,
                          std::uint64_t timeout_ms);
  void reply(Connection& connection, WireWriter& writer);
  void reply_parked(Connection& connection, bool timed_out);
  void expire_deadlines();
  bool all_exist(const std::vector<std::string>& keys) const;
  void store(const std::string& key, std::string value);
  int nearest_deadline_timeout() const;

  Socket listener_;
  Socket wake_read_;
  Socket wake_write_;
  int port_ = 0;
  std::string secret_;
  std::atomic<std::uint64_t> refused_{0};
  std::unordered_map<std::string, std::string> data_;
  std::map<std::uint64_t, Connection> connections_;
  std::uint64_t next_connection_id_ = 0;
  bool keys_added_ = false;  // since parked requests were last resolved
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ddp::comm::store
