// The rendezvous store admits only clients that know the job's secret
// (Note [Store authentication]): a server in this process, genuine clients,
// and raw sockets playing intruders, a fake server and broken clients.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "comm/store/handshake.hpp"
#include "comm/store/job_secret.hpp"
#include "comm/store/socket.hpp"
#include "comm/store/store_server.hpp"
#include "comm/store/wire.hpp"
#include "common/error_capture.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/tcp_store.hpp"

namespace ddp::comm::store {
namespace {

using ddp::testing::error_of;
using namespace std::chrono_literals;

const std::string kSecret = "0123456789abcdef-the-job-secret";

c10::intrusive_ptr<TcpStore> client(int port, const std::string& secret) {
  return c10::make_intrusive<TcpStore>(
      TcpStoreOptions().host("127.0.0.1").port(port).timeout(5s).secret(secret));
}

// A raw TCP connection to the server, as an intruder would make.
class RawClient {
 public:
  explicit RawClient(int port) : socket_(connect_with_retry("127.0.0.1", port, 5s)) {}

  void send(const std::string& bytes) {
    std::string pending = bytes;
    while (!pending.empty() && write_available(socket_.fd(), pending)) {
      pollfd fd{socket_.fd(), POLLOUT, 0};
      if (!pending.empty()) ::poll(&fd, 1, 100);
    }
  }

  // Ends this side's stream, as a client that gave up mid-frame does.
  void finish() { ::shutdown(socket_.fd(), SHUT_WR); }

  // Everything the server sends until it closes the connection, or
  // "(still open)" appended if it does not within `deadline`.
  std::string read_until_closed(std::chrono::milliseconds deadline) {
    std::string received;
    const auto end = Clock::now() + deadline;
    while (Clock::now() < end) {
      pollfd fd{socket_.fd(), POLLIN, 0};
      ::poll(&fd, 1, 50);
      if (!read_available(socket_.fd(), received, 1 << 20)) return received;
    }
    return received + "(still open)";
  }

 private:
  Socket socket_;
};

std::string set_request(const std::string& key, const std::string& value) {
  WireWriter request;
  request.u8(static_cast<std::uint8_t>(Op::kSet)).bytes(key).bytes(value);
  return encode_frame(request.payload());
}

// The server's first frame: HELLO with a nonce (it has a secret).
std::string hello_of(const std::string& received) {
  std::string buffer = received;
  std::string payload;
  EXPECT_TRUE(take_frame(buffer, payload)) << "no whole HELLO frame";
  return payload;
}

TEST(StoreAuthentication, ClientsWithTheSecretAreServed) {
  StoreServer server("127.0.0.1", 0, kSecret);
  auto a = client(server.port(), kSecret);
  auto b = client(server.port(), kSecret);
  a->set("job/key", std::vector<uint8_t>{'v'});
  EXPECT_EQ(b->get("job/key"), std::vector<uint8_t>{'v'});
  EXPECT_EQ(b->add("job/counter", 5), 5);
  EXPECT_EQ(server.refused_clients(), 0u);
}

TEST(StoreAuthentication, ClientWithoutTheSecretCanNeitherReadNorSetAKey) {
  StoreServer server("127.0.0.1", 0, kSecret);
  auto job = client(server.port(), kSecret);
  job->set("job/key", std::vector<uint8_t>{'1'});
  const int64_t keys_before = job->getNumKeys();

  // A ddp client without the secret is told what it lacks.
  EXPECT_NE(error_of<RendezvousError>([&] {
              client(server.port(), "");
            }).find("admits only ranks that know the job's secret, and this process has none"),
            std::string::npos);
  // A raw client skips the handshake and sends SET and GET at once.
  RawClient intruder(server.port());
  WireWriter get;
  get.u8(static_cast<std::uint8_t>(Op::kGet)).u64(100).bytes("job/key");
  intruder.send(set_request("job/key", "poisoned") + set_request("intruder", "x") +
                encode_frame(get.payload()));
  std::string received = intruder.read_until_closed(5s);
  ASSERT_EQ(received.find("(still open)"), std::string::npos) << "the server kept the intruder";
  std::string payload;
  ASSERT_TRUE(take_frame(received, payload));  // HELLO
  ASSERT_TRUE(take_frame(received, payload));  // the refusal, and nothing else
  WireReader refusal(payload);
  EXPECT_EQ(refusal.u8(), static_cast<std::uint8_t>(Status::kError));
  EXPECT_EQ(received, "") << "the intruder got more than a refusal";
  EXPECT_EQ(refusal.bytes().find("1"), std::string::npos) << "the refusal leaked the value";

  EXPECT_EQ(job->get("job/key"), std::vector<uint8_t>{'1'});
  EXPECT_FALSE(job->check({"intruder"}));
  EXPECT_EQ(job->getNumKeys(), keys_before);
  // The ddp client hung up after HELLO on its own; only the raw one was refused.
  EXPECT_EQ(server.refused_clients(), 1u);
}

TEST(StoreAuthentication, WrongSecretIsRefusedAndLoggedAndTheJobGoesOn) {
  StoreServer server("127.0.0.1", 0, kSecret);
  auto job = client(server.port(), kSecret);
  ::testing::internal::CaptureStderr();
  const std::string message =
      error_of<RendezvousError>([&] { client(server.port(), kSecret + "-wrong"); });
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(message.find("refused this process's job secret"), std::string::npos) << message;
  EXPECT_NE(log.find("refused a client from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("wrong proof of the job secret"), std::string::npos) << log;
  EXPECT_EQ(log.find(kSecret), std::string::npos) << "the log shows the secret";
  EXPECT_EQ(server.refused_clients(), 1u);
  job->set("after", std::vector<uint8_t>{'!'});
  EXPECT_EQ(client(server.port(), kSecret)->get("after"), std::vector<uint8_t>{'!'});
}

TEST(StoreAuthentication, ClientWithASecretRefusesAStoreThatAsksForNone) {
  StoreServer open_server("127.0.0.1", 0);
  EXPECT_NE(error_of<RendezvousError>([&] {
              client(open_server.port(), kSecret);
            }).find("does not ask for a job secret, but this process has one"),
            std::string::npos);
  EXPECT_NO_THROW(client(open_server.port(), ""));  // torchrun's way still works
}

TEST(StoreAuthentication, AFakeServerWithoutTheSecretCannotPassItselfOff) {
  // It listens on the job's port, greets like a store and admits anyone.
  Socket listener = listen_on("127.0.0.1", 0);
  const int port = local_port(listener);
  std::thread fake([&] {
    pollfd fd{listener.fd(), POLLIN, 0};
    if (::poll(&fd, 1, 5000) != 1) return;
    Socket connection(::accept(listener.fd(), nullptr, nullptr));
    set_non_blocking(connection.fd());
    const auto deadline = deadline_after(5000ms);
    // The client hangs up once it has read the proof.
    send_frame(connection, hello_payload(random_bytes(kNonceBytes)), deadline);
    recv_frame(connection, deadline);  // the client's AUTH
    WireWriter ok;
    ok.u8(static_cast<std::uint8_t>(Status::kOk)).bytes(random_bytes(32));
    send_frame(connection, ok.payload(), deadline);
    try {
      recv_frame(connection, deadline);  // waits for the client to hang up
    } catch (const SocketError&) {
    }
  });
  const std::string message = error_of<RendezvousError>([&] { client(port, kSecret); });
  fake.join();
  EXPECT_NE(message.find("could not prove that it knows the job's secret"), std::string::npos)
      << message;
}

TEST(StoreAuthentication, GarbageGiantAndTruncatedFramesCloseThatClientOnly) {
  StoreServer server("127.0.0.1", 0, kSecret);
  auto job = client(server.port(), kSecret);
  job->set("k", std::vector<uint8_t>{'v'});
  const std::string giant_length("\xff\xff\xff\xff", 4);
  const std::string cut_short("\x05\x00\x00\x00\x09", 5);  // an AUTH frame's first byte
  // Garbage, a giant length field and an empty AUTH are dropped at once.
  for (const std::string& bytes : {std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
                                   giant_length + "abc", encode_frame(std::string(1, '\x09'))}) {
    RawClient broken(server.port());
    broken.send(bytes);
    const std::string received = broken.read_until_closed(5s);
    EXPECT_EQ(received.find("(still open)"), std::string::npos)
        << "the server kept a client that sent " << bytes.size() << " bad bytes";
  }
  EXPECT_EQ(server.refused_clients(), 3u);
  // A frame cut short by a client that hangs up closes that client too.
  RawClient truncated(server.port());
  truncated.send(cut_short);
  truncated.finish();
  EXPECT_EQ(truncated.read_until_closed(5s).find("(still open)"), std::string::npos);
  EXPECT_EQ(job->get("k"), std::vector<uint8_t>{'v'});
}

TEST(StoreAuthentication, AClientThatNeverAuthenticatesIsDroppedAtTheDeadline) {
  StoreServer server("127.0.0.1", 0, kSecret);
  RawClient silent(server.port());
  const auto start = Clock::now();
  const std::string received = silent.read_until_closed(kHandshakeTimeout + 5s);
  const auto waited = Clock::now() - start;
  EXPECT_EQ(received.find("(still open)"), std::string::npos);
  EXPECT_GE(waited, kHandshakeTimeout - 500ms);
  EXPECT_EQ(server.refused_clients(), 1u);
  EXPECT_EQ(hello_of(received).substr(0, 8), "DDPSTORE");
}

TEST(StoreAuthentication, ProofsDependOnSecretNoncesAndRole) {
  const std::string ns(32, 'n'), nc(32, 'c');
  const std::string proof = handshake_proof(kSecret, "client", ns, nc);
  EXPECT_EQ(proof.size(), 32u);  // SHA-256
  EXPECT_TRUE(proofs_equal(proof, handshake_proof(kSecret, "client", ns, nc)));
  EXPECT_FALSE(proofs_equal(proof, handshake_proof(kSecret + "x", "client", ns, nc)));
  EXPECT_FALSE(proofs_equal(proof, handshake_proof(kSecret, "server", ns, nc)));
  EXPECT_FALSE(proofs_equal(proof, handshake_proof(kSecret, "client", nc, ns)));
  // RFC 4231, test case 2: HMAC-SHA256("Jefe", "what do ya want for nothing?").
  const std::string rfc = handshake_proof("Jefe", "what do ya want ", "for nothing?", "");
  std::string hex;
  for (unsigned char byte : rfc) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", byte);
    hex += two;
  }
  EXPECT_EQ(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(JobSecret, WrittenPrivateAndReadBackAndUnsafeFilesRefused) {
  const ddp::testing::TemporaryDirectory secrets("ddp-secret-test-");
  const std::filesystem::path& dir = secrets.path();
  const std::string path = write_job_secret(dir.string());
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  const std::string secret = read_job_secret(path);
  EXPECT_EQ(secret.size(), 64u);
  EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos);
  std::filesystem::create_directories(dir / "second");
  EXPECT_NE(read_job_secret(write_job_secret((dir / "second").string())), secret)
      << "two jobs got the same secret";
  EXPECT_THROW(write_job_secret(dir.string()), IoError) << "an existing secret was overwritten";

  ::chmod(path.c_str(), 0644);
  const std::string unsafe = error_of<ConfigError>([&] { read_job_secret(path); });
  EXPECT_NE(unsafe.find("has mode 0644"), std::string::npos) << unsafe;
  EXPECT_NE(unsafe.find("chmod 600"), std::string::npos) << unsafe;
  const std::string short_path = (dir / "short").string();
  std::ofstream(short_path) << "too short\n";
  ::chmod(short_path.c_str(), 0600);
  const std::string too_short = error_of<ConfigError>([&] { read_job_secret(short_path); });
  EXPECT_NE(too_short.find("holds 9 bytes"), std::string::npos) << too_short;
  EXPECT_THROW(read_job_secret((dir / "missing").string()), ConfigError);
}

}  // namespace
}  // namespace ddp::comm::store
