#include "elastic/sample_accounting.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "ddp/data/distributed_sampler.hpp"

namespace ddp::launch {
namespace {

std::string indices_text(const std::vector<int64_t>& batch) {
  std::string text;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i == 6 && batch.size() > 8) return text + " ... (" + std::to_string(batch.size()) + ")";
    text += (i ? " " : "") + std::to_string(batch[i]);
  }
  return text;
}

std::string who(const JobGeneration& g, size_t index, int rank) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(g.world) + " in generation " +
         std::to_string(index) + " (from step " + std::to_string(g.from_step) + ")";
}

}  // namespace

SampleAccount::SampleAccount(const std::filesystem::path& dir, const SampleSchedule& schedule)
    : schedule_(schedule) {
  read(dir);
  group();
  check();
}

void SampleAccount::read(const std::filesystem::path& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("samples-", 0) != 0) continue;
    const int pid = std::stoi(name.substr(8));
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string kind, key;
      words >> kind;
      if (kind == "generation") {
        RankGeneration part;
        part.pid = pid;
        words >> key >> part.rank >> key >> part.world >> key >> part.from_step >> key >>
            part.start_ns;
        if (!words) throw std::runtime_error("a malformed line in " + name + ": " + line);
        parts_.push_back(part);
      } else if (kind == "epoch") {
        int64_t epoch = 0, step = 0;
        words >> epoch >> key >> step >> key;
        std::vector<int64_t> batch;
        for (int64_t i; words >> i;) batch.push_back(i);
        if (parts_.empty() || parts_.back().pid != pid) {
          throw std::runtime_error("a batch before its generation in " + name + ": " + line);
        }
        if (epoch != 0) continue;  // the tests train one epoch
        parts_.back().batches[step] = batch;
      }
    }
  }
  std::sort(parts_.begin(), parts_.end(), [](const RankGeneration& a, const RankGeneration& b) {
    return a.start_ns < b.start_ns;
  });
}

void SampleAccount::group() {
  for (const RankGeneration& part : parts_) {
    const bool same = !generations_.empty() && generations_.back().world == part.world &&
                      generations_.back().from_step == part.from_step &&
                      generations_.back().ranks.count(part.rank) == 0;
    if (!same) {
      JobGeneration next;
      next.world = part.world;
      next.from_step = part.from_step;
      // What the job had taken at next.from_step: as the last generation
      // that began at or before it left the epoch.
      for (size_t i = generations_.size(); i-- > 0;) {
        const JobGeneration& g = generations_[i];
        if (g.from_step > next.from_step) continue;
        next.consumed =
            std::min(schedule_.samples,
                     g.consumed + (next.from_step - g.from_step) * schedule_.batch_size * g.world);
        break;
      }
      generations_.push_back(next);
    }
    generations_.back().ranks[part.rank] = part;
  }
  for (size_t g = 0; g < generations_.size(); ++g) {
    for (auto it = kept_.begin(); it != kept_.end();) {  // rolled back
      it = it->first > generations_[g].from_step ? kept_.erase(it) : std::next(it);
    }
    for (const auto& [rank, part] : generations_[g].ranks) {
      for (const auto& [step, batch] : part.batches) kept_[step] = g;
    }
  }
}

void SampleAccount::check() {
  if (generations_.empty()) {
    problems_.push_back("no worker logged a generation: is --sample-log given to the trainer?");
    return;
  }
  std::map<int64_t, std::vector<std::string>> expected_from;  // sample -> who should take it
  std::map<int64_t, int> taken, expected_count;
  for (size_t g = 0; g < generations_.size(); ++g) {
    const JobGeneration& gen = generations_[g];
    for (int rank = 0; rank < gen.world; ++rank) {
      data::DistributedSampler sampler(schedule_.samples, gen.world, rank,
                                       data::DistributedSamplerOptions().seed(schedule_.seed));
      sampler.restore_global(0, gen.consumed);
      const auto part = gen.ranks.find(rank);
      const bool logged = part != gen.ranks.end();
      if (!logged) problems_.push_back(who(gen, g, rank) + ": no process logged it");
      const std::map<int64_t, std::vector<int64_t>> none;
      const auto& batches = logged ? part->second.batches : none;
      int mismatches = 0;
      for (int64_t step = gen.from_step + 1;; ++step) {
        const std::vector<int64_t> expected = sampler.next(schedule_.batch_size);
        if (expected.empty()) break;
        const bool counts = kept_.count(step) && kept_.at(step) == g;
        const auto got = batches.find(step);
        const bool differs = got != batches.end() && got->second != expected;
        if (differs && ++mismatches <= 3) {
          problems_.push_back(who(gen, g, rank) + " took at step " + std::to_string(step) + " [" +
                              indices_text(got->second) + "] where its sampler gives [" +
                              indices_text(expected) + "]");
        } else if (differs && mismatches == 4) {
          problems_.push_back(who(gen, g, rank) + ": later steps differ from its sampler too");
        }
        if (!counts) continue;
        if (got == batches.end()) {
          problems_.push_back(who(gen, g, rank) + " logged no batch at step " +
                              std::to_string(step) + ", which the job kept");
        } else {
          for (int64_t i : got->second) ++taken[i];
        }
        for (int64_t i : expected) {
          ++expected_count[i];
          expected_from[i].push_back(who(gen, g, rank) + " at step " + std::to_string(step));
        }
      }
    }
  }
  int64_t padding = 0;
  for (const auto& [i, n] : expected_count) padding += n - 1;
  int64_t missing = 0, repeated = 0;
  for (int64_t i = 0; i < schedule_.samples; ++i) {
    const int n = taken.count(i) ? taken.at(i) : 0;
    repeated_ += std::max(0, n - 1);
    const int allowed = expected_count.count(i) ? expected_count.at(i) : 1;
    std::string whom;
    for (const auto& w : expected_from[i]) whom += (whom.empty() ? "" : "; ") + w;
    if (n == 0 && missing++ < 40) {
      problems_.push_back("sample " + std::to_string(i) + " was trained by no kept step; " +
                          (whom.empty() ? "no rank's sampler gave it" : "expected from " + whom));
    } else if (n > std::max(allowed, 1) && repeated++ < 40) {
      problems_.push_back("sample " + std::to_string(i) + " was trained " + std::to_string(n) +
                          " times (the sampler's padding allows " + std::to_string(allowed) +
                          "): expected from " + whom);
    }
  }
  if (missing > 40 || repeated > 40) {
    problems_.push_back(std::to_string(missing) + " samples missing and " +
                        std::to_string(repeated) + " repeated in all");
  }
  if (padding >= generations_.back().world) {
    problems_.push_back("the sampler's padding repeats " + std::to_string(padding) +
                        " samples, more than one per rank");
  }
}

std::string SampleAccount::report() const {
  std::ostringstream out;
  for (size_t g = 0; g < generations_.size(); ++g) {
    const JobGeneration& gen = generations_[g];
    out << "generation " << g << ": " << gen.world << " ranks from step " << gen.from_step << " ("
        << gen.consumed << " samples taken before it):";
    for (const auto& [rank, part] : gen.ranks) {
      out << " rank " << rank << " pid " << part.pid << " logged "
          << (part.batches.empty() ? std::string("no step")
                                   : "steps " + std::to_string(part.batches.begin()->first) + "-" +
                                         std::to_string(part.batches.rbegin()->first))
          << ";";
    }
    out << "\n";
  }
  for (const auto& p : problems_) out << "  " << p << "\n";
  return out.str();
}

EvidenceDirectory::EvidenceDirectory(const std::string& name)
    : path_(std::filesystem::path(::testing::TempDir()) /
            ("ddp-" + name + "-" + std::to_string(::getpid()))) {
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

EvidenceDirectory::~EvidenceDirectory() {
  if (::testing::Test::HasFailure() || std::getenv("DDP_KEEP_EVIDENCE") != nullptr) {
    std::cerr << "The workers' sample logs and the launchers' outputs are kept in "
              << path_.string() << std::endl;
    return;
  }
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string EvidenceDirectory::keep(const std::string& name, const std::string& text) const {
  const std::string file = (path_ / name).string();
  std::ofstream(file) << text;
  return file;
}

}  // namespace ddp::launch
