#include "comm/shm/shm_checks.hpp"

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "base/dtype_name.hpp"
#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::testing {
namespace {

// Rank r's input: integers in [-5, 5], different per rank and element, so
// that sums, products (|x| <= 625 for 4 ranks) and averages of every dtype
// are exact or rounded exactly once, and equal between backends bit for bit.
// The values repeat every kPeriod elements, so inputs and closed forms are
// built from one period and tiled (cheap even at 64 MiB).
constexpr int64_t kPeriod = 11;

at::Tensor tiled(const at::Tensor& period, int64_t numel) {
  return period.repeat({(numel + kPeriod - 1) / kPeriod}).narrow(0, 0, numel).contiguous();
}

at::Tensor input_of(int rank, int64_t numel, at::ScalarType dtype) {
  at::Tensor i = at::arange(kPeriod, at::kLong);
  return tiled(((i * 7 + rank * 13) % kPeriod - 5).to(dtype), numel);
}

// The closed form: every rank's input stacked and reduced in float64.
at::Tensor expected_of(ReduceOp op, int world, int64_t numel, at::ScalarType dtype) {
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(input_of(r, kPeriod, at::kDouble));
  at::Tensor all = at::stack(inputs);
  at::Tensor result;
  switch (op) {
    case ReduceOp::kSum:
      result = all.sum(0);
      break;
    case ReduceOp::kAverage:
      result =
          at::isIntegralType(dtype, false) ? all.sum(0).div(world, "trunc") : all.sum(0) / world;
      break;
    case ReduceOp::kMin:
      result = std::get<0>(all.min(0));
      break;
    case ReduceOp::kMax:
      result = std::get<0>(all.max(0));
      break;
    case ReduceOp::kProduct:
      result = all.prod(0);
      break;
  }
  // float64 -> float32 -> 16 bits, as the backends round.
  if (dtype == at::kBFloat16 || dtype == at::kHalf) result = result.to(at::kFloat);
  return tiled(result.to(dtype), numel);
}

class Report {
 public:
  void expect_equal(const std::string& what, const at::Tensor& got, const at::Tensor& expected) {
    if (got.scalar_type() == expected.scalar_type() && got.sizes() == expected.sizes() &&
        at::equal(got, expected)) {
      checks_.check(what, true);
      return;
    }
    at::Tensor differs = (got.to(at::kDouble) != expected.to(at::kDouble)).nonzero();
    std::string where = "dtypes " + base::detail::dtype_name(got.scalar_type()) + " and " +
                        base::detail::dtype_name(expected.scalar_type()) + ", " +
                        std::to_string(got.numel()) + " and " + std::to_string(expected.numel()) +
                        " elements";
    if (differs.numel() > 0) {
      const int64_t j = differs[0][0].item<int64_t>();
      where = "first difference at element " + std::to_string(j) + ": got " +
              std::to_string(got[j].item<double>()) + ", expected " +
              std::to_string(expected[j].item<double>());
    }
    checks_.check(what, false, where);
  }
  int failed() const { return checks_.failed(); }

 private:
  NamedChecks checks_;
};

}  // namespace

int check_shm_against_gloo(ProcessGroup& gloo, ProcessGroup& shm) {
  Report report;
  const int world = shm.size();
  const int me = shm.rank();
  for (at::ScalarType dtype : collective_dtypes()) {
    for (int64_t numel : shm_sizes_for(dtype)) {
      for (ReduceOp op : collective_ops()) {
        const std::string what = shm_check::all_reduce(dtype, numel, op, world);
        at::Tensor by_gloo = input_of(me, numel, dtype);
        at::Tensor by_shm = by_gloo.clone();
        gloo.all_reduce(by_gloo, op);
        shm.all_reduce(by_shm, op);
        report.expect_equal(what + shm_check::kVersusGloo, by_shm, by_gloo);
        report.expect_equal(what + shm_check::kVersusClosedForm, by_shm,
                            expected_of(op, world, numel, dtype));
      }
      for (int root = 0; root < world; ++root) {
        at::Tensor t = me == root ? input_of(root, numel, dtype) : at::zeros({numel}, dtype);
        shm.broadcast(t, root);
        report.expect_equal(shm_check::broadcast(dtype, numel, root), t,
                            input_of(root, numel, dtype));
      }
      at::Tensor gathered = at::empty({world * numel}, dtype);
      shm.all_gather(gathered, input_of(me, numel, dtype));
      std::vector<at::Tensor> parts;
      for (int r = 0; r < world; ++r) parts.push_back(input_of(r, numel, dtype));
      report.expect_equal(shm_check::all_gather(dtype, numel), gathered, at::cat(parts));

      // Reduce-scatter moves world x numel elements: up to one slot per chunk.
      if (numel > kShmReduceScatterMaxNumel) continue;
      for (ReduceOp op : shm_reduce_scatter_ops()) {
        at::Tensor input = input_of(me, world * numel, dtype);
        at::Tensor by_shm = at::empty({numel}, dtype);
        at::Tensor by_gloo = at::empty({numel}, dtype);
        shm.reduce_scatter(by_shm, input, op);
        gloo.reduce_scatter(by_gloo, input, op);
        const std::string what = shm_check::reduce_scatter(dtype, numel, op);
        report.expect_equal(what + shm_check::kVersusGloo, by_shm, by_gloo);
        report.expect_equal(
            what + shm_check::kClosedForm, by_shm,
            expected_of(op, world, world * numel, dtype).narrow(0, me * numel, numel));
      }
    }
  }
  // A reduce-scatter whose chunks take more than one round.
  {
    const int64_t numel = shm_several_rounds_numel(world);
    at::Tensor input = input_of(me, world * numel, at::kFloat);
    at::Tensor by_shm = at::empty({numel}, at::kFloat);
    shm.reduce_scatter(by_shm, input, ReduceOp::kSum);
    report.expect_equal(
        shm_check::reduce_scatter_in_rounds(world), by_shm,
        expected_of(ReduceOp::kSum, world, world * numel, at::kFloat).narrow(0, me * numel, numel));
  }
  // 64 MiB of float32, the benchmark's size.
  const int64_t big = kShmBigNumel;
  for (ReduceOp op : shm_check::big_all_reduce_ops()) {
    at::Tensor by_gloo = input_of(me, big, at::kFloat);
    at::Tensor by_shm = by_gloo.clone();
    gloo.all_reduce(by_gloo, op);
    shm.all_reduce(by_shm, op);
    report.expect_equal(shm_check::big_all_reduce(op) + shm_check::kVersusGloo, by_shm, by_gloo);
    report.expect_equal(shm_check::big_all_reduce(op) + shm_check::kClosedForm, by_shm,
                        expected_of(op, world, big, at::kFloat));
  }
  shm.barrier();
  return report.failed();
}

int stress_collectives(ProcessGroup& group, int iterations) {
  Report report;
  const int world = group.size();
  const int me = group.rank();
  struct InFlight {
    Work work;
    at::Tensor result;
    at::Tensor expected;
    std::string what;
  };
  for (const auto& batch : stress_plan(iterations, world)) {
    std::vector<InFlight> in_flight;
    for (const StressCollective& c : batch) {
      const int64_t numel = c.numel;
      const at::ScalarType dtype = c.dtype;
      if (c.kind == "all_reduce") {
        at::Tensor t = input_of(me, numel, dtype);
        Work w = group.all_reduce_async(t, ReduceOp::kSum);
        in_flight.push_back(
            {std::move(w), t, expected_of(ReduceOp::kSum, world, numel, dtype), c.name});
      } else if (c.kind == "broadcast") {
        at::Tensor t = me == c.root ? input_of(c.root, numel, dtype) : at::zeros({numel}, dtype);
        Work w = group.broadcast_async(t, c.root);
        in_flight.push_back({std::move(w), t, input_of(c.root, numel, dtype), c.name});
      } else {
        at::Tensor out = at::empty({world * numel}, dtype);
        Work w = group.all_gather_async(out, input_of(me, numel, dtype));
        std::vector<at::Tensor> parts;
        for (int r = 0; r < world; ++r) parts.push_back(input_of(r, numel, dtype));
        in_flight.push_back({std::move(w), out, at::cat(parts), c.name});
      }
    }
    for (auto& f : in_flight) {
      f.work.wait();
      report.expect_equal(f.what, f.result, f.expected);
    }
  }
  return report.failed();
}

}  // namespace ddp::testing
