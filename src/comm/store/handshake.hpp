#pragma once

/// \file handshake.hpp
/// Internal: the first exchange on every connection to the rendezvous store,
/// which admits only clients that know the job's secret.
///
/// Note [Store authentication]
/// A store created with a secret admits a client only after a challenge and
/// response; the secret itself never crosses the wire:
///
///   server -> client  HELLO  "DDPSTORE", u8 version, u8 auth, [server nonce]
///   client -> server  AUTH   client nonce, HMAC(secret, "client" | Ns | Nc)
///   server -> client  OK     HMAC(secret, "server" | Ns | Nc)   or ERROR
///
/// HMAC is HMAC-SHA256 (OpenSSL), each nonce 32 random bytes, so a recorded
/// exchange cannot be replayed, and the two proofs carry different labels,
/// so a proof cannot be reflected back. The client checks the server's proof
/// too: a process that merely listens on MASTER_PORT cannot pose as the
/// job's store. Until a client has proven itself, the server reads at most
/// kMaxHandshakeFrame bytes from it, answers nothing but AUTH, and drops it
/// after kHandshakeTimeout; nothing an unproven client sends reaches the
/// key space. A store without a secret says so in HELLO; a client that has
/// a secret refuses such a store (it is not its job's), and one without a
/// secret refuses a store that asks for one, each with a message saying
/// what to change.

#include <chrono>
#include <string>
#include <string_view>

#include "comm/store/socket.hpp"

namespace ddp::comm::store {

/// The longest frame accepted from a client that has not authenticated.
inline constexpr std::uint32_t kMaxHandshakeFrame = 256;

/// How long a client may take to authenticate before the server drops it.
inline constexpr std::chrono::milliseconds kHandshakeTimeout = std::chrono::seconds(10);

/// Bytes of each side's nonce and of an HMAC-SHA256 proof.
inline constexpr std::size_t kNonceBytes = 32;

/// `count` bytes from OpenSSL's CSPRNG. Throws ddp::RendezvousError if it fails.
std::string random_bytes(std::size_t count);

/// HMAC-SHA256 of `label | server_nonce | client_nonce` keyed by `secret`.
std::string handshake_proof(std::string_view secret, std::string_view label,
                            std::string_view server_nonce, std::string_view client_nonce);

/// Compares two proofs in constant time.
bool proofs_equal(std::string_view a, std::string_view b);

/// The HELLO payload a server sends first: with `server_nonce` when it has a
/// secret, without when `server_nonce` is empty.
std::string hello_payload(std::string_view server_nonce);

/// What a server decides about a client's first frame.
struct HandshakeVerdict {
  bool admitted = false;
  std::string reply;   ///< the payload to send back (OK and proof, or ERROR)
  std::string reason;  ///< for the server's log when refused
};

/// Checks a client's AUTH payload against the server's nonce and secret.
HandshakeVerdict judge_client(std::string_view payload, std::string_view secret,
                              std::string_view server_nonce);

/// The client's side: reads HELLO from `socket`, proves it knows `secret`
/// (empty: none) and checks the server's proof, all before `deadline`.
/// Throws ddp::RendezvousError naming `endpoint` and what to do when the
/// server is not a ddp store, asks for a secret this process lacks, lacks
/// one this process has, refuses the secret, or fails its own proof.
void client_handshake(const Socket& socket, std::string_view secret, const std::string& endpoint,
                      Clock::time_point deadline);

}  // namespace ddp::comm::store
