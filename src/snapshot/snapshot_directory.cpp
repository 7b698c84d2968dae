#include "snapshot/snapshot_directory.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "base/str.hpp"
#include "ddp/snapshot/errors.hpp"

namespace ddp::snapshot::detail {
namespace {

namespace fs = std::filesystem;

constexpr char kExtension[] = ".ddpsnap";
constexpr char kShardTag[] = ".shard-";

bool all_digits(const std::string& text) {
  return !text.empty() && text.size() <= 19 &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string snapshot_file_name(const std::string& prefix, uint64_t sequence) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%012llu", static_cast<unsigned long long>(sequence));
  return prefix + "-" + digits + kExtension;
}

std::optional<uint64_t> snapshot_sequence(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "-", tail = kExtension;
  if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
    return std::nullopt;
  }
  std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (!all_digits(digits)) return std::nullopt;
  return std::stoull(digits);
}

std::string shard_file_name(const std::string& main_name, int rank, int world) {
  const std::string stem = main_name.substr(0, main_name.size() - (sizeof kExtension - 1));
  return base::detail::str(stem, kShardTag, rank, "-of-", world, kExtension);
}

std::optional<uint64_t> shard_file_sequence(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "-";
  if (name.rfind(head, 0) != 0) return std::nullopt;
  const size_t tag = name.find(kShardTag, head.size());
  if (tag == std::string::npos) return std::nullopt;
  const std::string digits = name.substr(head.size(), tag - head.size());
  if (!all_digits(digits)) return std::nullopt;
  return std::stoull(digits);
}

std::vector<SnapshotCandidate> snapshot_candidates(const std::string& directory,
                                                   const std::string& prefix) {
  std::vector<SnapshotCandidate> found;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    auto sequence = snapshot_sequence(it->path().filename().string(), prefix);
    if (sequence && it->is_regular_file(error)) found.push_back({*sequence, it->path().string()});
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.sequence > b.sequence; });
  return found;
}

uint64_t next_snapshot_sequence(const snapshot::SnapshotOptions& options) {
  std::error_code error;
  fs::create_directories(options.directory(), error);
  if (error) {
    throw SnapshotError("cannot create snapshot directory " + options.directory() + ": " +
                        error.message());
  }
  auto existing = snapshot_candidates(options.directory(), options.prefix());
  return existing.empty() ? 1 : existing.front().sequence + 1;
}

void remove_shard_files(const snapshot::SnapshotOptions& options, uint64_t sequence) {
  std::error_code error;
  for (fs::directory_iterator it(options.directory(), error), end; !error && it != end;
       it.increment(error)) {
    std::error_code ignored;
    if (shard_file_sequence(it->path().filename().string(), options.prefix()) == sequence) {
      fs::remove(it->path(), ignored);
    }
  }
}

void prune_snapshots(const snapshot::SnapshotOptions& options) {
  const std::string& dir = options.directory();
  const std::string& prefix = options.prefix();
  std::error_code error;
  std::set<uint64_t> kept;
  auto all = snapshot_candidates(dir, prefix);
  for (size_t i = 0; i < all.size(); ++i) {
    if (i < static_cast<size_t>(options.keep_last())) {
      kept.insert(all[i].sequence);
    } else {
      fs::remove(all[i].path, error);
    }
  }
  const std::string temp_head = "." + prefix + "-";
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string file = it->path().filename().string();
    std::error_code ignored;
    if (file.rfind(temp_head, 0) == 0 && file.size() > 4 &&
        file.compare(file.size() - 4, 4, ".tmp") == 0) {
      const std::string target = file.substr(1, file.size() - 5);
      if (snapshot_sequence(target, prefix) || shard_file_sequence(target, prefix)) {
        fs::remove(it->path(), ignored);
      }
    } else if (auto shard = shard_file_sequence(file, prefix); shard && kept.count(*shard) == 0) {
      fs::remove(it->path(), ignored);
    }
  }
}

}  // namespace ddp::snapshot::detail
