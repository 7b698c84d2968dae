#pragma once

/// \file tcp_store.hpp
/// ddp's rendezvous key-value store: a c10d::Store over TCP whose server is
/// hosted by rank 0, bound to MASTER_ADDR only.
///
/// Note [Why ddp has its own TCP store]
/// c10d's TCPStore in LibTorch 1.13 always listens on every interface (its
/// socket layer takes only a port), which exposes the rendezvous to any
/// network the machine is on. ddp::TcpStore binds exactly the configured
/// address. Gloo and NCCL receive it unchanged as a c10d::Store, so it keeps
/// c10d's semantics: values are byte strings, add() keeps counters as
/// decimal strings, get() and wait() block until the keys exist, and a
/// timeout of zero means "no timeout" (c10d::Store::kNoTimeout).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddp::comm {

/// How to reach (or host) a TcpStore. Setters chain, LibTorch style:
/// `TcpStoreOptions().host("10.0.0.5").port(29500).is_server(true)`.
struct TcpStoreOptions {
  /// Address or host name of the store (MASTER_ADDR), IPv4 or IPv6. A server
  /// binds exactly this address, never every interface.
  TORCH_ARG(std::string, host) = "127.0.0.1";

  /// TCP port of the store (MASTER_PORT), 0..65535. On a server, 0 picks a
  /// free port (read it back with TcpStore::port()); a client needs a real
  /// one.
  TORCH_ARG(int, port) = 29500;

  /// Whether this process hosts the store (rank 0). A server also connects
  /// to itself as a client, so it is used exactly like a client store.
  TORCH_ARG(bool, is_server) = false;

  /// How long a client keeps retrying to connect (the server may start
  /// later), and the default timeout of get() and wait(). Zero means no
  /// timeout, as in c10d.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::seconds(300);

  /// The job's secret (any bytes, at least 16; empty: none). A server with a
  /// secret serves only clients that prove they know it, by challenge and
  /// response (the secret never crosses the wire), and logs the others; a
  /// client with a secret talks only to a server that proves it knows the
  /// same one. ddprun gives every worker one (DDP_JOB_SECRET_FILE).
  TORCH_ARG(std::string, secret);

  /// Who hosts the store, as the message of a lost connection names it
  /// ("Rank 0, which hosts the store, has probably exited ..."): ddprun's
  /// agents, whose stores another agent hosts, say which.
  TORCH_ARG(std::string, hosted_by) = "rank 0";
};

/// A c10d::Store over TCP. Every instance holds one connection to the server;
/// calls from several threads are safe and run one at a time. Because a
/// blocking get() or wait() holds that connection until it returns, the key
/// it waits for must be set through another TcpStore (normally another
/// rank's), not through the same instance from another thread.
///
/// Failures throw ddp exceptions: RendezvousError when the server cannot be
/// hosted or reached, the secrets of client and server differ, or the
/// connection is lost, TimeoutError when get() or
/// wait() times out, InvalidArgumentError when add() meets a value that is
/// not a counter.
class TcpStore : public c10d::Store {
 public:
  /// Validates `options` (ConfigError for an empty host, a port outside
  /// 0..65535, port 0 on a client, a negative timeout, or a secret shorter
  /// than 16 bytes), hosts the server
  /// if `is_server`, then connects within `timeout`. Throws RendezvousError
  /// when the port is taken, the host is not this machine's address (server),
  /// or the store cannot be reached in time (client).
  explicit TcpStore(TcpStoreOptions options);

  /// Closes the connection. On the hosting rank this also stops the server:
  /// other ranks' stores then fail instead of waiting.
  ~TcpStore() override;

  /// The port the store is on: the one the server picked when constructed
  /// with port 0, otherwise the configured one.
  int port() const;

  /// The configured host.
  const std::string& host() const;

  /// This machine's address on the connection to the server: where another
  /// machine that reaches the server can reach this one (numeric; empty
  /// when it cannot be read).
  std::string local_address() const;

  // Keep c10d's convenience overloads (string values, in LibTorch 2.x)
  // visible next to the overrides below.
  using c10d::Store::compareSet;
  using c10d::Store::set;

  /// Stores `value` under `key`, replacing any previous value, and wakes
  /// every get() or wait() waiting for it.
  void set(const std::string& key, const std::vector<uint8_t>& value) override;

  /// Atomically replaces the value of `key` with `desired_value` if it
  /// currently equals `expected_value` (a missing key matches only an empty
  /// `expected_value`). Returns the value `key` holds afterwards, except
  /// that a failed compare on a missing key returns `expected_value`, as in
  /// c10d.
  std::vector<uint8_t> compareSet(const std::string& key,
                                  const std::vector<uint8_t>& expected_value,
                                  const std::vector<uint8_t>& desired_value) override;

  /// Returns the value of `key`, first waiting up to getTimeout() for it to
  /// be set. Throws TimeoutError naming the key if it never appears.
  std::vector<uint8_t> get(const std::string& key) override;

  /// Atomically adds `value` to the counter `key` (missing counts as 0) and
  /// returns the new total. The counter is stored as its decimal string.
  int64_t add(const std::string& key, int64_t value) override;

  /// Removes `key`. Returns whether it existed.
  bool deleteKey(const std::string& key) override;

  /// Whether every key in `keys` exists, without waiting.
  bool check(const std::vector<std::string>& keys) override;

  /// The number of keys in the store.
  int64_t getNumKeys() override;

  /// Waits up to getTimeout() until every key in `keys` exists.
  void wait(const std::vector<std::string>& keys) override;

  /// Waits up to `timeout` (zero: forever) until every key in `keys` exists.
  /// Throws TimeoutError naming the keys still missing and the timeout.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  /// A new client store with its own connection to the same server, for use
  /// from another thread. (LibTorch 2.8 added c10d::Store::clone; there this
  /// overrides it, without `override` so that the header builds on 1.13.)
  virtual c10::intrusive_ptr<c10d::Store> clone();

 private:
  class Impl;  // the connection and, on the hosting rank, the server
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
