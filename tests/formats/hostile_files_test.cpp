// Hostile and damaged torch.save files (Note [A hostile file is an error]
// in ddp/formats/torch_file.hpp): each is a FormatError naming the problem,
// never a crash, a hang or an allocation the file does not justify. The
// files are built byte by byte (tests/formats/crafted_files.hpp); those
// that came from issue reports carry their numbers there.

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/temporary_directory.hpp"
#include "crafted_files.hpp"
#include "ddp/formats.hpp"

namespace ddp::formats {
namespace {

using ddp::testing::TemporaryDirectory;
namespace pk = testing::pickle;
namespace fs = std::filesystem;

// The FormatError of reading `path`; a failure when it reads.
std::string read_error(const std::string& path) {
  try {
    read_torch_file(path);
  } catch (const FormatError& e) {
    EXPECT_EQ(e.exit_code(), base::ExitCode::kFormat);
    return e.what();
  }
  ADD_FAILURE() << path << " was read";
  return "";
}

std::string float_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

TEST(FormatsTorchFile, APickleNested200000DeepIsRefusedAndFreedWithoutRecursion) {
  const TemporaryDirectory dir("ddp-formats-");
  // ']' × d then 'a' × (d - 1): lists in lists, 200 KB that Python's
  // torch.load(weights_only=True) reads, and that once overflowed the stack.
  constexpr int kDepth = 200000;
  const std::string deep =
      pk::proto() + std::string(kDepth, ']') + std::string(kDepth - 1, 'a') + pk::stop();
  testing::write_archive(dir.file("deep.pt"), deep);
  EXPECT_NE(read_error(dir.file("deep.pt")).find("nested deeper than 1000 containers"),
            std::string::npos);
  // Just under the bound it reads, and the tree is as deep as written.
  constexpr int kFits = kMaxPickleDepth;
  testing::write_archive(dir.file("fits.pt"), pk::proto() + std::string(kFits, ']') +
                                                  std::string(kFits - 1, 'a') + pk::stop());
  PyRef value = read_torch_file(dir.file("fits.pt"));
  int depth = 1;
  for (PyRef v = value; !v->items.empty(); v = v->items[0]) ++depth;
  EXPECT_EQ(depth, kFits);
}

TEST(FormatsTorchFile, ATreeOfAMillionLevelsIsFreedInConstantStack) {
  PyRef root = PyValue::list();
  PyValue* leaf = root.get();
  for (int i = 0; i < 1000000; ++i) {
    leaf->items.push_back(PyValue::list());
    leaf = leaf->items.back().get();
  }
  root.reset();  // recursion would overflow the 8 MiB stack here
  SUCCEED();
}

TEST(FormatsTorchFile, AListThatHoldsItselfIsRefused) {
  const TemporaryDirectory dir("ddp-formats-");
  // l = []; l.append(l), as plain Python pickles it.
  const std::string memo_0("q\x00h\x00", 4);  // BINPUT 0, BINGET 0
  testing::write_archive(dir.file("cycle.pt"), pk::proto() + "]" + memo_0 + "a" + pk::stop());
  EXPECT_NE(read_error(dir.file("cycle.pt")).find("a list contains itself"), std::string::npos);
  // Shared but acyclic (one list twice in a tuple) is fine.
  testing::write_archive(dir.file("shared.pt"), pk::proto() + "]" + memo_0 + "\x86" + pk::stop());
  PyRef shared = read_torch_file(dir.file("shared.pt"));
  ASSERT_EQ(shared->items.size(), 2u);
  EXPECT_EQ(shared->items[0], shared->items[1]);
}

TEST(FormatsTorchFile, StorageSizesAreCheckedAgainstTheRecordBeforeAllocating) {
  const TemporaryDirectory dir("ddp-formats-");
  const std::string four = float_bytes({1, 2, 3, 4});
  // A storage of 2^40 floats over a record of 16 bytes.
  testing::write_archive(
      dir.file("huge.pt"),
      pk::proto() + pk::tensor("FloatStorage", "0", int64_t{1} << 40, {4}, {1}) + pk::stop(),
      {{"0", four}});
  EXPECT_NE(read_error(dir.file("huge.pt"))
                .find("record data/0 holds 16 bytes, its torch.FloatStorage "
                      "of 1099511627776 elements"),
            std::string::npos);
  testing::write_archive(dir.file("negative.pt"),
                         pk::proto() + pk::tensor("FloatStorage", "0", -4, {4}, {1}) + pk::stop(),
                         {{"0", four}});
  EXPECT_NE(read_error(dir.file("negative.pt")).find("a negative count"), std::string::npos);
  // A view whose reach overflows int64 ((2^62 - 1) * 2^62).
  testing::write_archive(
      dir.file("overflow.pt"),
      pk::proto() +
          pk::tensor("FloatStorage", "0", 4, {int64_t{1} << 62, 4}, {int64_t{1} << 62, 1}) +
          pk::stop(),
      {{"0", four}});
  EXPECT_NE(read_error(dir.file("overflow.pt")).find("reach outside its storage of 4 elements"),
            std::string::npos);
  // Any other global as a storage class (it once became uint8).
  std::string not_storage = pk::tensor("FloatStorage", "0", 4, {4}, {1});
  const std::string storage_class = pk::global("torch", "FloatStorage");
  not_storage.replace(not_storage.find(storage_class), storage_class.size(),
                      pk::global("collections", "OrderedDict"));
  testing::write_archive(dir.file("class.pt"), pk::proto() + not_storage + pk::stop(),
                         {{"0", four}});
  EXPECT_NE(read_error(dir.file("class.pt")).find("which is not a torch storage class"),
            std::string::npos);
  // And the well-formed one reads.
  testing::write_archive(
      dir.file("good.pt"),
      pk::proto() + pk::tensor("FloatStorage", "0", 4, {2, 2}, {2, 1}) + pk::stop(), {{"0", four}});
  const PyRef good = read_torch_file(dir.file("good.pt"));
  ASSERT_EQ(good->kind, PyValue::Kind::kTensor);
  EXPECT_TRUE(good->tensor.equal(torch::tensor({{1.f, 2.f}, {3.f, 4.f}})));
}

// Patches the central directory entry of `name` in the zip at `path`.
void patch_directory_entry(const std::string& path, const std::string& name, uint16_t method,
                           uint32_t uncompressed) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (size_t at = bytes.find("PK\x01\x02"); at != std::string::npos;
       at = bytes.find("PK\x01\x02", at + 4)) {
    const uint16_t name_bytes =
        static_cast<uint8_t>(bytes[at + 28]) | (static_cast<uint8_t>(bytes[at + 29]) << 8);
    const std::string entry = bytes.substr(at + 46, name_bytes);
    if (entry.size() < name.size() || entry.compare(entry.size() - name.size(), name.size(), name))
      continue;
    std::memcpy(&bytes[at + 10], &method, 2);
    std::memcpy(&bytes[at + 24], &uncompressed, 4);
    if (method == 0) std::memcpy(&bytes[at + 20], &uncompressed, 4);  // stored: both sizes
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(FormatsTorchFile, ARecordClaimingMoreThanTheFileIsRefusedBeforeMinizAllocatesIt) {
  const TemporaryDirectory dir("ddp-formats-");
  const std::string small = pk::proto() + pk::integer(7) + pk::stop();
  testing::write_archive(dir.file("claims.pt"), small);
  EXPECT_EQ(read_torch_file(dir.file("claims.pt"))->integer, 7);
  patch_directory_entry(dir.file("claims.pt"), "data.pkl", 8, 0xfffffff0u);  // deflated, 4 GiB
  EXPECT_NE(read_error(dir.file("claims.pt")).find("is compressed or encrypted"),
            std::string::npos);
  testing::write_archive(dir.file("past.pt"), small);
  patch_directory_entry(dir.file("past.pt"), "data.pkl", 0, 0xfffffff0u);
  const std::string past = read_error(dir.file("past.pt"));
  EXPECT_NE(past.find("record past/data.pkl of 4294967280 bytes reaches past the file's"),
            std::string::npos)
      << past;
  // Truncated: the end of central directory is gone.
  testing::write_archive(dir.file("cut.pt"), small);
  fs::resize_file(dir.file("cut.pt"), fs::file_size(dir.file("cut.pt")) - 30);
  EXPECT_NE(read_error(dir.file("cut.pt")).find("it is neither torch.save's zip archive"),
            std::string::npos);
}

TEST(FormatsTorchFile, ObjectsAreKeptAsDataAndNeverCalled) {
  const TemporaryDirectory dir("ddp-formats-");
  // {'args': argparse.Namespace(lr=0.1), 'run': os.system('touch <marker>')}
  const std::string marker = dir.file("ran");
  const std::string pickle =
      pk::proto() + "}(" + pk::string("args") + pk::global("argparse", "Namespace") + ")\x81" +
      "}" + pk::string("lr") + pk::integer(3) + "sb" + pk::string("run") +
      pk::global("os", "system") + "(" + pk::string("touch " + marker) + "tR" + "u" + pk::stop();
  testing::write_archive(dir.file("objects.pt"), pickle);
  const PyRef root = read_torch_file(dir.file("objects.pt"));
  EXPECT_FALSE(fs::exists(marker));
  const PyRef args = root->get("args");
  ASSERT_TRUE(args);
  EXPECT_EQ(args->type_name(), "argparse.Namespace object");
  ASSERT_EQ(args->items.size(), 1u);  // its state, as BUILD gave it
  EXPECT_EQ(args->items[0]->get("lr")->integer, 3);
  EXPECT_EQ(root->get("run")->type_name(), "os.system object");
  // Written back, neither is pickled: ddp never writes what it cannot read.
  try {
    write_torch_file(dir.file("again.pt"), *root);
    ADD_FAILURE() << "an object was written";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("argparse.Namespace object"), std::string::npos)
        << e.what();
  }
}

TEST(FormatsTorchFile, ATorchScriptArchiveNamesTorchJitLoad) {
  const TemporaryDirectory dir("ddp-formats-");
  torch::jit::Module module("Scripted");
  module.register_parameter("weight", torch::ones({2, 2}), /*is_buffer=*/false);
  module.save(dir.file("scripted.pt"));
  const std::string error = read_error(dir.file("scripted.pt"));
  EXPECT_NE(error.find("it is a TorchScript archive"), std::string::npos) << error;
  EXPECT_NE(error.find("load it with torch::jit::load instead"), std::string::npos) << error;
}

TEST(FormatsTorchFile, TruncatedAndDamagedPicklesAreNamed) {
  const TemporaryDirectory dir("ddp-formats-");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {pk::proto() + "X\xff\xff\xff\x7f" + "abc", "the pickle is truncated (2147483647 bytes"},
      {pk::proto() + "a" + pk::stop(), "malformed pickle (an empty stack)"},
      {pk::proto() + "h\x05" + pk::stop(), "memo entry 5 is unset"},
      {pk::proto() + "N" + "N" + pk::stop(), "the pickle ends with more than one value"},
      {pk::proto() + "(N" + pk::stop(), "the pickle ends with more than one value"},
      {pk::proto() + std::string("\x8b\x09\x00\x00\x00", 5), "an integer wider than 64 bits"},
      {pk::proto() + pk::integer(1) + ")" + "R" + pk::stop(), "REDUCE of a int"},
      {pk::proto() + "(" + pk::integer(1) + pk::integer(2) + "\x93" + pk::stop(),
       "STACK_GLOBAL of a int and a int"},
      {pk::proto() + "d" + pk::stop(), "pickle opcode 0x64 is outside"},
      {pk::global("__torch__.Net", "Net") + pk::stop(), "TorchScript archive"},
  };
  for (const auto& [pickle, expected] : cases) {
    testing::write_archive(dir.file("bad.pt"), pickle);
    const std::string error = read_error(dir.file("bad.pt"));
    EXPECT_NE(error.find(expected), std::string::npos) << expected << "\n  got: " << error;
  }
}

}  // namespace
}  // namespace ddp::formats
