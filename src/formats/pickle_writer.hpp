#pragma once

// Internal: a pickler of the value tree (ddp/formats/py_value.hpp) in the
// opcodes of Note [The pickle subset ddp speaks], for torch.save's data.pkl
// (src/formats/torch_file_writer.cpp) and DCP's .metadata
// (src/formats/dcp_metadata_writer.cpp), which add what each needs: tensors
// as storages, and the dataclasses of torch.distributed.checkpoint.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/formats/py_value.hpp"
#include "formats/pickle_protocol.hpp"

namespace ddp::formats::detail {

class PickleWriter {
 public:
  virtual ~PickleWriter() = default;

  /// The pickle written so far.
  const std::string& bytes() const { return out_; }

  /// PROTO `protocol`, `root`, STOP.
  void dump(const PyValue& root, uint8_t protocol = kTorchPickleProtocol);

  void op(PickleOp code) { out_.push_back(static_cast<char>(code)); }
  /// PROTO `protocol`: how a pickle starts.
  void proto(uint8_t protocol) {
    op(PickleOp::kProto);
    out_.push_back(static_cast<char>(protocol));
  }
  /// GLOBAL `module`.`name` (Python imports it when it loads the pickle).
  void global(const std::string& module, const std::string& name);
  void string(const std::string& text);
  void integer(int64_t number);
  void floating(double number);
  void tuple_of(const std::vector<int64_t>& numbers);
  /// Any value of the tree but kBytes, kGlobal and kObject; a tensor
  /// through tensor().
  /// \throws FormatError naming a value it cannot pickle.
  void value(const PyValue& v);

 protected:
  /// \throws FormatError: this pickler holds no tensors.
  virtual void tensor(const at::Tensor& t);
  template <typename T>
  void raw(T number) {  // little-endian, as pickle's fixed-size arguments are
    char bytes[sizeof(T)];
    std::memcpy(bytes, &number, sizeof(T));
    out_.append(bytes, sizeof(T));
  }

 private:
  std::string out_;
};

}  // namespace ddp::formats::detail
