#include "comm/backends/gloo_backend.hpp"

#include <gloo/allgather.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ddp::comm::backends {
namespace {

// The slots of ddp's own ring, apart from those of Gloo's collectives (which
// use small prefixes) and of c10d's send/recv (prefix 0).
constexpr uint8_t kReduceScatterSlotPrefix = 0x64;

// A collective run on the backend's worker thread (AsyncWork::execute).
//
// Note [A collective lets go of its tensors]
// The work drops its input and output as its collective ends, before
// wait() returns, and gives AsyncWork no outputs to hold (nothing of ddp
// reads a work's result()): the worker thread releases a finished work
// only some time after completing it, and FSDP gives a reduction's full
// gradient back to its buffer pool when wait() returns, for the next
// unit's gradient to take. Held past wait(), that buffer was still taken
// when the next one was asked for, and every backward kept a fourth
// unit-sized buffer (Note [Buffers kept between steps]): 50 MB a rank on
// benchmarks/fsdp_transformer_bench.cpp at width 1024.
class DirectWork : public c10d::ProcessGroupGloo::AsyncWork {
 public:
  DirectWork(const at::Tensor& output, const at::Tensor& input,
             std::shared_ptr<gloo::Context> context, uint32_t tag,
             std::chrono::milliseconds timeout, const char* title)
      : AsyncWork(DDP_GLOO_ASYNC_WORK_ARGS(std::vector<std::vector<at::Tensor>>{}, UNKNOWN, title)),
        output_(output),
        input_(input),
        context_(std::move(context)),
        tag_(tag),
        timeout_(timeout) {}

  void run() final {
    run_collective();
    output_ = at::Tensor();
    input_ = at::Tensor();
  }

 protected:
  virtual void run_collective() = 0;

  at::Tensor output_;
  at::Tensor input_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_;
  std::chrono::milliseconds timeout_;
};

class AllGatherWork final : public DirectWork {
 public:
  using DirectWork::DirectWork;

  void run_collective() override {
    if (output_.nbytes() == 0) return;
    gloo::AllgatherOptions options(context_);
    options.setInput(static_cast<uint8_t*>(input_.data_ptr()), input_.nbytes());
    options.setOutput(static_cast<uint8_t*>(output_.data_ptr()), output_.nbytes());
    options.setTag(tag_);
    options.setTimeout(timeout_);
    gloo::allgather(options);
  }
};

// `into` = `into` op `other`, element-wise (kAverage sums).
void combine(at::Tensor into, const at::Tensor& other, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      into.add_(other);
      break;
    case ReduceOp::kMin:
      at::minimum_out(into, into, other);
      break;
    case ReduceOp::kMax:
      at::maximum_out(into, into, other);
      break;
    case ReduceOp::kProduct:
      into.mul_(other);
      break;
  }
}

class ReduceScatterWork final : public DirectWork {
 public:
  ReduceScatterWork(const at::Tensor& output, const at::Tensor& input, ReduceOp op,
                    std::shared_ptr<RingScratch> scratch, std::shared_ptr<gloo::Context> context,
                    uint32_t tag, std::chrono::milliseconds timeout)
      : DirectWork(output, input, std::move(context), tag, timeout, "ddp:reduce_scatter_ring"),
        op_(op),
        scratch_(std::move(scratch)) {}

  // Step s sends the partial result for chunk (rank - s - 1) to the right
  // and receives the left's partial for chunk (rank - s - 2), to which this
  // rank adds its own; after N - 1 steps the chunk received is this rank's.
  // The steps receive into the output and one scratch chunk by turns, the
  // last into the output.
  void run_collective() override {
    at::NoGradGuard no_grad;
    const int size = context_->size;
    const int rank = context_->rank;
    const at::Tensor output = output_.detach();
    const at::Tensor input = input_.detach();
    if (size == 1 || output.numel() == 0) {
      output.copy_(input.view(output.sizes()));
      return;
    }
    const int64_t chunk = output.numel();
    auto own = [&](int index) {
      return input.narrow(0, ((index % size) + size) % size * chunk, chunk);
    };
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag_);
    const int right = (rank + 1) % size;
    const int left = (rank + size - 1) % size;
    const at::Tensor scratch = size > 2 ? scratch_->take(chunk, output.options()) : at::Tensor();
    at::Tensor send = own(rank - 1);
    for (int step = 0; step < size - 1; ++step) {
      const at::Tensor receive = (size - 2 - step) % 2 == 0 ? output : scratch;
      auto outgoing = context_->createUnboundBuffer(send.data_ptr(), send.nbytes());
      auto incoming = context_->createUnboundBuffer(receive.data_ptr(), receive.nbytes());
      incoming->recv(left, slot);
      outgoing->send(right, slot);
      if (!incoming->waitRecv(timeout_) || !outgoing->waitSend(timeout_)) {
        throw std::runtime_error("ring reduce-scatter step " + std::to_string(step) +
                                 " was aborted");
      }
      combine(receive, own(rank - step - 2), op_);
      send = receive;
    }
  }

 private:
  ReduceOp op_;
  std::shared_ptr<RingScratch> scratch_;
};

}  // namespace

base::compat::WorkPtr GlooBackend::all_gather_into(const at::Tensor& output,
                                                   const at::Tensor& input,
                                                   std::chrono::milliseconds timeout) {
  const uint32_t tag = nextTag();
  auto work = c10::make_intrusive<AllGatherWork>(output, input, getContext(tag), tag, timeout,
                                                 "ddp:all_gather_into");
  enqueue(work);
  return work;
}

base::compat::WorkPtr GlooBackend::reduce_scatter_ring(const at::Tensor& output,
                                                       const at::Tensor& input, ReduceOp op,
                                                       std::chrono::milliseconds timeout) {
  const uint32_t tag = nextTag();
  auto work = c10::make_intrusive<ReduceScatterWork>(output, input, op, scratch_, getContext(tag),
                                                     tag, timeout);
  enqueue(work);
  return work;
}

}  // namespace ddp::comm::backends
