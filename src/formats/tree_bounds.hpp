#pragma once

// Internal: the bounds on a value tree's shape that read_torch_file keeps
// (Note [A hostile file is an error] in ddp/formats/torch_file.hpp).

#include <string>

#include "ddp/formats/py_value.hpp"

namespace ddp::formats::detail {

/// "" when `root` nests at most kMaxPickleDepth containers and holds no
/// cycle; otherwise what is wrong, for messages. Without recursion: each
/// value's height is found once, so a shared subtree costs one visit.
std::string tree_problem(const PyValue& root);

}  // namespace ddp::formats::detail
