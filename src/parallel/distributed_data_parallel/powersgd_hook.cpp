#include "ddp/parallel/powersgd_hook.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <string>
#include <utility>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel {
namespace {

// A compressed gradient seen as an n x m matrix, approximated at rank r.
struct Matrix {
  at::Tensor grad;  // the view into the bucket
  int64_t n = 0, m = 0, r = 0;
  int64_t p_offset = 0, q_offset = 0;  // in the packed factors
};

// Factors are computed in float32 for 16-bit buckets (no 16-bit QR on CPU).
at::ScalarType factor_type(at::ScalarType dtype) {
  return dtype == at::kDouble || dtype == at::kFloat ? dtype : at::kFloat;
}

// Where `view` starts inside `buffer`, in elements.
int64_t offset_in(const at::Tensor& buffer, const at::Tensor& view) {
  return view.storage_offset() - buffer.storage_offset();
}

// An orthonormal basis of P's columns, n x r (r <= n).
at::Tensor orthonormalize(const at::Tensor& p) { return std::get<0>(at::linalg_qr(p, "reduced")); }

}  // namespace

PowerSgdHook::PowerSgdHook(PowerSgdOptions options)
    : options_(options), generator_(at::detail::createCPUGenerator(options.random_seed())) {
  if (options_.matrix_approximation_rank() < 1) {
    throw ConfigError(base::detail::str("PowerSgdHook: matrix_approximation_rank is ",
                                        options_.matrix_approximation_rank(),
                                        "; it must be at least 1 (PyTorch's default is 1)."));
  }
  if (!(options_.min_compression_rate() >= 0)) {
    throw ConfigError(base::detail::str("PowerSgdHook: min_compression_rate is ",
                                        options_.min_compression_rate(),
                                        "; it must be 0 or more (PyTorch's default is 2)."));
  }
  if ((options_.use_error_feedback() || options_.warm_start()) && options_.start_iteration() < 2) {
    throw ConfigError(base::detail::str(
        "PowerSgdHook: start_iteration is ", options_.start_iteration(),
        " with error feedback or warm start; it must be at least 2, because "
        "DistributedDataParallel regroups its buckets after the first iteration and the per-bucket "
        "state would be lost. Start later, or turn both off."));
  }
}

at::Tensor PowerSgdHook::error(size_t index) const {
  const auto found = states_.find(index);
  return found == states_.end() ? at::Tensor() : found->second.error;
}

PowerSgdHook::BucketState& PowerSgdHook::state_for(const GradBucket& bucket) {
  std::vector<std::vector<int64_t>> shapes;
  for (const at::Tensor& g : bucket.gradients) shapes.push_back(g.sizes().vec());
  BucketState& state = states_[bucket.index];
  if (state.shapes != shapes) state = BucketState{std::move(shapes), at::Tensor(), {}};
  return state;
}

at::Tensor PowerSgdHook::random_factor(int64_t rows, int64_t rank,
                                       const at::TensorOptions& options) {
  return at::randn({rows, rank}, generator_, at::TensorOptions().dtype(at::kFloat)).to(options);
}

Work PowerSgdHook::reduce(ProcessGroup& group, const GradBucket& bucket) {
  const bool compress = iteration_ >= options_.start_iteration();
  if (bucket.is_last) ++iteration_;
  if (compress) return reduce_compressed(group, bucket);
  communicated_elements_ += bucket.buffer.numel();
  bucket.buffer.div_(group.size());
  return group.all_reduce_async(bucket.buffer, ReduceOp::kSum);
}

Work PowerSgdHook::reduce_compressed(ProcessGroup& group, const GradBucket& bucket) {
  BucketState& state = state_for(bucket);
  const at::Tensor& buffer = bucket.buffer;
  const double world = group.size();
  if (options_.use_error_feedback()) {
    if (!state.error.defined()) state.error = at::zeros_like(buffer);
    buffer.add_(state.error);
  }

  std::vector<Matrix> matrices;
  std::vector<at::Tensor> plain;
  int64_t p_total = 0, q_total = 0;
  for (const at::Tensor& g : bucket.gradients) {
    Matrix matrix;
    if (g.dim() >= 2 && g.numel() > 0) {
      matrix.n = g.size(0);
      matrix.m = g.numel() / matrix.n;
      matrix.r = std::min({options_.matrix_approximation_rank(), matrix.n, matrix.m});
      const double sent = static_cast<double>(matrix.n + matrix.m) * static_cast<double>(matrix.r);
      if (sent * options_.min_compression_rate() < static_cast<double>(matrix.n * matrix.m)) {
        matrix.grad = g;
        matrix.p_offset = p_total;
        matrix.q_offset = q_total;
        p_total += matrix.n * matrix.r;
        q_total += matrix.m * matrix.r;
        matrices.push_back(matrix);
        continue;
      }
    }
    plain.push_back(g);
  }

  // The uncompressed tensors: one averaging all-reduce of their copy.
  at::Tensor plain_flat;
  Work plain_work;
  if (!plain.empty()) {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& g : plain) flat.push_back(g.reshape({-1}));
    plain_flat = at::cat(flat).div_(world);
    plain_work = group.all_reduce_async(plain_flat, ReduceOp::kSum);
    communicated_elements_ += plain_flat.numel();
  }
  auto copy_plain_back = [plain, plain_flat, plain_work]() mutable {
    plain_work.wait();
    int64_t offset = 0;
    for (const at::Tensor& g : plain) {
      g.copy_(plain_flat.narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
  };
  if (matrices.empty()) return Work().then(copy_plain_back);

  // P = M Q for every compressed gradient, packed and all-reduced.
  const at::TensorOptions factor_options =
      buffer.options().dtype(factor_type(buffer.scalar_type()));
  if (!options_.warm_start() || state.q.size() != matrices.size()) {
    state.q.clear();
    for (const Matrix& matrix : matrices) {
      state.q.push_back(random_factor(matrix.m, matrix.r, factor_options));
    }
  }
  at::Tensor p_flat = at::empty({p_total}, factor_options);
  for (size_t k = 0; k < matrices.size(); ++k) {
    const Matrix& matrix = matrices[k];
    at::Tensor p =
        p_flat.narrow(0, matrix.p_offset, matrix.n * matrix.r).view({matrix.n, matrix.r});
    at::mm_out(p, matrix.grad.reshape({matrix.n, matrix.m}).to(factor_options.dtype()), state.q[k]);
  }
  Work p_work = group.all_reduce_async(p_flat, ReduceOp::kSum);
  communicated_elements_ += p_total;

  // Note [PowerSGD's second collective]
  return p_work.then([this, &group, &state, matrices, p_flat, q_total, world, buffer,
                      factor_options, copy_plain_back]() mutable {
    copy_plain_back();
    std::vector<at::Tensor> ps;
    at::Tensor q_flat = at::empty({q_total}, factor_options);
    for (const Matrix& matrix : matrices) {
      at::Tensor p = orthonormalize(
          p_flat.narrow(0, matrix.p_offset, matrix.n * matrix.r).view({matrix.n, matrix.r}));
      at::Tensor q =
          q_flat.narrow(0, matrix.q_offset, matrix.m * matrix.r).view({matrix.m, matrix.r});
      at::mm_out(q, matrix.grad.reshape({matrix.n, matrix.m}).to(factor_options.dtype()).t(), p);
      ps.push_back(std::move(p));
    }
    group.all_reduce(q_flat, ReduceOp::kSum);
    communicated_elements_ += q_total;
    q_flat.div_(world);
    for (size_t k = 0; k < matrices.size(); ++k) {
      const Matrix& matrix = matrices[k];
      at::Tensor q =
          q_flat.narrow(0, matrix.q_offset, matrix.m * matrix.r).view({matrix.m, matrix.r});
      at::Tensor approx = ps[k].mm(q.t()).view(matrix.grad.sizes());
      if (options_.use_error_feedback()) {
        state.error.narrow(0, offset_in(buffer, matrix.grad), matrix.grad.numel())
            .view(matrix.grad.sizes())
            .copy_(matrix.grad - approx.to(matrix.grad.scalar_type()));
      }
      matrix.grad.copy_(approx);
      if (options_.warm_start()) state.q[k].copy_(q);
    }
  });
}

}  // namespace ddp::parallel
