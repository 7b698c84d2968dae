#include "snapshot/saved_parameters.hpp"

#include <cstdint>
#include <map>

#include "base/str.hpp"

namespace ddp::snapshot::detail {

using nlohmann::json;

std::vector<size_t> match_saved_parameters(const json& record,
                                           const parallel::ShardedState& sharded,
                                           const std::function<void(const std::string&)>& fail) {
  const std::vector<int64_t> here = sharded.numels();
  const auto numels = record.at("numels").get<std::vector<int64_t>>();
  std::vector<size_t> saved_index(here.size());
  const std::vector<std::string> names = sharded.names();
  if (!names.empty() && record.contains("names")) {
    const auto saved_names = record.at("names").get<std::vector<std::string>>();
    const auto saved_shapes = record.at("shapes").get<std::vector<std::vector<int64_t>>>();
    const auto shapes = sharded.shapes();
    if (saved_names.size() != numels.size() || saved_shapes.size() != numels.size()) {
      fail("its sharded-state record lists names and shapes for another count of parameters");
    }
    std::map<std::string, size_t> by_name;
    for (size_t q = 0; q < saved_names.size(); ++q) by_name[saved_names[q]] = q;
    for (size_t p = 0; p < names.size(); ++p) {
      auto found = by_name.find(names[p]);
      if (found == by_name.end()) {
        fail(base::detail::str("its sharded state has no parameter '", names[p],
                               "', which this model has"));
      }
      if (saved_shapes[found->second] != shapes[p]) {
        fail(base::detail::str("parameter '", names[p], "' has shape ",
                               json(saved_shapes[found->second]).dump(),
                               " in the sharded state and ", json(shapes[p]).dump(), " here"));
      }
      saved_index[p] = found->second;
      by_name.erase(found);
    }
    if (!by_name.empty()) {
      fail(base::detail::str("its sharded state has parameter '", by_name.begin()->first,
                             "', which this model lacks (", by_name.size(),
                             " such); resume it into the model that saved it"));
    }
    return saved_index;
  }
  if (numels.size() != here.size()) {
    fail(base::detail::str("its sharded state covers ", numels.size(),
                           " flattened parameters; this one has ", here.size()));
  }
  for (size_t p = 0; p < here.size(); ++p) {
    if (numels[p] != here[p]) {
      fail(base::detail::str("flattened parameter #", p, " has ", numels[p],
                             " elements in the sharded state and ", here[p], " here"));
    }
    saved_index[p] = p;
  }
  return saved_index;
}

}  // namespace ddp::snapshot::detail
