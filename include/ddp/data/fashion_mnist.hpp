#pragma once

/// \file fashion_mnist.hpp
/// The Fashion-MNIST data set (and MNIST, whose files have the same names
/// and format) as a LibTorch dataset.
///
/// \code
///   ddp::data::FashionMnist train;  // /usr/share/datasets/fashion-mnist
///   auto example = train.get(0);    // data [1,28,28] float32, target int64
/// \endcode

#include <torch/arg.h>
#include <torch/data/datasets/base.h>
#include <torch/data/example.h>

#include <cstddef>
#include <string>

#include "ddp/data/errors.hpp"
#include "ddp/data/idx.hpp"

namespace ddp::data {

/// How FashionMnist turns pixels into inputs.
struct FashionMnistOptions {
  /// Subtract `mean` and divide by `stddev` after scaling pixels to [0,1].
  TORCH_ARG(bool, normalize) = true;
  /// Pixel mean of Fashion-MNIST's training images in [0,1] (MNIST: 0.1307).
  TORCH_ARG(double, mean) = 0.2860;
  /// Pixel standard deviation of the same (MNIST: 0.3081).
  TORCH_ARG(double, stddev) = 0.3530;
};

/// Fashion-MNIST (or MNIST) loaded into memory from its four idx files.
/// Images are float32 [N,1,H,W] (28x28 for both data sets), scaled to [0,1]
/// and, by default, normalized; labels are int64 [N] in 0..9.
class FashionMnist : public torch::data::datasets::Dataset<FashionMnist> {
 public:
  /// Which half of the data set.
  enum class Split {
    kTrain,  ///< train-images-idx3-ubyte / train-labels-idx1-ubyte (60000)
    kTest,   ///< t10k-images-idx3-ubyte / t10k-labels-idx1-ubyte (10000)
  };

  /// The Debian package's location of Fashion-MNIST.
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";

  /// Reads the split's images and labels from `root`, each from
  /// `<name>.gz` or, when absent, the uncompressed `<name>`.
  /// \throws ddp::DataError when a file is missing (naming the names tried),
  ///   malformed (see read_idx()), not uint8 images [N,H,W] / labels [N], has
  ///   a label outside 0..9, or when images and labels differ in count
  ///   (naming both files and counts); ddp::ConfigError for a stddev <= 0.
  explicit FashionMnist(const std::string& root = kDefaultRoot, Split split = Split::kTrain,
                        FashionMnistOptions options = {});

  /// Image `index` ([1,H,W] float32, a view into images()) and its label
  /// (an int64 scalar).
  /// \throws ddp::InvalidArgumentError when index >= size().
  torch::data::Example<> get(size_t index) override;

  /// The number of examples.
  torch::optional<size_t> size() const override;

  /// All images, [N,1,H,W] float32.
  const torch::Tensor& images() const { return images_; }
  /// All labels, [N] int64.
  const torch::Tensor& labels() const { return labels_; }
  /// The split that was loaded.
  Split split() const { return split_; }

 private:
  torch::Tensor images_;
  torch::Tensor labels_;
  Split split_;
};

}  // namespace ddp::data
