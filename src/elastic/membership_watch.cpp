#include "elastic/membership_watch.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/elastic/membership_change.hpp"
#include "elastic/generations.hpp"

namespace ddp::elastic::detail {
namespace {

constexpr int64_t kStoreLost = -1;  // what rank 0 broadcasts when the store is gone

}  // namespace

MembershipWatch::MembershipWatch(State& state, ProcessGroup& group, Generations& generations)
    : state_(state) {
  state.on_commit([&state, &group, &generations] {
    int64_t newest = 0;
    std::string why;
    if (group.rank() == 0) {
      try {
        newest = generations.newest();
      } catch (const RendezvousError& e) {
        newest = kStoreLost;
        why = e.what();
      }
    }
    at::Tensor answer = at::full({1}, newest, at::kLong);
    group.broadcast(answer, 0);
    newest = answer.item<int64_t>();
    if (newest == kStoreLost) {
      throw RendezvousError(
          base::detail::str("rank 0 lost the launcher's recovery store at commit ", state.commits(),
                            why.empty() ? std::string() : ": " + why.substr(0, why.find('\n'))));
    }
    if (newest > generations.current()) {
      throw MembershipChange(generations.current(), static_cast<int>(newest), state.commits());
    }
  });
}

MembershipWatch::~MembershipWatch() { state_.on_commit(nullptr); }

}  // namespace ddp::elastic::detail
