#include "parallel/rank_agreement.hpp"

#include <ATen/ATen.h>

#include <sstream>

#include "base/dtype_name.hpp"
#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel::detail {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) result.push_back(line);
  return result;
}

std::string join(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += base::detail::str(text.empty() ? "" : ", ", r);
  return text;
}

}  // namespace

std::vector<std::string> describe_tensors(const std::vector<std::string>& names,
                                          const std::vector<at::Tensor>& tensors) {
  std::vector<std::string> descriptions;
  for (size_t i = 0; i < tensors.size(); ++i) {
    descriptions.push_back(base::detail::str(names[i], " ",
                                             base::detail::dtype_name(tensors[i].scalar_type()),
                                             " ", tensors[i].sizes()));
  }
  return descriptions;
}

void verify_same_across_ranks(ProcessGroup& group, const std::vector<std::string>& descriptions,
                              const char* who, const std::string& what, const std::string& advice,
                              const char* collective) {
  if (group.size() == 1) return;
  std::string text;
  for (const auto& d : descriptions) text += d + "\n";
  std::vector<std::vector<std::string>> all;
  std::vector<std::string> texts;
  {
    comm::detail::CollectiveName name(collective, -1, /*fallback=*/true);
    texts = comm::detail::all_gather_bytes(group, text);
  }
  for (const auto& t : texts) all.push_back(lines(t));

  const auto& reference = all[0];
  size_t longest = 0;
  for (const auto& list : all) longest = std::max(longest, list.size());
  for (size_t i = 0; i < longest; ++i) {
    auto entry = [&](int r) {
      return i < all[r].size() ? "'" + all[r][i] + "'"
                               : base::detail::str("nothing (it has only ", all[r].size(), ")");
    };
    std::vector<int> agree, differ;
    for (int r = 0; r < group.size(); ++r) (entry(r) == entry(0) ? agree : differ).push_back(r);
    if (differ.empty()) continue;
    throw InvalidArgumentError(base::detail::str(
        who, ": the ", what, " differ across ranks at #", i, ": rank 0 has ", entry(0), ", rank ",
        differ[0], " has ", entry(differ[0]), " (ranks that differ from rank 0: ", join(differ),
        "; ranks that agree: ", join(agree), "; rank 0 has ", reference.size(), " in all). ",
        advice));
  }
}

}  // namespace ddp::parallel::detail
