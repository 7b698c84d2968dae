// PickleWriter (src/formats/pickle_writer.hpp): the value tree in the
// opcodes Python's pickle would choose for it at protocol 2.

#include "formats/pickle_writer.hpp"

#include <algorithm>

#include "ddp/formats/errors.hpp"

namespace ddp::formats::detail {

namespace {
using Kind = PyValue::Kind;
// Python's pickle batches APPENDS and SETITEMS by this many items.
constexpr size_t kPickleBatch = 1000;
}  // namespace

void PickleWriter::dump(const PyValue& root, uint8_t protocol) {
  proto(protocol);
  value(root);
  op(PickleOp::kStop);
}

void PickleWriter::global(const std::string& module, const std::string& name) {
  op(PickleOp::kGlobal);
  out_.append(module).push_back('\n');
  out_.append(name).push_back('\n');
}

void PickleWriter::string(const std::string& text) {
  op(PickleOp::kBinUnicode);
  raw(static_cast<uint32_t>(text.size()));
  out_ += text;
}

void PickleWriter::integer(int64_t number) {
  if (number >= 0 && number < 256) {
    op(PickleOp::kBinInt1);
    out_.push_back(static_cast<char>(number));
  } else if (number >= 0 && number < 65536) {
    op(PickleOp::kBinInt2);
    raw(static_cast<uint16_t>(number));
  } else if (number >= INT32_MIN && number <= INT32_MAX) {
    op(PickleOp::kBinInt);
    raw(static_cast<int32_t>(number));
  } else {  // LONG1: little-endian two's complement, 8 bytes suffice
    op(PickleOp::kLong1);
    out_.push_back(8);
    raw(number);
  }
}

void PickleWriter::floating(double number) {  // BINFLOAT's argument is big-endian
  op(PickleOp::kBinFloat);
  uint64_t bits;
  std::memcpy(&bits, &number, sizeof bits);
  for (int shift = 56; shift >= 0; shift -= 8) out_.push_back(static_cast<char>(bits >> shift));
}

void PickleWriter::tuple_of(const std::vector<int64_t>& numbers) {
  std::vector<PyRef> items;
  for (int64_t n : numbers) items.push_back(PyValue::of(n));
  value(*PyValue::tuple(std::move(items)));
}

void PickleWriter::tensor(const at::Tensor& /*t*/) {
  throw FormatError("cannot pickle a tensor outside torch.save's archive");
}

void PickleWriter::value(const PyValue& v) {
  switch (v.kind) {
    case Kind::kNone:
      return op(PickleOp::kNone);
    case Kind::kBool:
      return op(v.boolean ? PickleOp::kNewTrue : PickleOp::kNewFalse);
    case Kind::kInt:
      return integer(v.integer);
    case Kind::kFloat:
      return floating(v.floating);
    case Kind::kString:
      return string(v.text);
    case Kind::kTensor:
      return tensor(v.tensor);
    case Kind::kTuple: {
      static const PickleOp kSmall[] = {PickleOp::kEmptyTuple, PickleOp::kTuple1, PickleOp::kTuple2,
                                        PickleOp::kTuple3};
      if (v.items.size() > 3) op(PickleOp::kMark);
      for (const auto& item : v.items) value(*item);
      return op(v.items.size() > 3 ? PickleOp::kTuple : kSmall[v.items.size()]);
    }
    case Kind::kList:
      op(PickleOp::kEmptyList);
      for (size_t start = 0; start < v.items.size(); start += kPickleBatch) {
        op(PickleOp::kMark);
        for (size_t i = start; i < std::min(v.items.size(), start + kPickleBatch); ++i) {
          value(*v.items[i]);
        }
        op(PickleOp::kAppends);
      }
      return;
    case Kind::kDict:
      op(PickleOp::kEmptyDict);
      for (size_t start = 0; start < v.entries.size(); start += kPickleBatch) {
        op(PickleOp::kMark);
        for (size_t i = start; i < std::min(v.entries.size(), start + kPickleBatch); ++i) {
          value(*v.entries[i].first);
          value(*v.entries[i].second);
        }
        op(PickleOp::kSetItems);
      }
      return;
    case Kind::kBytes:
    case Kind::kGlobal:
    case Kind::kObject:
      break;
  }
  throw FormatError("cannot export a value of Python type " + v.type_name() +
                    " into a torch.save file");
}

}  // namespace ddp::formats::detail
