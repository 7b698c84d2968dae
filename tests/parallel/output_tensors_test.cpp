// Note [Finding the tensors in an output]: collect_output_tensors finds every
// defined tensor of an output, in order, through the standard containers and
// a user's specialization.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ddp/parallel/output_tensors.hpp"

namespace ddp::testing {
struct TwoHeads {
  torch::Tensor logits;
  std::vector<torch::Tensor> extras;
  double temperature = 1.0;
};
}  // namespace ddp::testing

template <>
struct ddp::parallel::OutputTensors<ddp::testing::TwoHeads> {
  static void collect(const ddp::testing::TwoHeads& heads, std::vector<at::Tensor>& tensors) {
    collect_output_tensors(heads.logits, tensors);
    collect_output_tensors(heads.extras, tensors);
  }
};

namespace ddp::testing {
namespace {

// The tensors found, as their first elements (each tensor holds its index).
template <typename T>
std::vector<int64_t> found(const T& output) {
  std::vector<at::Tensor> tensors;
  collect_output_tensors(output, tensors);
  std::vector<int64_t> values;
  for (const auto& t : tensors) values.push_back(t.item<int64_t>());
  return values;
}

torch::Tensor t(int64_t value) { return torch::tensor(value); }

TEST(CoreOutputTensors, FindsEveryTensorOfNestedContainersInOrder) {
  using Nested = std::tuple<torch::Tensor, std::tuple<torch::Tensor, torch::Tensor>>;
  EXPECT_EQ(found(Nested{t(0), {t(1), t(2)}}), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(found(std::pair<int, torch::Tensor>{7, t(3)}), (std::vector<int64_t>{3}));
  EXPECT_EQ(found(std::vector<torch::Tensor>{t(4), torch::Tensor(), t(5)}),
            (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(found(std::map<std::string, torch::Tensor>{{"b", t(7)}, {"a", t(6)}}),
            (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(found(std::optional<torch::Tensor>()), std::vector<int64_t>{});
  EXPECT_EQ(found(std::array<std::optional<torch::Tensor>, 2>{t(8), std::nullopt}),
            (std::vector<int64_t>{8}));
}

TEST(CoreOutputTensors, FindsTheTensorsOfAUserStructThroughItsSpecialization) {
  TwoHeads heads{t(1), {t(2), t(3)}, 0.5};
  EXPECT_EQ(found(std::make_tuple(heads, std::string("label"), t(4))),
            (std::vector<int64_t>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace ddp::testing
