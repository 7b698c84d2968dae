#include "ddp/training/flop_counter.hpp"

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <atomic>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::training {
namespace {

/// The operators counted, each with how its FLOPs follow from its inputs.
enum class Product {
  kMm,                   // (a[m,k], b[k,n])
  kAddmm,                // (self, a[m,k], b[k,n])
  kBmm,                  // (a[b,m,k], b[b,k,n])
  kBaddbmm,              // (self, a[b,m,k], b[b,k,n]); addbmm alike
  kMv,                   // (a[m,n], v[n])
  kAddmv,                // (self, a[m,n], v[n])
  kDot,                  // (a[n], b[n])
  kConvolution,          // (input, weight, bias, stride, padding, dilation, transposed, ...)
  kConvolutionBackward,  // (grad_out, input, weight, bias_sizes, stride, padding,
                         //  dilation, transposed, output_padding, groups, mask)
  kAttention,            // (q[..., L, E], k[..., S, E], v[..., S, Ev], ...)
  kAttentionBackward,    // (grad_out, q, k, v, ...)
};

const std::unordered_map<std::string_view, Product>& products() {
  static const std::unordered_map<std::string_view, Product> table = {
      {"aten::mm", Product::kMm},
      {"aten::addmm", Product::kAddmm},
      {"aten::addmm_", Product::kAddmm},
      {"aten::bmm", Product::kBmm},
      {"aten::baddbmm", Product::kBaddbmm},
      {"aten::baddbmm_", Product::kBaddbmm},
      {"aten::addbmm", Product::kBaddbmm},
      {"aten::addbmm_", Product::kBaddbmm},
      {"aten::mv", Product::kMv},
      {"aten::addmv", Product::kAddmv},
      {"aten::addmv_", Product::kAddmv},
      {"aten::dot", Product::kDot},
      {"aten::convolution", Product::kConvolution},
      {"aten::convolution_backward", Product::kConvolutionBackward},
      {"aten::_scaled_dot_product_flash_attention_for_cpu", Product::kAttention},
      {"aten::_scaled_dot_product_flash_attention", Product::kAttention},
      {"aten::_scaled_dot_product_efficient_attention", Product::kAttention},
      {"aten::_scaled_dot_product_cudnn_attention", Product::kAttention},
      {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", Product::kAttentionBackward},
      {"aten::_scaled_dot_product_flash_attention_backward", Product::kAttentionBackward},
      {"aten::_scaled_dot_product_efficient_attention_backward", Product::kAttentionBackward},
      {"aten::_scaled_dot_product_cudnn_attention_backward", Product::kAttentionBackward},
  };
  return table;
}

double numel(const c10::IValue& value) {
  return value.isTensor() ? static_cast<double>(value.toTensor().numel()) : 0.0;
}

int64_t size(const c10::IValue& value, int64_t dim) {
  if (!value.isTensor()) return 0;
  const at::Tensor& t = value.toTensor();
  return t.dim() > 0 ? t.size(dim < 0 ? dim + t.dim() : dim) : 1;
}

/// An int[] argument (SymInt[] in LibTorch 2.x, concrete on every CPU path).
std::vector<int64_t> ints(const c10::IValue& value) {
  if (value.isIntList()) return value.toIntVector();
  std::vector<int64_t> out;
  if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) out.push_back(element.toInt());
  }
  return out;
}

/// One convolution's FLOPs (forward, or one of its gradients): 2 for each
/// multiply-add of a weight element with an input window. A convolution's
/// weight is [out, in / groups, k...] and each output element takes
/// in / groups x prod(k) of them; a transposed one's is [in, out / groups,
/// k...] and each input element gives out / groups x prod(k).
double convolution_flops(const at::Tensor& input, const at::Tensor& weight,
                         const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                         const std::vector<int64_t>& dilation, bool transposed) {
  double window = static_cast<double>(weight.size(1));
  for (int64_t d = 2; d < weight.dim(); ++d) window *= static_cast<double>(weight.size(d));
  double elements = static_cast<double>(input.size(0)) * static_cast<double>(weight.size(0));
  if (transposed) {
    elements = static_cast<double>(input.numel());
  } else {
    const int64_t spatial = weight.dim() - 2;
    for (int64_t d = 0; d < spatial; ++d) {
      auto at = [&](const std::vector<int64_t>& v) {
        return v.empty() ? int64_t{0} : v[static_cast<size_t>(d) % v.size()];
      };
      const int64_t step = std::max<int64_t>(at(stride), 1);
      const int64_t dil = std::max<int64_t>(at(dilation), 1);
      const int64_t out =
          (input.size(d + 2) + 2 * at(padding) - dil * (weight.size(d + 2) - 1) - 1) / step + 1;
      elements *= static_cast<double>(std::max<int64_t>(out, 0));
    }
  }
  return 2.0 * elements * window;
}

double flops_of(Product product, c10::ArrayRef<const c10::IValue> in) {
  auto arg = [&](size_t i) -> const c10::IValue& {
    static const c10::IValue none;
    return i < in.size() ? in[i] : none;
  };
  switch (product) {
    case Product::kMm:
      return 2.0 * numel(arg(0)) * static_cast<double>(size(arg(1), -1));
    case Product::kAddmm:
      return 2.0 * numel(arg(1)) * static_cast<double>(size(arg(2), -1));
    case Product::kBmm:
      return 2.0 * numel(arg(0)) * static_cast<double>(size(arg(1), -1));
    case Product::kBaddbmm:
      return 2.0 * numel(arg(1)) * static_cast<double>(size(arg(2), -1));
    case Product::kMv:
    case Product::kDot:
      return 2.0 * numel(arg(0));
    case Product::kAddmv:
      return 2.0 * numel(arg(1));
    case Product::kConvolution:
      if (!arg(0).isTensor() || !arg(1).isTensor()) return 0;
      return convolution_flops(arg(0).toTensor(), arg(1).toTensor(), ints(arg(3)), ints(arg(4)),
                               ints(arg(5)), arg(6).isBool() && arg(6).toBool());
    case Product::kConvolutionBackward: {
      if (!arg(1).isTensor() || !arg(2).isTensor()) return 0;
      // Each of the input's and the weight's gradients costs the forward's.
      double gradients = 0;
      if (arg(10).isBoolList()) {
        const c10::List<bool> mask = arg(10).toBoolList();
        gradients = (mask.size() > 0 && mask[0] ? 1 : 0) + (mask.size() > 1 && mask[1] ? 1 : 0);
      }
      return gradients * convolution_flops(arg(1).toTensor(), arg(2).toTensor(), ints(arg(4)),
                                           ints(arg(5)), ints(arg(6)),
                                           arg(7).isBool() && arg(7).toBool());
    }
    case Product::kAttention:
    case Product::kAttentionBackward: {
      // Forward: scores q k^T (L x S x E) and their product with v (L x S x
      // Ev) for every batch and head; backward: the gradients of v, of the
      // probabilities, of q and of k, twice the forward's (the recomputed
      // scores of the flash kernels are not model FLOPs).
      const size_t q = product == Product::kAttention ? 0 : 1;
      const double e = static_cast<double>(size(arg(q), -1));
      if (e == 0) return 0;
      const double rows = numel(arg(q)) / e;  // batch x heads x L
      const double s = static_cast<double>(size(arg(q + 1), -2));
      const double ev = static_cast<double>(size(arg(q + 2), -1));
      const double forward = 2.0 * rows * s * (e + ev);
      return product == Product::kAttention ? forward : 2.0 * forward;
    }
  }
  return 0;
}

/// What the one counting FlopCounter of the process has counted.
struct Tally {
  std::mutex mutex;
  std::map<std::string, double> by_operator;
  double total = 0;
};
std::atomic<Tally*> active_tally{nullptr};

/// Counted products now running on this thread (Note [What a FlopCounter
/// counts]: only the outermost is counted).
thread_local int products_running = 0;

struct RunningProduct : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  const auto& table = products();
  const auto found = table.find(fn.name());
  if (found == table.end()) return nullptr;
  if (products_running++ == 0) {
    if (Tally* tally = active_tally.load()) {
      const double flops = flops_of(found->second, fn.inputs());
      std::lock_guard<std::mutex> lock(tally->mutex);
      tally->by_operator[found->first.data()] += flops;
      tally->total += flops;
    }
  }
  return std::make_unique<RunningProduct>();
}

void on_end(const at::RecordFunction&, at::ObserverContext* context) {
  if (context != nullptr) --products_running;
}

}  // namespace

FlopCounter::FlopCounter() {
  auto* tally = new Tally;
  Tally* expected = nullptr;
  if (!active_tally.compare_exchange_strong(expected, tally)) {
    delete tally;
    throw ConfigError(
        "FlopCounter: another FlopCounter of this process is counting; one counts at a time "
        "(destroy the first before constructing the next)");
  }
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                           .needsInputs(true)
                                           .scopes({at::RecordScope::FUNCTION}));
}

FlopCounter::~FlopCounter() {
  at::removeCallback(handle_);
  delete active_tally.exchange(nullptr);
}

double FlopCounter::flops() const {
  Tally* tally = active_tally.load();
  std::lock_guard<std::mutex> lock(tally->mutex);
  return tally->total;
}

std::map<std::string, double> FlopCounter::flops_by_operator() const {
  Tally* tally = active_tally.load();
  std::lock_guard<std::mutex> lock(tally->mutex);
  return tally->by_operator;
}

void FlopCounter::reset() {
  Tally* tally = active_tally.load();
  std::lock_guard<std::mutex> lock(tally->mutex);
  tally->by_operator.clear();
  tally->total = 0;
}

}  // namespace ddp::training
