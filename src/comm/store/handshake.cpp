#include "comm/store/handshake.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "base/str.hpp"
#include "comm/store/wire.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::store {
namespace {

constexpr std::string_view kMagic = "DDPSTORE";
constexpr std::uint8_t kVersion = 1;
constexpr std::string_view kClientLabel = "ddp-store client";
constexpr std::string_view kServerLabel = "ddp-store server";

const char* const kSecretHelp =
    "Start every rank with the same DDP_JOB_SECRET_FILE (ddprun sets it; for several nodes, "
    "give every node's ddprun the same --secret-file).";

}  // namespace

std::string random_bytes(std::size_t count) {
  std::string bytes(count, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(count)) != 1) {
    throw RendezvousError(
        "cannot draw random bytes for the rendezvous store's handshake (OpenSSL's RAND_bytes "
        "failed); the machine's entropy source may be unavailable. Check /dev/urandom.");
  }
  return bytes;
}

std::string handshake_proof(std::string_view secret, std::string_view label,
                            std::string_view server_nonce, std::string_view client_nonce) {
  std::string message;
  message.reserve(label.size() + server_nonce.size() + client_nonce.size());
  message.append(label).append(server_nonce).append(client_nonce);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool proofs_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string hello_payload(std::string_view server_nonce) {
  WireWriter hello;
  hello.payload().append(kMagic);
  hello.u8(kVersion).u8(server_nonce.empty() ? 0 : 1);
  if (!server_nonce.empty()) hello.bytes(server_nonce);
  return hello.payload();
}

HandshakeVerdict judge_client(std::string_view payload, std::string_view secret,
                              std::string_view server_nonce) {
  HandshakeVerdict verdict;
  auto refuse = [&](std::string reason) {
    verdict.reason = std::move(reason);
    WireWriter reply;
    reply.u8(static_cast<std::uint8_t>(Status::kError))
        .bytes("the store refused this client: it did not prove that it knows the job's secret");
    verdict.reply = reply.payload();
    return verdict;
  };
  try {
    WireReader request(payload);
    const auto op = request.u8();
    if (op != static_cast<std::uint8_t>(Op::kAuth)) {
      return refuse(
          base::detail::str("its first request was op ", static_cast<int>(op), ", not AUTH"));
    }
    const std::string client_nonce = request.bytes();
    const std::string proof = request.bytes();
    if (client_nonce.size() != kNonceBytes) {
      return refuse(
          base::detail::str("its nonce has ", client_nonce.size(), " bytes, not ", kNonceBytes));
    }
    if (!proofs_equal(proof, handshake_proof(secret, kClientLabel, server_nonce, client_nonce))) {
      return refuse("wrong proof of the job secret");
    }
    verdict.admitted = true;
    WireWriter reply;
    reply.u8(static_cast<std::uint8_t>(Status::kOk))
        .bytes(handshake_proof(secret, kServerLabel, server_nonce, client_nonce));
    verdict.reply = reply.payload();
    return verdict;
  } catch (const WireError& error) {
    return refuse(std::string("malformed AUTH request (") + error.what() + ")");
  }
}

void client_handshake(const Socket& socket, std::string_view secret, const std::string& endpoint,
                      Clock::time_point deadline) {
  const std::string where = "the rendezvous store at " + endpoint;
  std::string hello;
  try {
    hello = recv_frame(socket, deadline);
  } catch (const SocketError& error) {
    throw RendezvousError(where + " did not greet this process (" + error.what() +
                          "). Is MASTER_PORT the port of this job's rank 0, and is that "
                          "process a ddp program?");
  }
  WireReader reader(hello);
  std::string magic;
  std::uint8_t version = 0;
  std::uint8_t auth = 0;
  std::string server_nonce;
  try {
    for (std::size_t i = 0; i < kMagic.size(); ++i) magic.push_back(static_cast<char>(reader.u8()));
    version = reader.u8();
    auth = reader.u8();
    if (auth) server_nonce = reader.bytes();
  } catch (const WireError&) {
    magic.clear();
  }
  if (magic != kMagic || version != kVersion) {
    throw RendezvousError(base::detail::str(
        where, " does not speak ddp's store protocol (version ", static_cast<int>(kVersion),
        "). Check MASTER_ADDR and MASTER_PORT, and start every rank from the same build of ddp."));
  }
  if (auth && secret.empty()) {
    throw RendezvousError(where +
                          " admits only ranks that know the job's secret, and this "
                          "process has none. " +
                          kSecretHelp);
  }
  if (!auth && !secret.empty()) {
    throw RendezvousError(where +
                          " does not ask for a job secret, but this process has one: "
                          "it is not this job's store, or its rank 0 was started without the "
                          "secret. " +
                          kSecretHelp);
  }
  if (!auth) return;
  const std::string client_nonce = random_bytes(kNonceBytes);
  WireWriter request;
  request.u8(static_cast<std::uint8_t>(Op::kAuth))
      .bytes(client_nonce)
      .bytes(handshake_proof(secret, kClientLabel, server_nonce, client_nonce));
  std::string reply;
  try {
    send_frame(socket, request.payload(), deadline);
    reply = recv_frame(socket, deadline);
  } catch (const SocketError& error) {
    throw RendezvousError(where + " dropped this process during the handshake (" + error.what() +
                          "). " + kSecretHelp);
  }
  try {
    WireReader answer(reply);
    const auto status = static_cast<Status>(answer.u8());
    const std::string field = answer.bytes();
    if (status != Status::kOk) {
      throw RendezvousError(where + " refused this process's job secret (" + field +
                            "): its secret differs. " + kSecretHelp);
    }
    if (!proofs_equal(field, handshake_proof(secret, kServerLabel, server_nonce, client_nonce))) {
      throw RendezvousError(where +
                            " could not prove that it knows the job's secret: another "
                            "process may be listening on its port. " +
                            kSecretHelp);
    }
  } catch (const WireError& error) {
    throw RendezvousError(where + " sent a malformed handshake reply (" + error.what() + "). " +
                          kSecretHelp);
  }
}

}  // namespace ddp::comm::store
