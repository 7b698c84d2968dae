#include "comm/byte_exchange.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "ddp/comm/process_group.hpp"

namespace ddp::comm::detail {
namespace {

int64_t words_for(int64_t bytes) { return std::max<int64_t>((bytes + 3) / 4, 1); }

}  // namespace

std::string broadcast_bytes(ProcessGroup& group, const std::string& bytes, int root) {
  at::Tensor length = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  group.broadcast(length, root);
  const int64_t size = length.item<int64_t>();
  at::Tensor words = at::zeros({words_for(size)}, at::kInt);
  if (group.rank() == root) std::memcpy(words.data_ptr(), bytes.data(), bytes.size());
  group.broadcast(words, root);
  return std::string(static_cast<const char*>(words.data_ptr()), static_cast<size_t>(size));
}

std::vector<std::string> all_gather_bytes(ProcessGroup& group, const std::string& bytes) {
  const int world = group.size();
  at::Tensor length = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  at::Tensor lengths = at::empty({world}, at::kLong);
  group.all_gather(lengths, length);
  const int64_t words = words_for(lengths.max().item<int64_t>());
  at::Tensor mine = at::zeros({words}, at::kInt);
  std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
  at::Tensor all = at::empty({world * words}, at::kInt);
  group.all_gather(all, mine);
  std::vector<std::string> result(world);
  const char* base = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < world; ++r) {
    result[r].assign(base + r * words * 4, static_cast<size_t>(lengths[r].item<int64_t>()));
  }
  return result;
}

std::pair<int, std::string> first_failure(ProcessGroup& group, const std::string& failure) {
  if (group.size() == 1) return {failure.empty() ? -1 : 0, failure};
  const std::vector<std::string> failures = all_gather_bytes(group, failure);
  for (size_t r = 0; r < failures.size(); ++r) {
    if (!failures[r].empty()) return {static_cast<int>(r), failures[r]};
  }
  return {-1, ""};
}

}  // namespace ddp::comm::detail
