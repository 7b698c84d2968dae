#include "multiprocess/worker_checks.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <thread>

#include "base/dtype_name.hpp"
#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::testing {
namespace {

// Rank r's value at element j. Small integers, so that every result below is
// exact even in bfloat16 (8 significant bits) for up to 4 ranks.
double value_of(int rank, int64_t j) { return rank + 1 + static_cast<double>(j % 3); }

// The closed form of reducing value_of(r, j) over ranks 0..world-1.
double reduced(ReduceOp op, int world, int64_t j, bool integral) {
  const double offset = static_cast<double>(j % 3);
  switch (op) {
    case ReduceOp::kSum:
      return world * (world + 1) / 2.0 + world * offset;
    case ReduceOp::kAverage: {
      double sum = world * (world + 1) / 2.0 + world * offset;
      return integral ? std::trunc(sum / world) : sum / world;
    }
    case ReduceOp::kMin:
      return 1 + offset;
    case ReduceOp::kMax:
      return world + offset;
    case ReduceOp::kProduct: {
      double product = 1;
      for (int r = 0; r < world; ++r) product *= r + 1 + offset;
      return product;
    }
  }
  return 0;
}

at::Tensor filled(int64_t numel, at::ScalarType dtype, const std::function<double(int64_t)>& f) {
  std::vector<double> values(numel);
  for (int64_t j = 0; j < numel; ++j) values[j] = f(j);
  return at::tensor(values, at::kDouble).to(dtype);
}

class Checker {
 public:
  explicit Checker(ProcessGroup& group) : group_(group) {}

  void expect_equal(const std::string& what, const at::Tensor& got, const at::Tensor& expected) {
    if (got.sizes() == expected.sizes() && got.scalar_type() == expected.scalar_type() &&
        at::equal(got, expected)) {
      checks_.check(what, true);
      return;
    }
    auto mismatch = (got.to(at::kDouble) != expected.to(at::kDouble)).nonzero();
    std::string where = mismatch.numel() > 0 ? " first mismatch at element " +
                                                   std::to_string(mismatch[0][0].item<int64_t>())
                                             : " (sizes or dtype differ)";
    int64_t j = mismatch.numel() > 0 ? mismatch[0][0].item<int64_t>() : 0;
    checks_.check(what, false,
                  base::detail::dtype_name(got.scalar_type()) + where + ": got " +
                      std::to_string(got.reshape(-1)[j].item<double>()) + ", expected " +
                      std::to_string(expected.reshape(-1)[j].item<double>()));
  }

  void all_reduce(at::ScalarType dtype, ReduceOp op) {
    const int64_t n = 1031;  // Odd, so that ring chunks are uneven.
    const bool integral = at::isIntegralType(dtype, false);
    at::Tensor t = filled(n, dtype, [&](int64_t j) { return value_of(group_.rank(), j); });
    group_.all_reduce(t, op);
    expect_equal(collective_check::all_reduce(op, dtype), t, filled(n, dtype, [&](int64_t j) {
                   return reduced(op, group_.size(), j, integral);
                 }));
  }

  void broadcast(at::ScalarType dtype, int root) {
    const int64_t n = 517;
    auto value = [&](int64_t j) { return 10.0 * (root + 1) + static_cast<double>(j % 7); };
    at::Tensor t = group_.rank() == root ? filled(n, dtype, value) : at::full({n}, -1, dtype);
    group_.broadcast(t.view({11, 47}), root);
    expect_equal(collective_check::broadcast(root, dtype), t, filled(n, dtype, value));
  }

  void all_gather(at::ScalarType dtype) {
    const int64_t n = 257;
    const int world = group_.size();
    at::Tensor input = filled(n, dtype, [&](int64_t j) { return 10.0 * group_.rank() + j % 5; });
    at::Tensor output = at::full({world * n}, -1, dtype);
    group_.all_gather(output, input);
    expect_equal(collective_check::all_gather(dtype), output,
                 filled(world * n, dtype, [&](int64_t j) { return 10.0 * (j / n) + (j % n) % 5; }));
  }

  void reduce_scatter(at::ScalarType dtype, ReduceOp op) {
    const int64_t chunk = 129;
    const int world = group_.size();
    const int rank = group_.rank();
    const bool integral = at::isIntegralType(dtype, false);
    at::Tensor input = filled(world * chunk, dtype, [&](int64_t j) { return value_of(rank, j); });
    at::Tensor output = at::full({chunk}, -1, dtype);
    group_.reduce_scatter(output, input, op);
    expect_equal(collective_check::reduce_scatter(op, dtype), output,
                 filled(chunk, dtype,
                        [&](int64_t k) { return reduced(op, world, rank * chunk + k, integral); }));
  }

  // Several collectives in flight at once, waited on in reverse order.
  void asynchronous(at::ScalarType dtype) {
    const int world = group_.size();
    const bool integral = at::isIntegralType(dtype, false);
    std::vector<at::Tensor> tensors;
    std::vector<Work> works;
    for (int k = 0; k < collective_check::kAsyncAllReduces; ++k) {
      tensors.push_back(
          filled(100 + k, dtype, [&](int64_t j) { return value_of(group_.rank(), j); }));
      works.push_back(group_.all_reduce_async(tensors.back(), ReduceOp::kSum));
    }
    at::Tensor gathered = at::zeros({world * 5}, dtype);
    works.push_back(group_.all_gather_async(gathered, at::full({5}, group_.rank(), dtype)));
    for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
    for (int k = 0; k < collective_check::kAsyncAllReduces; ++k) {
      expect_equal(collective_check::all_reduce_async(k, dtype), tensors[k],
                   filled(100 + k, dtype,
                          [&](int64_t j) { return reduced(ReduceOp::kSum, world, j, integral); }));
    }
    expect_equal(collective_check::all_gather_async(dtype), gathered,
                 filled(world * 5, dtype, [](int64_t j) { return static_cast<double>(j / 5); }));
    bool all_completed = true;
    for (auto& w : works) all_completed = all_completed && w.is_completed();
    checks_.check(collective_check::completed_after_wait(dtype), all_completed,
                  "a Work is not completed after wait()");
  }

  // Rank r arrives r * 100 ms late; nobody may leave before the last has
  // arrived. Every rank's worker runs on this machine, and steady_clock
  // (CLOCK_MONOTONIC) is one clock for all its processes, so each rank
  // compares the time it left with the latest arrival, which the ranks
  // exchange afterwards: causality, not a duration, so load cannot break it.
  // A barrier that did not wait would let rank 0 leave ~100 * (N - 1) ms
  // before the last rank arrived.
  void barrier() {
    using Clock = std::chrono::steady_clock;
    auto ns = [](Clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    group_.barrier();
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * group_.rank()));
    const int64_t arrived = ns(Clock::now());
    group_.barrier();
    const int64_t left = ns(Clock::now());
    at::Tensor arrivals = at::empty({group_.size()}, at::kLong);
    group_.all_gather(arrivals, at::full({1}, arrived, at::kLong));
    const int64_t last = arrivals.max().item<int64_t>();
    checks_.check(
        collective_check::kBarrier, left >= last,
        "left " + std::to_string((last - left) / 1000000) + " ms before the last rank arrived");
  }

  int run() {
    for (auto dtype : collective_dtypes()) {
      for (auto op : collective_ops()) all_reduce(dtype, op);
      for (int root = 0; root < group_.size(); ++root) broadcast(dtype, root);
      all_gather(dtype);
      for (auto op : collective_ops()) reduce_scatter(dtype, op);
      asynchronous(dtype);
    }
    barrier();
    return checks_.failed();
  }

 private:
  ProcessGroup& group_;
  NamedChecks checks_;
};

}  // namespace

int check_all_collectives(ProcessGroup& group) { return Checker(group).run(); }

}  // namespace ddp::testing
