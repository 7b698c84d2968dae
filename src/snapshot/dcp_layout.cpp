#include "snapshot/dcp_layout.hpp"

#include <unordered_map>

#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/errors.hpp"
#include "snapshot/sharded_state.hpp"

namespace ddp::snapshot::detail {

using formats::DcpBox;
using formats::PyRef;
using formats::PyValue;

namespace {

// Appends the boxes of elements [begin, end) of `shape[dim:]`, every box
// prefixed by `offsets` (the fixed indices of the dimensions before).
void tile(const std::vector<int64_t>& shape, size_t dim, int64_t begin, int64_t end,
          std::vector<int64_t>& offsets, std::vector<DcpBox>& boxes) {
  if (begin >= end) return;
  const size_t dims = shape.size();
  int64_t row = 1;  // elements of one index of dimension `dim`
  for (size_t d = dim + 1; d < dims; ++d) row *= shape[d];
  auto box_of_rows = [&](int64_t first, int64_t count) {
    DcpBox box;
    box.offsets = offsets;
    box.sizes.assign(offsets.size(), 1);
    box.offsets.push_back(first);
    box.sizes.push_back(count);
    for (size_t d = dim + 1; d < dims; ++d) {
      box.offsets.push_back(0);
      box.sizes.push_back(shape[d]);
    }
    boxes.push_back(std::move(box));
  };
  auto part_of_row = [&](int64_t index, int64_t from, int64_t to) {
    offsets.push_back(index);
    tile(shape, dim + 1, from, to, offsets, boxes);
    offsets.pop_back();
  };
  const int64_t first = begin / row, last = (end - 1) / row;  // rows touched
  if (first == last) {
    if (end - begin == row) return box_of_rows(first, 1);
    return part_of_row(first, begin - first * row, end - first * row);
  }
  int64_t whole_from = first, whole_to = last + 1;
  if (begin % row != 0) part_of_row(first, begin % row, row), whole_from = first + 1;
  if (end % row != 0) whole_to = last;
  if (whole_from < whole_to) box_of_rows(whole_from, whole_to - whole_from);
  if (end % row != 0) part_of_row(last, 0, end % row);
}

}  // namespace

std::vector<DcpBox> flat_range_boxes(const std::vector<int64_t>& shape, int64_t begin,
                                     int64_t length) {
  std::vector<DcpBox> boxes;
  if (length <= 0) return boxes;
  if (shape.empty()) return {DcpBox{}};
  std::vector<int64_t> offsets;
  tile(shape, 0, begin, begin + length, offsets, boxes);
  return boxes;
}

std::vector<PyRef> dcp_path(const std::string& prefix, const std::vector<PyRef>& rest) {
  std::vector<PyRef> path;
  size_t start = 0;
  while (true) {
    const size_t dot = prefix.find('.', start);
    path.push_back(PyValue::of(prefix.substr(start, dot - start)));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  path.insert(path.end(), rest.begin(), rest.end());
  return path;
}

const std::vector<std::pair<std::string, PyRef>>& pytorch_only_options() {
  static const std::vector<std::pair<std::string, PyRef>> kOptions = {
      {"maximize", PyValue::of(false)},
      {"foreach", PyValue::none()},
      {"capturable", PyValue::of(false)},
      {"differentiable", PyValue::of(false)},
      {"fused", PyValue::none()}};
  return kOptions;
}

ShardedLayout sharded_layout(const TrainingState& state, const char* what) {
  ShardedLayout layout;
  layout.sharded = sharded_part(state);
  if (layout.sharded == nullptr) {
    throw SnapshotError(std::string(what) +
                        ": the training state has no fully_sharded or zero_optimizer; a "
                        "distributed checkpoint holds sharded state (save a plain model and "
                        "optimizer with export_checkpoint)");
  }
  const parallel::ShardedState& sharded = *layout.sharded;
  layout.names = sharded.names();
  layout.shapes = sharded.shapes();
  if (layout.names.empty()) {  // ZeRO: its parameters are the model's
    if (state.model == nullptr) {
      throw SnapshotError(std::string(what) +
                          ": a ZeroRedundancyOptimizer's parameters are named by the model; set "
                          "TrainingState::model");
    }
    std::unordered_map<const void*, std::string> name_of;
    for (const auto& item : state.model->named_parameters(/*recurse=*/true)) {
      name_of[item.value().unsafeGetTensorImpl()] = item.key();
    }
    for (const at::Tensor& p : state.zero_optimizer->parameters()) {
      const auto found = name_of.find(p.unsafeGetTensorImpl());
      if (found == name_of.end()) {
        throw SnapshotError(std::string(what) +
                            ": a parameter of the ZeroRedundancyOptimizer is none of the "
                            "model's parameters; set TrainingState::model to the model it steps");
      }
      layout.names.push_back(found->second);
      layout.shapes.push_back(p.sizes().vec());
      name_of.erase(found);
    }
    // Note [Pieces outside the optimizer]: the rest, frozen, whole.
    for (const auto& item : state.model->named_parameters(/*recurse=*/true)) {
      if (name_of.count(item.value().unsafeGetTensorImpl()) != 0) {
        layout.whole.push_back(item.key());
      }
    }
  }
  const std::vector<parallel::ShardedState::Piece> pieces = sharded.pieces();
  layout.writes_pieces = sharded.in_first_row();
  size_t j = 0;
  const auto& groups = sharded.local_optimizer().param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i, ++j) {
      const auto& piece = pieces.at(j);
      layout.pieces.push_back(
          {g, i, piece.parameter, piece.begin, piece.length, groups[g].params()[i]});
    }
  }
  for (const at::Tensor& local : sharded.unstepped_values()) {
    const auto& piece = pieces.at(j++);
    layout.pieces.push_back({0, 0, piece.parameter, piece.begin, piece.length, local, false});
  }
  return layout;
}

}  // namespace ddp::snapshot::detail
