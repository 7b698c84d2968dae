#include "elastic/generations.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "ddp/comm/errors.hpp"
#include "ddp/comm/tcp_store.hpp"
#include "comm/store/job_secret.hpp"
#include "comm/store/spare_seat.hpp"
#include "comm/store/store_value.hpp"
#include "comm/str.hpp"

namespace ddp::elastic::detail {
namespace {

using Clock = std::chrono::steady_clock;

int generation_of(const std::string& text) {
  try {
    size_t used = 0;
    const int generation = std::stoi(text, &used);
    if (used == text.size() && generation >= 0) return generation;
  } catch (const std::exception&) {
  }
  throw ConfigError(comm::detail::str(kRecoveryGenerationVariable, " is '", text,
                                      "'; it must be a generation number (ddprun sets it)."));
}

}  // namespace

Generations::Generations(const EnvironmentMap& env, std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  const std::string address = env.at(kRecoveryStoreVariable);
  const auto colon = address.rfind(':');
  int port = 0;
  try {
    port = colon == std::string::npos ? 0 : std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (colon == 0 || port <= 0 || port > 65535) {
    throw ConfigError(comm::detail::str(kRecoveryStoreVariable, " is '", address,
                                        "'; it must be HOST:PORT (ddprun --recovery memory sets "
                                        "it)."));
  }
  auto found = env.find(store::kJobSecretFileVariable);
  const std::string secret = found == env.end() || found->second.empty()
                                 ? std::string()
                                 : store::read_job_secret(found->second);
  store_ = c10::make_intrusive<TcpStore>(
      TcpStoreOptions().host(address.substr(0, colon)).port(port).timeout(timeout).secret(secret));
  auto given = env.find(kRecoveryGenerationVariable);
  current_ = given == env.end() ? 0 : generation_of(given->second);
}

int Generations::newest() { return static_cast<int>(store_->add(kRecoveryGenerationsKey, 0)); }

bool Generations::meet(int rank, int world_size, c10::intrusive_ptr<c10d::Store>& met) {
  auto store = c10::make_intrusive<c10d::PrefixStore>(
      comm::detail::str("ddp/generation/", current_), store_);
  store->set(comm::detail::str("present/", rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(comm::detail::str("present/", r));
  const auto give_up = Clock::now() + timeout_;
  while (!store->check(keys)) {
    if (newest() > current_) {
      current_ = newest();
      return false;
    }
    if (Clock::now() > give_up) {
      throw TimeoutError(comm::detail::str("generation ", current_, " of the job: not all ",
                                           world_size, " ranks joined within ", timeout_.count(),
                                           " ms (RunOptions::rejoin_timeout); a replaced worker "
                                           "may have failed at start-up: read ddprun's log."));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  met = store;
  return true;
}

void Generations::next() {
  const auto give_up = Clock::now() + timeout_;
  while (newest() <= current_) {
    if (Clock::now() > give_up) {
      throw TimeoutError(comm::detail::str(
          "generation ", current_, " lost a peer and no new generation started within ",
          timeout_.count(),
          " ms (RunOptions::rejoin_timeout): the launcher did not replace the worker. Check that "
          "ddprun has restarts left (--max-restarts)."));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  current_ = newest();
}

// The store parks a wait() until the key is set, so the spare wakes as the
// agent seats it; each slice that times out just waits again.
std::optional<std::map<std::string, std::string>> Generations::hold_spare(const std::string& id) {
  const std::string seat = comm::store::spare_key(id, "seat");
  store_->set(comm::store::spare_key(id, "ready"), comm::store::as_bytes(std::to_string(getpid())));
  while (true) {
    try {
      store_->wait({seat}, std::chrono::seconds(1));
      break;
    } catch (const TimeoutError&) {  // ddp's TcpStore: wait again
    }
  }
  const std::string text = comm::store::as_text(store_->get(seat));
  if (text == comm::store::kSpareRelease) return std::nullopt;
  std::map<std::string, std::string> variables = comm::store::decode_seat(text);
  auto generation = variables.find(kRecoveryGenerationVariable);
  if (generation != variables.end()) current_ = generation_of(generation->second);
  return variables;
}

void Generations::report_running(const std::string& id) {
  store_->set(comm::store::spare_key(id, "running"),
              comm::store::as_bytes(std::to_string(current_)));
}

}  // namespace ddp::elastic::detail
