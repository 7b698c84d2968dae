#include "ddp/comm/observer_factory.hpp"

#include <mutex>
#include <utility>

#include "ddp/base/errors.hpp"

namespace ddp::comm {
namespace {

// Never destroyed: parts register from static initializers, in any order
// relative to this file's, and init() may run during static destruction.
struct Registry {
  std::mutex mutex;
  std::vector<ObserverFactory> factories;
};

Registry& registry() {
  static auto* instance = new Registry();
  return *instance;
}

}  // namespace

void register_observer_factory(ObserverFactory factory) {
  if (!factory) {
    throw InvalidArgumentError(
        "register_observer_factory: the factory is empty; pass a function that returns the "
        "observer to add (or null for none).");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories.push_back(std::move(factory));
}

std::vector<ObserverFactory> registered_observer_factories() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.factories;
}

}  // namespace ddp::comm
