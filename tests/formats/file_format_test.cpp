// Which format a file is in, told from its content (Note [A format told
// from the whole header] in ddp/formats/file_format.hpp), and safetensors
// headers checked whole before anything is allocated.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <random>
#include <string>

#include "common/temporary_directory.hpp"
#include "crafted_files.hpp"
#include "ddp/formats.hpp"

namespace ddp::formats {
namespace {

using ddp::testing::TemporaryDirectory;

std::string safetensors_error(const std::string& path) {
  try {
    read_safetensors(path);
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " was read";
  return "";
}

const std::string kOneFloat = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
const std::string kFloatBytes("\x00\x00\x80\x3f", 4);  // 1.0f

TEST(FormatsFileFormat, SafetensorsHeadersThatLookLikeOtherFormatsAreSafetensors) {
  const TemporaryDirectory dir("ddp-formats-");
  // 384 = 0x180: the file starts with 0x80, pickle's PROTO; 19280 = 0x4b50:
  // it starts with "PK". Both were refused as torch.save files.
  for (uint64_t header_size : {uint64_t{384}, uint64_t{19280}, uint64_t{128 + 256 * 7}}) {
    SCOPED_TRACE(header_size);
    testing::write_safetensors_bytes(dir.file("w.safetensors"), "{" + kOneFloat + "}", kFloatBytes,
                                     header_size);
    EXPECT_EQ(identify_file(dir.file("w.safetensors")), FileFormat::kSafetensors);
    const NamedTensors tensors = read_safetensors(dir.file("w.safetensors"));
    ASSERT_EQ(tensors.size(), 1u);
    EXPECT_EQ(tensors[0].second.item<float>(), 1.0f);
  }
  // ddp's own writer, with metadata sized so that its header is 384 bytes.
  std::string pad;
  for (int n = 0; n < 400; ++n, pad += "x") {
    write_safetensors(dir.file("own.safetensors"), {{"w", torch::ones({1})}}, {{"pad", pad}});
    std::ifstream in(dir.file("own.safetensors"), std::ios::binary);
    if (in.get() == 0x80) break;
  }
  EXPECT_EQ(identify_file(dir.file("own.safetensors")), FileFormat::kSafetensors);
  EXPECT_EQ(read_safetensors(dir.file("own.safetensors")).size(), 1u);
}

TEST(FormatsFileFormat, EachFormatByWhatOnlyItHas) {
  const TemporaryDirectory dir("ddp-formats-");
  write_torch_file(dir.file("zip.pt"), *PyValue::of(int64_t{3}));
  EXPECT_EQ(identify_file(dir.file("zip.pt")), FileFormat::kTorchZip);
  // torch.save(..., _use_new_zipfile_serialization=False) begins so.
  std::ofstream(dir.file("legacy.pt"), std::ios::binary)
      << std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
  EXPECT_EQ(identify_file(dir.file("legacy.pt")), FileFormat::kTorchLegacy);
  EXPECT_NE(describe(FileFormat::kTorchLegacy, dir.file("legacy.pt")).find("legacy format"),
            std::string::npos);
  std::mt19937 random(7);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(random());
  std::ofstream(dir.file("noise.pt"), std::ios::binary) << noise;
  EXPECT_EQ(identify_file(dir.file("noise.pt")), FileFormat::kUnknown);
  try {
    read_torch_file(dir.file("noise.pt"));
    ADD_FAILURE() << "noise was read";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("it is neither torch.save's zip archive"), std::string::npos) << what;
    EXPECT_NE(what.find("header size of"), std::string::npos) << what;
  }
  EXPECT_EQ(identify_file(dir.file("missing.pt")), FileFormat::kUnknown);
}

TEST(FormatsFileFormat, SafetensorsHeadersAreCheckedWholeBeforeAllocating) {
  const TemporaryDirectory dir("ddp-formats-");
  const std::string path = dir.file("bad.safetensors");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"__metadata__":{"epoch":3},)" + kOneFloat + "}",
       "__metadata__ entry 'epoch' is a JSON number, not a string"},
      {R"({"__metadata__":[1],)" + kOneFloat + "}", "__metadata__ is a JSON array"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       "has shape [-1], which is not a list of sizes"},
      // 2^40 × 2^40 floats: the byte count overflows.
      {R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})",
       "needs more than 2^63 bytes"},
      // 2^34 floats in a 20-byte file: 64 GiB once allocated before the check.
      {R"({"w":{"dtype":"F32","shape":[17179869184],"data_offsets":[0,4]}})",
       "needs 68719476736 bytes"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", "is not {\"dtype\""},
      {R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "is not {\"dtype\""},
      {R"({"w":[]})", "is not {\"dtype\""},
      {R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,4]}})",
       "has dtype F8_E4M3, which ddp does not read"},
      {"[1, 2]", "its header is JSON but not an object"},
      {"{" + std::string(1000, '[') + std::string(1000, ']') + "}", "nests deeper than 64 levels"},
      {"{\"w\": tru", "is not JSON"},
  };
  for (const auto& [header, expected] : cases) {
    testing::write_safetensors_bytes(path, header, kFloatBytes);
    const std::string error = safetensors_error(path);
    EXPECT_NE(error.find(expected), std::string::npos)
        << header.substr(0, 80) << "\n  expected: " << expected << "\n  got: " << error;
  }
}

}  // namespace
}  // namespace ddp::formats
