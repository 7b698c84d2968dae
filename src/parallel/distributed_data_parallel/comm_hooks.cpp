#include <ATen/ATen.h>

#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/comm_hook.hpp"

namespace ddp::parallel {
namespace {

class AllReduceHook final : public CommHook {
 public:
  Work reduce(ProcessGroup& group, const GradBucket& bucket) override {
    // Dividing first keeps large sums in range and lets the backend add.
    bucket.buffer.div_(group.size());
    return group.all_reduce_async(bucket.buffer, ReduceOp::kSum);
  }
  std::string name() const override { return "allreduce"; }
};

// Communicates in a 16-bit type and writes the average back into the
// bucket's own dtype once the reduction has arrived.
class CompressHook final : public CommHook {
 public:
  CompressHook(at::ScalarType wire_type, std::string name)
      : wire_type_(wire_type), name_(std::move(name)) {}

  Work reduce(ProcessGroup& group, const GradBucket& bucket) override {
    if (bucket.buffer.scalar_type() == wire_type_) return AllReduceHook().reduce(group, bucket);
    at::Tensor compressed = bucket.buffer.div(group.size()).to(wire_type_);
    return group.all_reduce_async(compressed, ReduceOp::kSum)
        .then([buffer = bucket.buffer, compressed] { buffer.copy_(compressed); });
  }
  std::string name() const override { return name_; }

 private:
  at::ScalarType wire_type_;
  std::string name_;
};

}  // namespace

std::shared_ptr<CommHook> all_reduce_hook() { return std::make_shared<AllReduceHook>(); }

std::shared_ptr<CommHook> fp16_compress_hook() {
  return std::make_shared<CompressHook>(at::kHalf, "fp16_compress");
}

std::shared_ptr<CommHook> bf16_compress_hook() {
  return std::make_shared<CompressHook>(at::kBFloat16, "bf16_compress");
}

}  // namespace ddp::parallel
