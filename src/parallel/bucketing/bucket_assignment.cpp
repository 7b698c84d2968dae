#include "parallel/bucketing/bucket_assignment.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

namespace ddp::parallel::detail {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketInput>& parameters,
                                                const std::vector<size_t>& order,
                                                int64_t first_cap_bytes, int64_t cap_bytes,
                                                CapRule rule) {
  struct Open {
    std::vector<size_t> members;
    int64_t bytes = 0;
    int64_t cap = 0;
  };
  // Keyed by dtype and the device's name ("cpu", "cuda:0").
  std::map<std::pair<int, std::string>, Open> open;
  std::vector<std::vector<size_t>> closed;
  for (size_t index : order) {
    const BucketInput& p = parameters[index];
    auto key = std::make_pair(static_cast<int>(p.dtype), p.device.str());
    auto it = open.find(key);
    if (it == open.end()) it = open.emplace(key, Open{{}, 0, first_cap_bytes}).first;
    Open& bucket = it->second;
    if (rule == CapRule::kNeverExceed && !bucket.members.empty() &&
        bucket.bytes + p.bytes > bucket.cap) {
      closed.push_back(std::move(bucket.members));
      bucket = Open{{}, 0, cap_bytes};
    }
    bucket.members.push_back(index);
    bucket.bytes += p.bytes;
    if (rule == CapRule::kCloseOnReaching && bucket.bytes >= bucket.cap) {
      closed.push_back(std::move(bucket.members));
      bucket = Open{{}, 0, cap_bytes};
    }
  }
  for (auto& entry : open) {
    if (!entry.second.members.empty()) closed.push_back(std::move(entry.second.members));
  }
  std::vector<size_t> position(parameters.size());
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::sort(closed.begin(), closed.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return closed;
}

std::vector<size_t> initial_bucket_order(size_t count) {
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = count - 1 - i;
  return order;
}

std::vector<size_t> rebuild_bucket_order(const std::vector<size_t>& ready_order, size_t count) {
  std::vector<size_t> order(ready_order);
  std::vector<bool> seen(count, false);
  for (size_t index : order) seen[index] = true;
  for (size_t i = count; i-- > 0;) {
    if (!seen[i]) order.push_back(i);
  }
  return order;
}

}  // namespace ddp::parallel::detail
