// Gloo: the CPU backend from LibTorch's c10d.
//
// Note [Filling Gloo's gaps in LibTorch 1.13]
// Gloo there rejects ReduceOp::AVG, has no reduce-scatter and no bfloat16.
// ddp fills them without changing the backend:
//  - average: a sum, divided by the world size once the sum has arrived
//    (integers with truncation, as NCCL's integer average does);
//  - bfloat16: moved bit-for-bit as float16 (the same two bytes; Gloo 1.13
//    carries neither bfloat16 nor int16) where nothing is computed
//    (broadcast, the exchange of a 16-bit reduce-scatter) and widened to
//    float32 where values are combined, which rounds once at the end rather
//    than at every step of the ring;
//  - all-gather and reduce-scatter: ddp's own, on Gloo's worker threads
//    (Note [Gloo collectives without a full-size copy] in gloo_backend.hpp),
//    except a reduce-scatter of 16-bit floats: an all-to-all (each rank
//    receives its chunk from every peer) and a local reduction in float32.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/str.hpp"
#include "comm/backends/average.hpp"
#include "comm/backends/c10d_process_group.hpp"
#include "comm/backends/gloo_backend.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::backends {
namespace {

bool is_b_float16(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16; }

bool needs_widening(const at::Tensor& t) {
  return !base::compat::kGlooHasBFloat16 && is_b_float16(t);
}

// A bfloat16 tensor seen as float16: the same bytes, a dtype Gloo can move.
// Only copies touch it, so no bit pattern is reinterpreted arithmetically.
at::Tensor as_movable(const at::Tensor& t) { return needs_widening(t) ? t.view(at::kHalf) : t; }

// Combines the world_size chunks stacked in `received` (dim 0) into `output`.
void reduce_chunks(const at::Tensor& output, const at::Tensor& received, ReduceOp op, int size) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      output.copy_(received.sum(0));
      if (op == ReduceOp::kAverage) divide_by_world_size(output, size);
      break;
    case ReduceOp::kMin:
      output.copy_(std::get<0>(received.min(0)));
      break;
    case ReduceOp::kMax:
      output.copy_(std::get<0>(received.max(0)));
      break;
    case ReduceOp::kProduct:
      output.copy_(received.prod(0));
      break;
  }
}

// The address of the local interface that routes to `master`: peers reach
// this rank's Gloo pairs there. A UDP connect sends nothing.
std::string local_address_towards(const std::string& master) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(master.c_str(), "9", &hints, &result) != 0 || !result) {
    throw RendezvousError("cannot resolve MASTER_ADDR '" + master +
                          "' to choose the network interface for Gloo; check the host name, "
                          "or set GLOO_SOCKET_IFNAME to the interface to use.");
  }
  std::string address;
  int fd = socket(result->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (fd >= 0 && connect(fd, result->ai_addr, result->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (inet_ntop(local.ss_family, raw, text, sizeof(text))) address = text;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(result);
  if (address.empty()) {
    throw RendezvousError("no network route from this host to MASTER_ADDR '" + master +
                          "'; check the address, or set GLOO_SOCKET_IFNAME to the interface "
                          "to use.");
  }
  return address;
}

class GlooProcessGroup final : public C10dProcessGroup {
 public:
  GlooProcessGroup(const BackendContext& context, c10::intrusive_ptr<GlooBackend> backend)
      : C10dProcessGroup(context, backend, "gloo"), gloo_(*backend) {}

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    const bool widen = needs_widening(tensor);
    if (!widen && op != ReduceOp::kAverage) return C10dProcessGroup::do_all_reduce(tensor, op);
    at::Tensor buffer = widen ? tensor.to(at::kFloat) : tensor;
    const ReduceOp backend_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
    const int world = size();
    return detail::start_collective(
        info("all_reduce", tensor, op),
        [&] {
          std::vector<at::Tensor> tensors{buffer};
          c10d::AllreduceOptions options;
          options.reduceOp = to_c10d(backend_op);
          options.timeout = collective_timeout();
          return backend().allreduce(tensors, options);
        },
        [tensor, buffer, op, widen, world] {
          if (op == ReduceOp::kAverage) divide_by_world_size(buffer, world);
          if (widen) tensor.copy_(buffer);
        });
  }

  Work do_broadcast(const at::Tensor& tensor, int root) override {
    return broadcast_as(tensor, as_movable(tensor), root);
  }

  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override {
    // CUDA tensors go through c10d's path, which stages them on the host.
    if (!output.is_cpu()) return all_gather_as(input, as_movable(output), as_movable(input));
    return detail::start_collective(info("all_gather", input), [&] {
      return gloo_.all_gather_into(output.view({-1}), input.view({-1}), collective_timeout());
    });
  }

  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    const int world = size();
    if ((input.element_size() == 2 && input.is_floating_point()) || !input.is_cpu()) {
      return reduce_scatter_by_all_to_all(output, input, op);
    }
    return detail::start_collective(
        info("reduce_scatter", output, op),
        [&] {
          return gloo_.reduce_scatter_ring(output.view({-1}), input.view({-1}), op,
                                           collective_timeout());
        },
        [output, op, world] {
          if (op == ReduceOp::kAverage) divide_by_world_size(output, world);
        });
  }

 private:
  // 16-bit floats and CUDA tensors: an all-to-all of the chunks (c10d's,
  // which stages CUDA tensors on the host), combined here, 16-bit floats in
  // float32 (one rounding at the end; LibTorch 1.13's CPU kernels lack some
  // float16 reductions).
  Work reduce_scatter_by_all_to_all(const at::Tensor& output, const at::Tensor& input,
                                    ReduceOp op) {
    const int world = size();
    at::Tensor received = at::empty_like(input);
    return detail::start_collective(
        info("reduce_scatter", output, op),
        [&] {
          at::Tensor send = as_movable(input).view({-1});
          at::Tensor receive = as_movable(received).view({-1});
          std::vector<int64_t> equal_splits;  // empty: equal chunks per rank
          c10d::AllToAllOptions options;
          options.timeout = collective_timeout();
          return backend().alltoall_base(receive, send, equal_splits, equal_splits, options);
        },
        [output, received, op, world] {
          at::Tensor chunks = received.view({world, -1});
          if (received.element_size() == 2 && received.is_floating_point()) {
            chunks = chunks.to(at::kFloat);
          }
          reduce_chunks(output.view({-1}), chunks, op, world);
        });
  }

  GlooBackend& gloo_;
};

// Note [A peer lost while Gloo connects]
// Gloo's constructor connects every pair of ranks through the store. A peer
// that exits (or whose store connection breaks) after joining the rendezvous
// but before its pairs are up makes the constructor throw Gloo's or c10d's
// own error ("Connection closed by peer"), which would end the program as an
// unknown failure; it is the rendezvous that failed. The same holds for the
// groups formed after init (a DeviceMesh's, the hierarchical backend's
// leaders').
[[noreturn]] void throw_connect_error(const BackendContext& context, const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  const std::string cause = c10_error ? c10_error->what_without_backtrace() : error.what();
  throw RendezvousError(base::detail::str(
      "gloo could not connect rank ", context.topology.rank, " of ", context.topology.world_size,
      " to its peers: ", cause.substr(0, cause.find('\n')),
      ". A peer rank may have exited, or lost its connection to the store, while the ranks "
      "connected; check every rank's log."));
}

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_process_group(const BackendContext& context) {
  auto options = c10d::ProcessGroupGloo::Options::create(context.collective_timeout);
  if (!context.gloo_interface.empty()) {
    options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForInterface(context.gloo_interface));
  } else {
    const std::string address = context.topology.world_size == 1
                                    ? std::string("127.0.0.1")
                                    : local_address_towards(context.topology.master_addr);
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  }
  c10::intrusive_ptr<GlooBackend> backend;
  try {
    backend = c10::make_intrusive<GlooBackend>(context.store, context.topology.rank,
                                               context.topology.world_size, options);
  } catch (const Error&) {  // ddp's TcpStore: already named
    throw;
  } catch (const std::exception& error) {
    throw_connect_error(context, error);
  }
  return std::make_shared<GlooProcessGroup>(context, std::move(backend));
}

}  // namespace ddp::comm::backends
