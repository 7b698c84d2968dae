#pragma once

/// \file wire.hpp
/// The frame format spoken between ddp::TcpStore clients and the StoreServer.
///
/// Note [Store wire format]
/// Every message is a frame: a u32 payload length, then the payload. A
/// request payload is a u8 Op followed by its fields; a reply payload is a u8
/// Status followed by its fields. A byte-string field is a u32 length and the
/// bytes (values may hold any byte, 0x00 included); an integer is written in
/// fixed width, little-endian. Both ends are ddp, so there is no version
/// negotiation: the launcher starts every rank from the same build.
///
///   SET          key, value                     -> OK
///   GET          u64 timeout_ms, key            -> OK value | TIMED_OUT missing
///   ADD          key, i64 delta                 -> OK i64 new | ERROR message
///   COMPARE_SET  key, expected, desired         -> OK value
///   CHECK        u32 n, n keys                  -> OK u8 all_exist
///   DELETE       key                            -> OK u8 existed
///   NUM_KEYS                                    -> OK i64 count
///   WAIT         u64 timeout_ms, u32 n, n keys  -> OK | TIMED_OUT missing
///   AUTH         client nonce, proof            -> OK proof | ERROR message
///
/// The server speaks first, with HELLO, and a client's first request must be
/// AUTH when the store has a secret (Note [Store authentication] in
/// handshake.hpp).
///
/// GET and WAIT block on the server, not on the client: the server replies
/// once every key exists, or TIMED_OUT (followed by a u32 count and the keys
/// still missing) at the deadline. A timeout of 0 means "no deadline", like
/// c10d::Store::kNoTimeout. Because every request gets exactly one reply, in
/// order, a client never reads a reply meant for an earlier request.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/str.hpp"

namespace ddp::comm::store {

enum class Op : std::uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kCheck = 5,
  kDelete = 6,
  kNumKeys = 7,
  kWait = 8,
  kAuth = 9,
};

enum class Status : std::uint8_t {
  kOk = 0,
  kTimedOut = 1,
  kError = 2,
};

/// Frames larger than this are refused: no rendezvous value comes close, so a
/// bigger length means a peer that does not speak this protocol.
inline constexpr std::uint32_t kMaxFrameBytes = 64u << 20;

/// A payload that ended early or held an impossible value. Internal, like
/// SocketError (Note [Internal store errors stay inside] in socket.hpp).
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Appends fields to a payload.
class WireWriter {
 public:
  WireWriter& u8(std::uint8_t value) {
    payload_.push_back(static_cast<char>(value));
    return *this;
  }
  WireWriter& u32(std::uint32_t value) { return fixed(value, 4); }
  WireWriter& u64(std::uint64_t value) { return fixed(value, 8); }
  WireWriter& i64(std::int64_t value) { return fixed(static_cast<std::uint64_t>(value), 8); }
  WireWriter& bytes(std::string_view value) {
    u32(static_cast<std::uint32_t>(value.size()));
    payload_.append(value.data(), value.size());
    return *this;
  }
  WireWriter& keys(const std::vector<std::string>& keys) {
    u32(static_cast<std::uint32_t>(keys.size()));
    for (const auto& key : keys) bytes(key);
    return *this;
  }
  std::string& payload() { return payload_; }

 private:
  WireWriter& fixed(std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i) {
      payload_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
    }
    return *this;
  }

  std::string payload_;
};

/// Reads fields from a payload in order; throws WireError when it runs short.
class WireReader {
 public:
  explicit WireReader(std::string_view payload) : rest_(payload) {}

  std::uint8_t u8() { return static_cast<std::uint8_t>(fixed(1)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(fixed(4)); }
  std::uint64_t u64() { return fixed(8); }
  std::int64_t i64() { return static_cast<std::int64_t>(fixed(8)); }
  std::string bytes() {
    const std::uint32_t size = u32();
    need(size);
    std::string value(rest_.substr(0, size));
    rest_.remove_prefix(size);
    return value;
  }
  std::vector<std::string> keys() {
    const std::uint32_t count = u32();
    // Each key costs at least its 4-byte length, which bounds a bogus count.
    need(std::uint64_t{count} * 4);
    std::vector<std::string> result;
    result.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) result.push_back(bytes());
    return result;
  }

 private:
  void need(std::uint64_t size) const {
    if (size > rest_.size()) {
      throw WireError(base::detail::str("truncated store message: needed ", size, " more bytes, ",
                                        rest_.size(), " left"));
    }
  }
  std::uint64_t fixed(int width) {
    need(static_cast<std::uint64_t>(width));
    std::uint64_t value = 0;
    for (int i = 0; i < width; ++i) {
      value |= std::uint64_t{static_cast<unsigned char>(rest_[i])} << (8 * i);
    }
    rest_.remove_prefix(static_cast<std::size_t>(width));
    return value;
  }

  std::string_view rest_;
};

}  // namespace ddp::comm::store
