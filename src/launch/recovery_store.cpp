#include "launch/recovery_store.hpp"

#include <chrono>
#include <string>
#include <vector>

#include "base/str.hpp"
#include "comm/store/worker_protocol.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/tcp_store.hpp"
#include "launch/endpoint.hpp"

namespace ddp::launch {

RecoveryStore::RecoveryStore(c10d::Store& agents, const std::string& key, bool host,
                             const std::string& address, const std::string& secret,
                             std::chrono::milliseconds timeout) {
  TcpStoreOptions options;
  options.timeout(timeout).secret(secret).hosted_by("node 0's ddprun");
  if (host) {
    auto server = c10::make_intrusive<TcpStore>(options.host(address).port(0).is_server(true));
    address_ = base::detail::str(address, ":", server->port());
    store_ = std::move(server);
    agents.set(key, std::vector<uint8_t>(address_.begin(), address_.end()));
  } else {
    agents.wait({key}, timeout);
    const std::vector<uint8_t> value = agents.get(key);
    address_.assign(value.begin(), value.end());
    const auto [host, port] = split_endpoint(address_);
    store_ = c10::make_intrusive<TcpStore>(options.host(host).port(port));
  }
}

RecoveryStore::~RecoveryStore() = default;

int RecoveryStore::current() {
  return static_cast<int>(store_->add(comm::store::generations_key(), 0));
}

int RecoveryStore::next() {
  return static_cast<int>(store_->add(comm::store::generations_key(), 1));
}

}  // namespace ddp::launch
