// libFuzzer target: the rendezvous store server against hostile clients.
//
// Each input is one client connection to a real StoreServer with a secret,
// on loopback. The first byte picks the client: even, an intruder whose
// bytes meet the handshake; odd, a client that authenticates first, so the
// bytes reach the request parser and the key space. After every input a
// genuine client must still be served within 5 s: a crash, a hang, a dead
// server thread or a lost key aborts the run, and libFuzzer's
// -rss_limit_mb/-malloc_limit_mb catch unbounded allocation. The server is
// replaced every kInputsPerServer inputs, so keys the inputs set cannot
// accumulate without bound over a long run.
//
// Built and run by scripts/fuzz-store.sh (clang, -fsanitize=fuzzer,address,
// undefined); it needs no LibTorch.

#include <poll.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "comm/store/handshake.hpp"
#include "comm/store/socket.hpp"
#include "comm/store/store_server.hpp"
#include "comm/store/wire.hpp"

namespace {

using namespace ddp::comm::store;
using namespace std::chrono_literals;

const std::string kSecret = "fuzzing-secret-of-32-bytes-long!";
constexpr int kInputsPerServer = 5000;

struct Fixture {
  std::unique_ptr<StoreServer> server;
  Socket genuine;  // an authenticated client that must keep working
  int inputs = 0;
};

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "store_wire_fuzz: %s\n", why.c_str());
  std::abort();
}

Socket authenticated(int port) {
  Socket socket = connect_with_retry("127.0.0.1", port, 5s);
  client_handshake(socket, kSecret, "fuzzed store", deadline_after(5000ms));
  return socket;
}

std::string round_trip(const Socket& socket, const WireWriter& request) {
  const auto deadline = deadline_after(5000ms);
  send_frame(socket, const_cast<WireWriter&>(request).payload(), deadline);
  return recv_frame(socket, deadline);
}

void set_genuine_key(Fixture& f);

void restart(Fixture& f) {
  f.genuine = Socket();
  f.server.reset();
  f.server = std::make_unique<StoreServer>("127.0.0.1", 0, kSecret);
  f.genuine = authenticated(f.server->port());
  set_genuine_key(f);
}

void set_genuine_key(Fixture& f) {
  WireWriter set;
  set.u8(static_cast<std::uint8_t>(Op::kSet)).bytes("genuine/key").bytes("genuine value");
  round_trip(f.genuine, set);
}

// The genuine client reads its key back: the server is alive and responsive,
// and an intruder's input changed nothing. (An admitted input may change or
// delete the key; it is then set again for the next input.)
void check_health(Fixture& f, bool intruder) {
  WireWriter get;
  get.u8(static_cast<std::uint8_t>(Op::kGet)).u64(1).bytes("genuine/key");
  std::string reply;
  try {
    reply = round_trip(f.genuine, get);
  } catch (const std::exception& error) {
    die(std::string("the genuine client was not served after the input: ") + error.what());
  }
  WireReader reader(reply);
  const bool intact =
      reader.u8() == static_cast<std::uint8_t>(Status::kOk) && reader.bytes() == "genuine value";
  if (intruder && !intact) die("an unauthenticated input changed the key space");
  if (!intact) set_genuine_key(f);
}

void send(const Socket& socket, const std::uint8_t* data, std::size_t size) {
  std::string pending(reinterpret_cast<const char*>(data), size);
  const auto deadline = Clock::now() + 1s;
  while (!pending.empty() && Clock::now() < deadline) {
    if (!write_available(socket.fd(), pending)) return;  // the server hung up
    pollfd fd{socket.fd(), POLLOUT, 0};
    if (!pending.empty()) ::poll(&fd, 1, 10);
  }
}

Fixture fixture;

}  // namespace

// The first server is made before libFuzzer starts tracking leaks: OpenSSL
// allocates its global state on first use and keeps it to the end.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  restart(fixture);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (++fixture.inputs % kInputsPerServer == 0) restart(fixture);
  if (size == 0) return 0;
  const bool intruder = data[0] % 2 == 0;
  {
    Socket client = intruder ? connect_with_retry("127.0.0.1", fixture.server->port(), 5s)
                             : authenticated(fixture.server->port());
    send(client, data + 1, size - 1);
    // Take whatever the server answers at once, then hang up.
    std::string ignored;
    pollfd fd{client.fd(), POLLIN, 0};
    if (::poll(&fd, 1, 1) > 0) read_available(client.fd(), ignored, 1 << 20);
  }
  check_health(fixture, intruder);
  return 0;
}
