// PyTorch's Distributed Checkpoint files (ddp/formats/dcp.hpp): written and
// read back in any box, read as PyTorch 2.6 wrote them (the files in
// tests/multiprocess/data/dcp-pytorch-2.6), and every hostile metadata a
// named FormatError (Note [The DCP subset ddp speaks]).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/temporary_directory.hpp"
#include "ddp/formats.hpp"

namespace ddp::formats {
namespace {

using ddp::testing::TemporaryDirectory;
namespace fs = std::filesystem;

// A [3, 4] tensor (0..11) saved as two chunks, rows 0-1 and row 2, and a
// value; `edit` changes the items before the metadata is written.
void write_checkpoint(const std::string& directory,
                      const std::function<void(std::vector<DcpItem>&)>& edit = {}) {
  const at::Tensor whole = torch::arange(12, torch::kFloat).view({3, 4});
  DcpFileWriter writer(directory, 0);
  writer.add_tensor("model.w", {3, 4}, DcpBox{{0, 0}, {2, 4}}, whole.narrow(0, 0, 2));
  writer.add_tensor("model.w", {3, 4}, DcpBox{{2, 0}, {1, 4}}, whole.narrow(0, 2, 1));
  writer.add_object("lr", *PyValue::of(0.5));
  std::vector<DcpItem> items = writer.finish();
  if (edit) edit(items);
  write_dcp_metadata(
      directory, items,
      {{"model.w", {PyValue::of("model"), PyValue::of("w")}}, {"lr", {PyValue::of("lr")}}});
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FormatError";
  return "";
}

TEST(FormatsDcp, AnyBoxReadsBackFromTheChunksThatHoldIt) {
  const TemporaryDirectory dir("ddp-dcp-");
  write_checkpoint(dir.string());
  DcpReader reader(dir.string());
  const at::Tensor whole = torch::arange(12, torch::kFloat).view({3, 4});
  EXPECT_TRUE(torch::equal(reader.read("model.w"), whole));
  // Rows 1-2, columns 1-2: across both chunks.
  EXPECT_TRUE(torch::equal(reader.read("model.w", DcpBox{{1, 1}, {2, 2}}),
                           whole.narrow(0, 1, 2).narrow(1, 1, 2)));
  EXPECT_DOUBLE_EQ(reader.read_object("lr")->floating, 0.5);
  const DcpMetadata& metadata = reader.metadata();
  ASSERT_EQ(metadata.tensors.at("model.w").chunks.size(), 2u);
  EXPECT_EQ(metadata.paths.at("model.w").at(1)->text, "w");
}

TEST(FormatsDcp, PyTorchsFilesAreRead) {
  const std::string fixtures = DDP_DCP_FIXTURES;
  DcpReader reader(fixtures + "/pt-fsdp1");
  const DcpTensor& weight = reader.metadata().tensors.at("model.0.weight");
  EXPECT_EQ(weight.size, (std::vector<int64_t>{13, 7}));
  EXPECT_EQ(weight.chunks.size(), 2u);  // FSDP1 on 2 ranks: rows 0-6 and 7-12
  const PyRef reference = read_torch_file(fixtures + "/pt-fsdp1-ref.pt");
  EXPECT_TRUE(
      torch::equal(reader.read("model.0.weight"), reference->get("params")->items.at(0)->tensor));
  const PyRef groups = reader.read_object("optim.param_groups.1.params");
  ASSERT_EQ(groups->items.size(), 3u);
  EXPECT_EQ(groups->items.at(0)->text, "0.bias");
  EXPECT_EQ(reader.read("optim.state.0.weight.step").item<float>(), 2.0f);
}

TEST(FormatsDcp, HostileMetadataIsNamed) {
  auto hostile = [](const std::function<void(std::vector<DcpItem>&)>& edit) {
    const TemporaryDirectory dir("ddp-dcp-");
    write_checkpoint(dir.string(), edit);
    return error_of([&] { DcpReader(dir.string()).read("model.w"); });
  };
  EXPECT_NE(hostile([](auto& items) {
              items[1].box.offsets = {2, 1};
            }).find("a chunk of model.w at [2, 1] of size [1, 4] lies outside its size [3, 4]"),
            std::string::npos);
  EXPECT_NE(hostile([](auto& items) {
              items[0].location.file = "../etc";
            }).find("lies in \"../etc\", which is not a file in the checkpoint's directory"),
            std::string::npos);
  EXPECT_NE(hostile([](auto& items) {
              items.erase(items.begin() + 1);
            }).find("no chunk holds some of the elements in the box at [0, 0] of size [3, 4]"),
            std::string::npos);
  EXPECT_NE(hostile([](auto& items) {
              items[0].location.length = 1 << 30;
            }).find("reach past the file's"),
            std::string::npos);
  // The first chunk's stream where the second's should be: a [2, 4] tensor
  // where the metadata says [1, 4].
  EXPECT_NE(hostile([](auto& items) {
              items[1].location = items[0].location;
            }).find("holds a Tensor of Float [2, 4], not the Float [1, 4] the metadata says"),
            std::string::npos);
  // No metadata at all.
  const TemporaryDirectory empty("ddp-dcp-");
  EXPECT_NE(error_of([&] { DcpReader reader(empty.string()); }).find("it has no .metadata"),
            std::string::npos);
}

TEST(FormatsDcp, AMetadataThatIsNotDcpsIsNamed) {
  const TemporaryDirectory dir("ddp-dcp-");
  // A torch.save file's pickle as .metadata: a dict, not Metadata.
  write_torch_file(dir.file("x.pt"), *PyValue::dict());
  {
    std::ofstream out(dir.file(".metadata"), std::ios::binary);
    out << std::string("\x80\x02}q\x00.", 6);  // pickle protocol 2: {}
  }
  EXPECT_NE(error_of([&] {
              read_dcp_metadata(dir.string());
            }).find("the root is a dict, not a torch.distributed.checkpoint.metadata.Metadata"),
            std::string::npos);
  {
    std::ofstream out(dir.file(".metadata"), std::ios::binary);
    out << std::string(5000, ']');  // 5000 nested lists, no end
  }
  EXPECT_NE(error_of([&] { read_dcp_metadata(dir.string()); }).find(".metadata byte"),
            std::string::npos);
}

}  // namespace
}  // namespace ddp::formats
