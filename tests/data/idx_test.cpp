// Tests of the idx reader and the Fashion-MNIST dataset: exact values for
// every type code, plain and gzipped; every malformed case is a DataError
// naming the file and the problem; random damage never crashes.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/error_capture.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/data/errors.hpp"
#include "ddp/data/fashion_mnist.hpp"
#include "ddp/data/idx.hpp"

namespace fs = std::filesystem;
using ddp::DataError;
using ddp::data::FashionMnist;
using ddp::data::read_idx;
using ddp::testing::error_of;
using ddp::testing::TemporaryDirectory;
using Bytes = std::vector<unsigned char>;

namespace {

// An idx file's bytes: magic, big-endian dims, then `payload` as given.
Bytes idx_bytes(unsigned char type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes out = {0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back((d >> shift) & 0xff);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Big-endian bytes of each value's object representation.
template <typename T>
Bytes big_endian(const std::vector<T>& values) {
  Bytes out;
  for (T v : values) {
    unsigned char raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    for (size_t i = 0; i < sizeof(T); ++i) out.push_back(raw[sizeof(T) - 1 - i]);  // host is LE
  }
  return out;
}

class DataIdxTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const Bytes& bytes, bool gzip = false) {
    const std::string path = (dir_ / name).string();
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      if (!bytes.empty()) gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    return path;
  }

  static Bytes read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), {});
  }

  /// The DataError message of reading `path`; as error_of(), the test fails
  /// at the caller's line when there is none.
  static std::string read_error(const std::string& path, const char* file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
    return error_of<DataError>([&] { read_idx(path); }, file, line);
  }

  const TemporaryDirectory temporary_{"ddp-data-"};
  const fs::path dir_ = temporary_.path();
};

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

}  // namespace

TEST_F(DataIdxTest, ReadsUint8ImagesPlainAndGzipped) {
  Bytes pixels(2 * 3 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<unsigned char>(i * 10);
  const Bytes file = idx_bytes(0x08, {2, 3, 4}, pixels);
  for (bool gzip : {false, true}) {
    torch::Tensor t = read_idx(write(gzip ? "a.gz" : "a", file, gzip));
    EXPECT_EQ(t.scalar_type(), torch::kUInt8);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3, 4}));
    EXPECT_TRUE(torch::equal(t.flatten(), torch::arange(0, 240, 10).to(torch::kUInt8)));
  }
}

TEST_F(DataIdxTest, GzipIsRecognisedByContentNotName) {
  const Bytes file = idx_bytes(0x08, {3}, {7, 8, 9});
  torch::Tensor t = read_idx(write("labels-without-suffix", file, /*gzip=*/true));
  EXPECT_TRUE(torch::equal(t, torch::tensor({7, 8, 9}, torch::kUInt8)));
}

TEST_F(DataIdxTest, ReadsEveryTypeCodeWithExactValues) {
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzipped" : "plain");
    auto i8 =
        read_idx(write("i8", idx_bytes(0x09, {4}, big_endian<int8_t>({-128, -1, 0, 127})), gzip));
    EXPECT_EQ(i8.scalar_type(), torch::kInt8);
    EXPECT_TRUE(torch::equal(i8, torch::tensor({-128, -1, 0, 127}, torch::kInt8)));

    auto i16 = read_idx(
        write("i16", idx_bytes(0x0B, {2, 2}, big_endian<int16_t>({-32768, -2, 258, 32767})), gzip));
    EXPECT_EQ(i16.scalar_type(), torch::kInt16);
    EXPECT_TRUE(
        torch::equal(i16, torch::tensor({-32768, -2, 258, 32767}, torch::kInt16).reshape({2, 2})));

    auto i32 = read_idx(write(
        "i32", idx_bytes(0x0C, {3}, big_endian<int32_t>({INT32_MIN, 16909060, INT32_MAX})), gzip));
    EXPECT_EQ(i32.scalar_type(), torch::kInt32);
    EXPECT_TRUE(torch::equal(i32, torch::tensor({INT32_MIN, 16909060, INT32_MAX}, torch::kInt32)));

    auto f32 = read_idx(
        write("f32", idx_bytes(0x0D, {1, 3}, big_endian<float>({1.5f, -0.25f, 3.0e38f})), gzip));
    EXPECT_EQ(f32.scalar_type(), torch::kFloat32);
    EXPECT_EQ(f32.sizes(), (std::vector<int64_t>{1, 3}));
    EXPECT_TRUE(torch::equal(f32, torch::tensor({{1.5f, -0.25f, 3.0e38f}})));

    auto f64 = read_idx(
        write("f64", idx_bytes(0x0E, {2}, big_endian<double>({3.141592653589793, -1e-300})), gzip));
    EXPECT_EQ(f64.scalar_type(), torch::kFloat64);
    EXPECT_EQ(f64[0].item<double>(), 3.141592653589793);
    EXPECT_EQ(f64[1].item<double>(), -1e-300);
  }
}

TEST_F(DataIdxTest, EmptyDimensionAndScalarAreValid) {
  auto empty = read_idx(write("e", idx_bytes(0x0C, {0, 5}, {})));
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 5}));
  auto scalar = read_idx(write("s", idx_bytes(0x08, {}, {42})));
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<int>(), 42);
}

TEST_F(DataIdxTest, MissingFileIsNamed) {
  const std::string path = (dir_ / "nope-idx1-ubyte").string();
  const std::string message = read_error(path);
  expect_contains(message, path);
  expect_contains(message, "no such file");
}

TEST_F(DataIdxTest, DirectoryIsRefused) {
  expect_contains(read_error(dir_.string()), "not a regular file");
}

TEST_F(DataIdxTest, BadMagicShowsTheBytesInHex) {
  const std::string path = write("bad", {0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0});
  const std::string message = read_error(path);
  expect_contains(message, path);
  expect_contains(message, "not an idx file");
  expect_contains(message, "50 4b 03 04");
}

TEST_F(DataIdxTest, ShortAndEmptyFilesAreNotIdx) {
  expect_contains(read_error(write("empty", {})), "holds only 0 bytes");
  expect_contains(read_error(write("short", {0, 0, 8})), "00 00 08");
  expect_contains(read_error(write("empty.gz", {}, true)), "gzipped file holds only 0 bytes");
}

TEST_F(DataIdxTest, UnknownTypeCodeIsNamed) {
  const std::string message = read_error(write("t", idx_bytes(0x0A, {1}, {0})));
  expect_contains(message, "unknown type code 0x0a");
}

TEST_F(DataIdxTest, TruncatedHeaderAndDataGiveByteCounts) {
  Bytes header_cut = idx_bytes(0x08, {2, 3}, {});
  header_cut.resize(9);  // Magic + 5 of the 8 dimension bytes.
  expect_contains(read_error(write("h", header_cut)),
                  "need 8 bytes after the magic number, found 5");

  for (bool gzip : {false, true}) {
    const std::string message = read_error(write("d", idx_bytes(0x0B, {2, 3}, Bytes(7, 1)), gzip));
    expect_contains(message, "truncated data");
    expect_contains(message, "expected 12 bytes of data, found 7");
  }
}

TEST_F(DataIdxTest, TruncatedGzipStreamIsTruncatedData) {
  // A real gzip of incompressible data cut in half: zlib reports the early end.
  Bytes payload(4000);
  std::mt19937 gen(1);
  for (auto& b : payload) b = static_cast<unsigned char>(gen());
  Bytes gz = read_all(write("full.gz", idx_bytes(0x08, {4000}, payload), true));
  gz.resize(gz.size() / 2);
  const std::string message = read_error(write("cut.gz", gz));
  expect_contains(message, "truncated data");
  expect_contains(message, "expected 4000 bytes of data");
}

TEST_F(DataIdxTest, ImplausibleDimensionsAreRefusedBeforeAllocating) {
  const std::string huge = read_error(write("huge", idx_bytes(0x0E, {65536, 65536}, {})));
  expect_contains(huge, "implausible dimensions 65536 x 65536");
  // 2^32-1 cubed overflows int64: must be caught, not wrapped.
  const std::string overflow =
      read_error(write("ovf", idx_bytes(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {})));
  expect_contains(overflow, "implausible dimensions 4294967295 x ...");
  // Even with no element, huge dimensions would overflow the strides.
  const std::string strides =
      read_error(write("zero", idx_bytes(0x08, {0, 0xffffffffu, 0xffffffffu}, {})));
  expect_contains(strides, "implausible dimensions 0 x 4294967295 x ...");
  expect_contains(read_error(write("dims", Bytes{0, 0, 8, 200})), "declares 200 dimensions");
}

TEST_F(DataIdxTest, TrailingGarbageIsCounted) {
  for (bool gzip : {false, true}) {
    const std::string message = read_error(write("g", idx_bytes(0x08, {2}, {1, 2, 3, 4, 5}), gzip));
    expect_contains(message, "trailing garbage: 3 bytes after the 2 bytes of data");
  }
}

TEST_F(DataIdxTest, CorruptGzipIsDataError) {
  Bytes gz = read_all(write("ok.gz", idx_bytes(0x08, {64}, Bytes(64, 3)), true));
  gz[gz.size() - 6] ^= 0xff;  // Corrupt the CRC in the trailer.
  expect_contains(read_error(write("crc.gz", gz)), "corrupt gzip data");
}

// Random damage to a valid file (plain and gzipped), with a fixed seed:
// every outcome is a tensor or a DataError, never a crash or another error.
TEST_F(DataIdxTest, FuzzedFilesOnlyEverThrowDataError) {
  Bytes values(3 * 4 * 5 * 2);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<unsigned char>(i * 7);
  const Bytes plain = idx_bytes(0x0B, {3, 4, 5}, values);
  const Bytes gzipped = read_all(write("seed.gz", plain, true));
  std::mt19937 gen(20240607);
  int data_errors = 0, successes = 0;
  for (int round = 0; round < 2000; ++round) {
    Bytes file = round % 2 ? gzipped : plain;
    switch (gen() % 4) {
      case 0:  // Truncate.
        file.resize(gen() % file.size());
        break;
      case 1:  // Flip a few bytes, often in the header.
        for (int k = 1 + gen() % 3; k > 0; --k)
          file[gen() % 2 ? gen() % std::min<size_t>(16, file.size()) : gen() % file.size()] =
              static_cast<unsigned char>(gen());
        break;
      case 2:  // Append junk.
        for (int k = 1 + gen() % 8; k > 0; --k) file.push_back(static_cast<unsigned char>(gen()));
        break;
      default:  // Flip single bits.
        for (int k = 1 + gen() % 4; k > 0; --k) file[gen() % file.size()] ^= 1u << (gen() % 8);
    }
    // A new name each round: truncating an existing file makes ext4 flush
    // it on close (auto_da_alloc), which made this loop I/O bound.
    const std::string path = write("fuzz-" + std::to_string(round), file);
    try {
      read_idx(path);
      ++successes;
    } catch (const DataError& e) {
      ++data_errors;
      ASSERT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      FAIL() << "round " << round << ": not a DataError: " << e.what();
    }
  }
  EXPECT_GT(data_errors, 1000);
  EXPECT_GT(successes, 0);  // Some flips only touch the values.
}

// A tiny (Fashion-)MNIST directory: `count` 28x28 images and `labels`.
class DataFashionMnistTest : public DataIdxTest {
 protected:
  void write_split(const std::string& prefix, int images, const Bytes& labels, bool gzip) {
    Bytes pixels(static_cast<size_t>(images) * 28 * 28);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<unsigned char>(i % 256);
    const std::string suffix = gzip ? ".gz" : "";
    write(prefix + "-images-idx3-ubyte" + suffix,
          idx_bytes(0x08, {static_cast<uint32_t>(images), 28, 28}, pixels), gzip);
    write(prefix + "-labels-idx1-ubyte" + suffix,
          idx_bytes(0x08, {static_cast<uint32_t>(labels.size())}, labels), gzip);
  }
};

TEST_F(DataFashionMnistTest, SmallSplitsPlainAndGzipped) {
  write_split("train", 3, {0, 9, 4}, /*gzip=*/true);
  write_split("t10k", 2, {5, 1}, /*gzip=*/false);  // As after gunzip (MNIST mirrors).
  FashionMnist train(dir_.string(), FashionMnist::Split::kTrain,
                     ddp::data::FashionMnistOptions().normalize(false));
  EXPECT_EQ(train.size().value(), 3u);
  EXPECT_EQ(train.images().sizes(), (std::vector<int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(train.images().scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(train.labels(), torch::tensor({0, 9, 4}, torch::kInt64)));
  auto example = train.get(1);
  EXPECT_EQ(example.data.sizes(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_FLOAT_EQ(example.data[0][0][0].item<float>(), (784 % 256) / 255.0f);
  EXPECT_EQ(example.target.item<int64_t>(), 9);
  EXPECT_THROW(train.get(3), ddp::InvalidArgumentError);

  FashionMnist test(dir_.string(), FashionMnist::Split::kTest);  // Normalized.
  EXPECT_EQ(test.size().value(), 2u);
  EXPECT_NEAR(test.images()[0][0][0][1].item<float>(), (1 / 255.0 - 0.2860) / 0.3530, 1e-6);
}

TEST_F(DataFashionMnistTest, CountMismatchNamesBothFiles) {
  write_split("train", 3, {0, 1}, true);
  const std::string message = error_of<DataError>([&] { FashionMnist data(dir_.string()); });
  expect_contains(message, "train-images-idx3-ubyte.gz' holds 3 images");
  expect_contains(message, "train-labels-idx1-ubyte.gz' holds 2 labels");
}

TEST_F(DataFashionMnistTest, MissingFileAndBadLabelsAreDataErrors) {
  expect_contains(
      error_of<DataError>([&] { FashionMnist data(dir_.string(), FashionMnist::Split::kTest); }),
      "t10k-images-idx3-ubyte' not found in '" + dir_.string());
  write_split("train", 2, {3, 12}, false);
  expect_contains(error_of<DataError>([&] { FashionMnist data(dir_.string()); }),
                  "label 12 at index 1 is outside 0..9");
}

TEST(DataFashionMnistReal, DebianDatasetHasTheKnownCountsAndMean) {
  const std::string root = FashionMnist::kDefaultRoot;
  if (!fs::exists(fs::path(root) / "train-images-idx3-ubyte.gz") &&
      !fs::exists(fs::path(root) / "train-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST not installed at " << root
                 << " (Debian package fashion-mnist); nothing to check";
  const auto raw = ddp::data::FashionMnistOptions().normalize(false);
  FashionMnist train(root, FashionMnist::Split::kTrain, raw);
  FashionMnist test(root, FashionMnist::Split::kTest, raw);
  EXPECT_EQ(train.size().value(), 60000u);
  EXPECT_EQ(test.size().value(), 10000u);
  EXPECT_EQ(train.images().sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  auto counts = torch::bincount(train.labels());
  EXPECT_TRUE(torch::equal(counts, torch::full({10}, 6000, torch::kInt64))) << counts;
  EXPECT_EQ(test.labels().min().item<int64_t>(), 0);
  EXPECT_EQ(test.labels().max().item<int64_t>(), 9);
  EXPECT_NEAR(train.images().mean().item<double>(), 0.2860, 1e-3);
  EXPECT_GE(train.images().min().item<float>(), 0.0f);
  EXPECT_LE(train.images().max().item<float>(), 1.0f);

  FashionMnist normalized(root, FashionMnist::Split::kTrain);
  EXPECT_NEAR(normalized.images().mean().item<double>(), 0.0, 2e-3);
  EXPECT_NEAR(normalized.images().std().item<double>(), 1.0, 2e-3);
}
