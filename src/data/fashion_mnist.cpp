// Fashion-MNIST / MNIST from their idx files.

#include "ddp/data/fashion_mnist.hpp"
#include "base/str.hpp"
#include "ddp/data/errors.hpp"

#include <torch/torch.h>

#include <sys/stat.h>
#include <sstream>

namespace ddp::data {
namespace {

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// The gzipped name as distributed, else the name after `gunzip`.
std::string find_file(const std::string& root, const std::string& name) {
  const std::string base = root.empty() || root.back() == '/' ? root + name : root + "/" + name;
  for (const std::string& candidate : {base + ".gz", base})
    if (is_file(candidate)) return candidate;
  throw DataError("Fashion-MNIST file '" + name + "' not found in '" + root + "' (tried '" + base +
                  ".gz' and '" + base +
                  "'). Install the Debian package that provides it, or point root at a "
                  "directory holding the four (Fashion-)MNIST idx files");
}

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << t.scalar_type();
  return out.str();
}

}  // namespace

FashionMnist::FashionMnist(const std::string& root, Split split, FashionMnistOptions options)
    : split_(split) {
  if (options.normalize() && !(options.stddev() > 0))
    throw ConfigError(base::detail::str("FashionMnistOptions::stddev is ", options.stddev(),
                                        ", it must be positive. Use the data set's pixel standard "
                                        "deviation (0.3530 for Fashion-MNIST)"));
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte");

  torch::Tensor images = read_idx(images_path);
  if (images.scalar_type() != torch::kUInt8 || images.dim() != 3)
    throw DataError("idx file '" + images_path +
                    "': expected uint8 images [N, rows, cols], found " + shape_of(images) +
                    ". Pass the images file of (Fashion-)MNIST");
  torch::Tensor labels = read_idx(labels_path);
  if (labels.scalar_type() != torch::kUInt8 || labels.dim() != 1)
    throw DataError("idx file '" + labels_path + "': expected uint8 labels [N], found " +
                    shape_of(labels) + ". Pass the labels file of (Fashion-)MNIST");
  if (images.size(0) != labels.size(0))
    throw DataError(base::detail::str("images and labels disagree in count: '", images_path,
                                      "' holds ", images.size(0), " images but '", labels_path,
                                      "' holds ", labels.size(0),
                                      " labels. Use the two files of one split of one download"));
  if (labels.numel() > 0) {
    const int max_label = labels.max().item<int>();
    if (max_label > 9)
      throw DataError(
          base::detail::str("idx file '", labels_path, "': label ", max_label, " at index ",
                            labels.argmax().item<int64_t>(),
                            " is outside 0..9. Pass the labels file of (Fashion-)MNIST"));
  }

  images_ = images.unsqueeze(1).to(torch::kFloat32).div_(255.0);
  if (options.normalize()) images_.sub_(options.mean()).div_(options.stddev());
  labels_ = labels.to(torch::kInt64);
}

torch::data::Example<> FashionMnist::get(size_t index) {
  const auto count = static_cast<size_t>(images_.size(0));
  if (index >= count)
    throw InvalidArgumentError(base::detail::str(
        "FashionMnist::get(", index, "): the data set has ", count,
        " examples; pass an index below size(), e.g. through a sampler over this data set"));
  const auto i = static_cast<int64_t>(index);
  return {images_[i], labels_[i]};
}

torch::optional<size_t> FashionMnist::size() const { return static_cast<size_t>(images_.size(0)); }

}  // namespace ddp::data
