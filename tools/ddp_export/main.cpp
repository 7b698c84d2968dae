// ddp-export: a ddp snapshot as a checkpoint Python opens (Note [A
// checkpoint for PyTorch] in ddp/snapshot/pytorch_checkpoint.hpp).
//
//   ddp-export ckpt/snapshot-000000000012.ddpsnap --to torch model.pt
//   ddp-export ckpt --to safetensors model.safetensors   # the newest valid one
//
// Exits 0 after printing what it wrote, or with the error's exit code (Note
// [Exit codes] in ddp/base/errors.hpp) and its message.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <vector>

#include "ddp/snapshot/pytorch_checkpoint.hpp"

namespace {

namespace fs = std::filesystem;

// The snapshot `source` names: the file itself, or in a directory the newest
// main snapshot file (`<prefix>-<sequence>.ddpsnap`) whose checksums verify.
ddp::snapshot::SnapshotFile read_source(const std::string& source) {
  if (!fs::is_directory(source)) return ddp::snapshot::read_snapshot_file(source);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(source)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".ddpsnap" && name[0] != '.' &&
        name.find(".shard-") == std::string::npos) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().string().substr(a.filename().string().rfind('-')) >
           b.filename().string().substr(b.filename().string().rfind('-'));
  });
  for (const fs::path& file : files) {
    try {
      return ddp::snapshot::read_snapshot_file(file.string());
    } catch (const ddp::SnapshotError& e) {
      std::cerr << "ddp-export: skipping an unusable snapshot: " << e.what() << std::endl;
    }
  }
  throw ddp::SnapshotError("no valid snapshot in the directory " + source +
                           "; give a snapshot file or the directory SnapshotManager saves into");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Writes a ddp snapshot as a checkpoint PyTorch loads: torch.load opens the "
      "torch format ({\"model\", \"optimizer\", \"epoch\", ...}); safetensors holds "
      "the model's state_dict."};
  std::string source, format = "torch", out;
  app.add_option("snapshot", source, "a snapshot file, or a directory of snapshots (the newest)")
      ->required();
  app.add_option("--to", format, "torch or safetensors")
      ->check(CLI::IsMember({"torch", "safetensors"}));
  app.add_option("out", out, "the file to write")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const ddp::snapshot::SnapshotFile file = read_source(source);
    ddp::snapshot::export_checkpoint(file, out, ddp::snapshot::parse_checkpoint_format(format));
    std::cout << "ddp-export: wrote " << out << " (" << format << ") from " << file.path
              << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ddp-export: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  }
}
