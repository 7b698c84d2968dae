#include "elastic/generations.hpp"

#include <unistd.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/str.hpp"
#include "comm/store/job_secret.hpp"
#include "comm/store/store_value.hpp"
#include "comm/store/worker_protocol.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/tcp_store.hpp"

namespace ddp::elastic::detail {
namespace {

using Clock = std::chrono::steady_clock;

// How long the recovery store may take to answer a quick call (the store
// adds a grace of 5 s).
constexpr std::chrono::milliseconds kReplyBound = std::chrono::seconds(5);

int generation_of(const std::string& text) {
  try {
    size_t used = 0;
    const int generation = std::stoi(text, &used);
    if (used == text.size() && generation >= 0) return generation;
  } catch (const std::exception&) {
  }
  throw ConfigError(base::detail::str(kRecoveryGenerationVariable, " is '", text,
                                      "'; it must be a generation number (ddprun sets it)."));
}

// The store file's entry (Note [The launcher's protocol] in
// comm/store/worker_protocol.hpp); {0, ""} while there is none.
comm::store::StoreFileEntry store_file_entry(const std::string& path) {
  return comm::store::read_store_file(path).value_or(comm::store::StoreFileEntry{});
}

}  // namespace

Generations::Generations(const EnvironmentMap& env, std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  auto found = env.find(store::kJobSecretFileVariable);
  secret_ = found == env.end() || found->second.empty() ? std::string()
                                                        : store::read_job_secret(found->second);
  auto file = env.find(kRecoveryStoreFileVariable);
  if (file != env.end() && !file->second.empty()) {
    store_file_ = file->second;
    moves_ = store_file_entry(store_file_).count;
  }
  connect(env.at(kRecoveryStoreVariable));
  auto given = env.find(kRecoveryGenerationVariable);
  current_ = given == env.end() ? 0 : generation_of(given->second);
}

void Generations::connect(const std::string& address) {
  const auto colon = address.rfind(':');
  int port = 0;
  try {
    port = colon == std::string::npos ? 0 : std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (colon == 0 || port <= 0 || port > 65535) {
    throw ConfigError(base::detail::str(kRecoveryStoreVariable, " is '", address,
                                        "'; it must be HOST:PORT (ddprun --recovery memory sets "
                                        "it)."));
  }
  store_ = c10::make_intrusive<TcpStore>(TcpStoreOptions()
                                             .host(address.substr(0, colon))
                                             .port(port)
                                             .timeout(timeout_)
                                             .secret(secret_)
                                             .hosted_by("node 0's ddprun"));
  // Every call after the connection is a quick one (the waits poll), so a
  // host that hangs or is cut off is a lost store after the bound, not
  // after rejoin_timeout (Note [A new host]).
  store_->setTimeout(std::min(timeout_, kReplyBound));
}

// The store was lost: waits until the launcher names its new place, and
// connects there.
void Generations::reconnect(Clock::time_point give_up) {
  while (true) {
    const auto [count, address] = store_file_entry(store_file_);
    if (count > moves_) {
      moves_ = count;
      connect(address);
      return;
    }
    if (Clock::now() > give_up) {
      throw TimeoutError(base::detail::str(
          "the launcher's recovery store was lost and ", store_file_, " named no new one within ",
          timeout_.count(),
          " ms (RunOptions::rejoin_timeout): the job did not re-form around a new host (it "
          "needs three nodes or more, and a majority of them left)."));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int Generations::newest() {
  return static_cast<int>(store_->add(comm::store::generations_key(), 0));
}

Generations::Meeting Generations::meet(int rank, int world_size,
                                       c10::intrusive_ptr<c10d::Store>& met) {
  auto store =
      c10::make_intrusive<c10d::PrefixStore>(comm::store::generation_prefix(current_), store_);
  store->set(base::detail::str("present/", rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(base::detail::str("present/", r));
  const auto give_up = Clock::now() + timeout_;
  while (!store->check(keys)) {
    if (const int started = newest(); started > current_) {
      current_ = started;
      return Meeting::kNewer;
    }
    if (store_->check({comm::store::finished_key()})) return Meeting::kJobEnded;
    if (Clock::now() > give_up) {
      throw TimeoutError(base::detail::str("generation ", current_, " of the job: not all ",
                                           world_size, " ranks joined within ", timeout_.count(),
                                           " ms (RunOptions::rejoin_timeout); a replaced worker "
                                           "may have failed at start-up: read ddprun's log."));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  met = store;
  return Meeting::kMet;
}

void Generations::finish() {
  store_->set(comm::store::finished_key(), comm::store::as_bytes(std::to_string(current_)));
}

std::optional<std::map<std::string, std::string>> Generations::next(int rank) {
  const auto give_up = Clock::now() + timeout_;
  while (true) {
    int newest_generation = 0;
    try {
      newest_generation = newest();
    } catch (const RendezvousError&) {
      if (store_file_.empty()) throw;
      reconnect(give_up);  // a new store: wait for the seats in it
      continue;
    }
    if (newest_generation > current_) {
      current_ = newest_generation;
      const std::string seat = comm::store::reseat_key(current_, rank);
      if (!store_->check({seat})) return std::nullopt;
      return comm::store::decode_seat(comm::store::as_text(store_->get(seat)));
    }
    if (Clock::now() > give_up) {
      throw TimeoutError(base::detail::str(
          "generation ", current_, " lost a peer and no new generation started within ",
          timeout_.count(),
          " ms (RunOptions::rejoin_timeout): the launcher did not replace the worker. Check that "
          "ddprun has restarts left (--max-restarts)."));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The store parks a wait() until the key is set, so the spare wakes as the
// agent seats it; each slice that times out just waits again.
std::optional<std::map<std::string, std::string>> Generations::hold_spare(const std::string& id) {
  const std::string seat = comm::store::spare_seat_key(id);
  store_->set(comm::store::spare_ready_key(id), comm::store::as_bytes(std::to_string(getpid())));
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
  store_->set(comm::store::spare_running_key(id), comm::store::as_bytes(std::to_string(current_)));
}

}  // namespace ddp::elastic::detail
