#pragma once

/// \file output_tensors.hpp
/// How DistributedDataParallel finds the tensors in a forward's output, and
/// the customisation point for a type of your own.
///
/// \code
///   ddp::DistributedDataParallel lstm(torch::nn::LSTM(torch::nn::LSTMOptions(3, 5)), group);
///   using LstmOutput = std::tuple<torch::Tensor, std::tuple<torch::Tensor, torch::Tensor>>;
///   auto [output, state] = lstm->forward<LstmOutput>(torch::randn({7, 2, 3}));
/// \endcode
///
/// A struct of your own is found through a specialization, at namespace
/// scope in ddp::parallel:
///
///     struct Prediction { torch::Tensor logits, auxiliary_loss; int64_t steps; };
///     template <>
///     struct ddp::parallel::OutputTensors<Prediction> {
///       static void collect(const Prediction& p, std::vector<at::Tensor>& tensors) {
///         tensors.push_back(p.logits);
///         tensors.push_back(p.auxiliary_loss);
///       }
///     };
///     auto prediction = model->forward<Prediction>(x);

#include <ATen/core/Tensor.h>

#include <array>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ddp::parallel {

// Note [Finding the tensors in an output]
// PyTorch's DDP walks a forward's output (tensors, lists, tuples, dicts) to
// find every tensor the coming backward may start from. ddp needs the same:
// a backward that reaches any of them ends the iteration (the reducer
// hooks each one, Note [The end of backward]), and a parameter whose
// gradient did not arrive by then is unused. C++ has no reflection, so the
// walk is a trait: OutputTensors<T>::collect appends T's tensors. The
// standard containers are covered below; a struct of your own gets a
// specialization (the file's example). A type with no specialization is a
// compile-time error naming this trait, never a silent miss.

/// Appends the tensors found in an output of type T to `tensors`;
/// specialize it for an output type of your own.
template <typename T, typename Enable = void>
struct OutputTensors {
  static_assert(
      sizeof(T) == 0,
      "ddp: DistributedDataParallel cannot find the tensors in this forward output "
      "type; specialize ddp::parallel::OutputTensors<YourType> with a static "
      "collect(const YourType&, std::vector<at::Tensor>&) (ddp/parallel/output_tensors.hpp)");
};

/// The tensors of `output`, appended to `tensors` (undefined tensors left out).
template <typename T>
void collect_output_tensors(const T& output, std::vector<at::Tensor>& tensors) {
  OutputTensors<T>::collect(output, tensors);
}

template <>
struct OutputTensors<at::Tensor> {
  static void collect(const at::Tensor& output, std::vector<at::Tensor>& tensors) {
    if (output.defined()) tensors.push_back(output);
  }
};

/// Numbers, enums and strings hold no tensor (a step count beside the logits).
template <typename T>
struct OutputTensors<T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>> {
  static void collect(const T& /*output*/, std::vector<at::Tensor>& /*tensors*/) {}
};
template <>
struct OutputTensors<std::string> {
  static void collect(const std::string& /*output*/, std::vector<at::Tensor>& /*tensors*/) {}
};

template <typename... Elements>
struct OutputTensors<std::tuple<Elements...>> {
  static void collect(const std::tuple<Elements...>& output, std::vector<at::Tensor>& tensors) {
    std::apply([&](const auto&... element) { (collect_output_tensors(element, tensors), ...); },
               output);
  }
};

template <typename First, typename Second>
struct OutputTensors<std::pair<First, Second>> {
  static void collect(const std::pair<First, Second>& output, std::vector<at::Tensor>& tensors) {
    collect_output_tensors(output.first, tensors);
    collect_output_tensors(output.second, tensors);
  }
};

template <typename Element>
struct OutputTensors<std::vector<Element>> {
  static void collect(const std::vector<Element>& output, std::vector<at::Tensor>& tensors) {
    for (const auto& element : output) collect_output_tensors(element, tensors);
  }
};

template <typename Element, size_t kSize>
struct OutputTensors<std::array<Element, kSize>> {
  static void collect(const std::array<Element, kSize>& output, std::vector<at::Tensor>& tensors) {
    for (const auto& element : output) collect_output_tensors(element, tensors);
  }
};

template <typename Element>
struct OutputTensors<std::optional<Element>> {
  static void collect(const std::optional<Element>& output, std::vector<at::Tensor>& tensors) {
    if (output) collect_output_tensors(*output, tensors);
  }
};

/// A map's values, in the map's order (the keys hold no tensor).
template <typename Key, typename Value>
struct OutputTensors<std::map<Key, Value>> {
  static void collect(const std::map<Key, Value>& output, std::vector<at::Tensor>& tensors) {
    for (const auto& [key, value] : output) collect_output_tensors(value, tensors);
  }
};
template <typename Key, typename Value>
struct OutputTensors<std::unordered_map<Key, Value>> {
  static void collect(const std::unordered_map<Key, Value>& output,
                      std::vector<at::Tensor>& tensors) {
    for (const auto& [key, value] : output) collect_output_tensors(value, tensors);
  }
};

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp
