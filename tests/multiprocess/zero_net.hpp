#pragma once

// The model of the ZeroRedundancyOptimizer scenarios (zero_checks.cpp,
// zero_snapshot_checks.cpp), and what each rank owns of it.

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ddp::testing {

/// 8*16 + 16 + 16*4 + 4 = 212 trained elements, so chunks of 212 / N cut
/// parameters in the middle; `spare` (20 elements, registered last) never
/// gets a gradient.
struct ZeroNetImpl : torch::nn::Module {
  ZeroNetImpl()
      : hidden(register_module("hidden", torch::nn::Linear(8, 16))),
        out(register_module("out", torch::nn::Linear(16, 4))),
        spare(register_module("spare", torch::nn::Linear(4, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return out->forward(torch::tanh(hidden->forward(x))); }
  torch::nn::Linear hidden, out, spare;
};
TORCH_MODULE(ZeroNet);

/// A bucket cap of 256 bytes, which cuts ZeroNet in two buckets.
constexpr double kTwoBucketsCapMb = 256.0 / (1024 * 1024);

/// ZeroNet's buckets under the default cap (one of all 232 elements) and
/// under kTwoBucketsCapMb (spare and out: 88 elements; hidden: 144).
inline std::vector<int64_t> zero_net_buckets(bool two) {
  return two ? std::vector<int64_t>{88, 144} : std::vector<int64_t>{232};
}

/// What rank `rank` of `world` owns of ZeroNet: chunk r, of ceil(E / world)
/// elements, of each bucket of E elements. Buckets take the parameters from
/// the last registered to the first, so `spare`'s 20 elements open the
/// first bucket; `trained` leaves them out (they never get state).
struct ZeroNetShare {
  int64_t owned = 0;
  int64_t trained = 0;
};
inline ZeroNetShare zero_net_share(int rank, int world, const std::vector<int64_t>& buckets) {
  constexpr int64_t kSpare = 20;
  ZeroNetShare share;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int64_t chunk = (buckets[b] + world - 1) / world;
    const int64_t lo = rank * chunk, hi = std::min(lo + chunk, buckets[b]);
    if (hi <= lo) continue;
    share.owned += hi - lo;
    share.trained += hi - lo;
    if (b == 0) share.trained -= std::max<int64_t>(0, std::min(hi, kSpare) - lo);
  }
  return share;
}

}  // namespace ddp::testing
