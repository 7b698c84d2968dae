#include "ddp/comm/tcp_store.hpp"

#include <cctype>
#include <mutex>
#include <utility>

#include "base/str.hpp"
#include "comm/store/handshake.hpp"
#include "comm/store/socket.hpp"
#include "comm/store/store_server.hpp"
#include "comm/store/wire.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm {
namespace {

using store::Op;
using store::Status;
using store::WireReader;
using store::WireWriter;

// "rank 0" as a sentence begins.
std::string capitalized(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
  return text;
}

// How long past a request's own timeout the client waits for the reply.
// The server answers a timed-out wait itself at the deadline, so this only
// matters when the server is stuck or the network dropped the connection
// silently; it keeps a caller from hanging forever either way.
constexpr std::chrono::milliseconds kReplyGrace = std::chrono::seconds(5);

// Enough that guessing is hopeless; any longer secret is fine.
constexpr std::size_t kMinSecretBytes = 16;

// How long the handshake may take when the store has no timeout at all.
constexpr std::chrono::milliseconds kUntimedHandshake = std::chrono::seconds(60);

TcpStoreOptions validated(TcpStoreOptions options) {
  if (options.host().empty()) {
    throw ConfigError(
        "the rendezvous store host is empty. Set MASTER_ADDR to the address "
        "or host name of the machine that runs rank 0.");
  }
  if (options.port() < 0 || options.port() > 65535) {
    throw ConfigError(base::detail::str(
        "invalid rendezvous store port ", options.port(),
        ": a TCP port is between 0 and 65535. Set MASTER_PORT to a free port such as 29500."));
  }
  if (options.port() == 0 && !options.is_server()) {
    throw ConfigError(
        "invalid rendezvous store port 0 for a client: only the hosting rank "
        "may use 0 (to pick a free port). Set MASTER_PORT to the port rank 0 "
        "listens on.");
  }
  if (options.timeout().count() < 0) {
    throw ConfigError(base::detail::str(
        "invalid rendezvous store timeout ", options.timeout().count(),
        " ms: it must be positive, or 0 for no timeout. Raise the rendezvous timeout."));
  }
  if (!options.secret().empty() && options.secret().size() < kMinSecretBytes) {
    throw ConfigError(base::detail::str(
        "the rendezvous store's secret has ", options.secret().size(), " bytes; it needs at least ",
        kMinSecretBytes, " (e.g. `head -c 32 /dev/urandom | base64 > job.secret`)."));
  }
  return options;
}

// Quotes keys for messages; long lists are cut short.
std::string describe_keys(const std::vector<std::string>& keys) {
  constexpr std::size_t kMaxShown = 8;
  std::string text = "[";
  for (std::size_t i = 0; i < keys.size() && i < kMaxShown; ++i) {
    if (i > 0) text += ", ";
    text += "\"" + keys[i] + "\"";
  }
  if (keys.size() > kMaxShown) {
    text += base::detail::str(", and ", keys.size() - kMaxShown, " more");
  }
  return text + "]";
}

std::string to_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

std::vector<uint8_t> to_bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

WireWriter request(Op op) {
  WireWriter writer;
  writer.u8(static_cast<std::uint8_t>(op));
  return writer;
}

}  // namespace

// The one connection of a TcpStore and, on the hosting rank, the server.
class TcpStore::Impl {
 public:
  explicit Impl(TcpStoreOptions options) : options_(std::move(options)) {
    port_ = options_.port();
    if (options_.is_server()) {
      server_ = std::make_unique<store::StoreServer>(options_.host(), port_, options_.secret());
      port_ = server_->port();
    }
    socket_ = store::connect_with_retry(options_.host(), port_, options_.timeout());
    store::client_handshake(
        socket_, options_.secret(), store::format_endpoint(options_.host(), port_),
        store::deadline_after(options_.timeout().count() == 0 ? kUntimedHandshake
                                                              : options_.timeout()));
  }

  const TcpStoreOptions& options() const { return options_; }
  int port() const { return port_; }
  std::string local_address() const { return store::local_address(socket_); }

  // Sends one request and hands its reply to `parse(status, reader)`, whose
  // result it returns. `reply_timeout` is how long the server may
  // legitimately take (zero: no limit); `operation` names the call in
  // messages. Parsing happens under the lock so that a malformed reply, like
  // a failed send or receive, marks the connection lost.
  template <typename Parse>
  auto round_trip(WireWriter& request, std::chrono::milliseconds reply_timeout,
                  const std::string& operation, Parse parse) {
    std::lock_guard<std::mutex> guard(mutex_);
    const std::string endpoint = store::format_endpoint(options_.host(), port_);
    if (!lost_reason_.empty()) {
      throw RendezvousError("cannot " + operation +
                            ": the connection to the rendezvous store "
                            "at " +
                            endpoint + " was lost earlier (" + lost_reason_ + "). " +
                            capitalized(options_.hosted_by()) +
                            ", which hosts the store, has probably exited; check its log and "
                            "restart the job.");
    }
    if (request.payload().size() > store::kMaxFrameBytes) {
      // The server would drop the connection; say why instead.
      throw InvalidArgumentError(base::detail::str(
          "cannot ", operation, ": the request is ", request.payload().size(),
          " bytes, more than the rendezvous store's limit of ", store::kMaxFrameBytes,
          " bytes. The store is meant for small rendezvous data; send large data "
          "through a collective instead."));
    }
    const auto deadline = reply_timeout.count() == 0
                              ? store::kNoDeadline
                              : store::deadline_after(reply_timeout + kReplyGrace);
    try {
      store::send_frame(socket_, request.payload(), deadline);
      const std::string reply = store::recv_frame(socket_, deadline);
      WireReader reader(reply);
      const auto status = static_cast<Status>(reader.u8());
      return parse(status, reader);
    } catch (const store::SocketError& error) {
      if (error.kind() == store::SocketError::Kind::kTimedOut) {
        throw lost(
            endpoint, operation,
            base::detail::str("no reply within ", (reply_timeout + kReplyGrace).count(), " ms"));
      }
      throw lost(endpoint, operation, error.what());
    } catch (const store::WireError& error) {
      throw lost(endpoint, operation, error.what());
    }
  }

 private:
  TcpStoreOptions options_;
  int port_ = 0;
  // Declared before the socket so that it is destroyed after it: the client
  // hangs up before its own server stops.
  std::unique_ptr<store::StoreServer> server_;
  std::mutex mutex_;  // one request at a time on the connection
  store::Socket socket_;
  std::string lost_reason_;  // set once the connection failed

  RendezvousError lost(const std::string& endpoint, const std::string& operation,
                       const std::string& why) {
    // A reply may still be in flight: the stream can no longer be trusted.
    socket_.close();
    lost_reason_ = why;
    return RendezvousError("lost the connection to the rendezvous store at " + endpoint +
                           " during " + operation + " (" + why + "). " +
                           capitalized(options_.hosted_by()) +
                           ", which hosts the store, has probably exited or crashed, or the "
                           "network failed; check its log.");
  }
};

TcpStore::TcpStore(TcpStoreOptions options)
    : c10d::Store(options.timeout()),
      impl_(std::make_unique<Impl>(validated(std::move(options)))) {}

TcpStore::~TcpStore() = default;

int TcpStore::port() const { return impl_->port(); }

const std::string& TcpStore::host() const { return impl_->options().host(); }

std::string TcpStore::local_address() const { return impl_->local_address(); }

void TcpStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  auto writer = request(Op::kSet);
  writer.bytes(key).bytes(to_string(value));
  impl_->round_trip(writer, timeout_, "set(\"" + key + "\")", [](Status, WireReader&) {});
}

std::vector<uint8_t> TcpStore::compareSet(const std::string& key,
                                          const std::vector<uint8_t>& expected_value,
                                          const std::vector<uint8_t>& desired_value) {
  auto writer = request(Op::kCompareSet);
  writer.bytes(key).bytes(to_string(expected_value)).bytes(to_string(desired_value));
  return impl_->round_trip(writer, timeout_, "compareSet(\"" + key + "\")",
                           [](Status, WireReader& reply) { return to_bytes(reply.bytes()); });
}

std::vector<uint8_t> TcpStore::get(const std::string& key) {
  // The server waits for the key and returns its value in one step, so a
  // deleteKey() between "it exists" and "fetch it" cannot happen.
  const std::chrono::milliseconds timeout = timeout_;
  auto writer = request(Op::kGet);
  writer.u64(static_cast<std::uint64_t>(timeout.count())).bytes(key);
  return impl_->round_trip(
      writer, timeout, "get(\"" + key + "\")", [&](Status status, WireReader& reply) {
        if (status == Status::kTimedOut) {
          throw TimeoutError(base::detail::str(
              "timed out after ", timeout.count(), " ms waiting for key \"", key,
              "\" in the rendezvous store at ", store::format_endpoint(host(), port()),
              ". The rank that sets it may have failed or still be starting; check the "
              "other ranks' logs, or raise the timeout."));
        }
        return to_bytes(reply.bytes());
      });
}

int64_t TcpStore::add(const std::string& key, int64_t value) {
  auto writer = request(Op::kAdd);
  writer.bytes(key).i64(value);
  return impl_->round_trip(writer, timeout_, "add(\"" + key + "\")",
                           [](Status status, WireReader& reply) {
                             if (status == Status::kError) {
                               throw InvalidArgumentError(reply.bytes());
                             }
                             return reply.i64();
                           });
}

bool TcpStore::deleteKey(const std::string& key) {
  auto writer = request(Op::kDelete);
  writer.bytes(key);
  return impl_->round_trip(writer, timeout_, "deleteKey(\"" + key + "\")",
                           [](Status, WireReader& reply) { return reply.u8() != 0; });
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  auto writer = request(Op::kCheck);
  writer.keys(keys);
  return impl_->round_trip(writer, timeout_, "check(" + describe_keys(keys) + ")",
                           [](Status, WireReader& reply) { return reply.u8() != 0; });
}

int64_t TcpStore::getNumKeys() {
  auto writer = request(Op::kNumKeys);
  return impl_->round_trip(writer, timeout_, "getNumKeys()",
                           [](Status, WireReader& reply) { return reply.i64(); });
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  if (timeout.count() < 0) {
    throw InvalidArgumentError(base::detail::str(
        "invalid store wait timeout ", timeout.count(), " ms for key(s) ", describe_keys(keys),
        ": it must be positive, or 0 to wait without a timeout."));
  }
  auto writer = request(Op::kWait);
  writer.u64(static_cast<std::uint64_t>(timeout.count())).keys(keys);
  impl_->round_trip(
      writer, timeout, "wait(" + describe_keys(keys) + ")", [&](Status status, WireReader& reply) {
        if (status != Status::kTimedOut) return;
        throw TimeoutError(base::detail::str(
            "timed out after ", timeout.count(), " ms waiting for key(s) ", describe_keys(keys),
            " in the rendezvous store at ", store::format_endpoint(host(), port()),
            " (still missing: ", describe_keys(reply.keys()),
            "). The ranks that set them may have failed or still be starting; check the other "
            "ranks' logs, or raise the timeout."));
      });
}

c10::intrusive_ptr<c10d::Store> TcpStore::clone() {
  return c10::make_intrusive<TcpStore>(
      TcpStoreOptions(impl_->options()).port(port()).is_server(false).timeout(timeout_));
}

}  // namespace ddp::comm
