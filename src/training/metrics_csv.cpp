#include "ddp/training/metrics_csv.hpp"
#include "base/str.hpp"
#include "ddp/training/errors.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ddp::training {
namespace {

namespace fs = std::filesystem;

std::string format_row(const EpochMetrics& row) {
  char text[256];
  char accuracy[64] = "";
  if (row.accuracy) std::snprintf(accuracy, sizeof(accuracy), "%.6f", *row.accuracy);
  std::snprintf(text, sizeof(text), "%lld,%.6f,%s,%.1f,%.3f", static_cast<long long>(row.epoch),
                row.loss, accuracy, row.samples_per_s, row.seconds);
  return text;
}

[[noreturn]] void fail_writing(const std::string& path) {
  throw MetricsError("cannot write the metrics file '" + path + "': " + std::strerror(errno) +
                     "; give a path in a writable directory.");
}

// Writes `text` to `path` through a temporary file and a rename, so that a
// crash leaves the old file or the new one.
void replace_file(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "w");
  if (!file) fail_writing(path);
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (std::fclose(file) != 0 || !written) fail_writing(path);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) fail_writing(path);
}

double parse_number(const std::string& field, const std::string& what, const std::string& where) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(field.c_str(), &end);
  if (field.empty() || end != field.c_str() + field.size() || errno == ERANGE) {
    throw MetricsError(where + ": " + what + " is '" + field + "', not a number.");
  }
  return value;
}

}  // namespace

MetricsCsv::MetricsCsv(std::string path, int64_t completed_epochs) : path_(std::move(path)) {
  if (path_.empty()) {
    throw MetricsError("the metrics file path is empty; give a file name such as metrics.csv.");
  }
  const fs::path parent = fs::path(path_).parent_path();
  std::error_code error;
  if (!parent.empty()) fs::create_directories(parent, error);
  if (error) {
    throw MetricsError("cannot create the directory '" + parent.string() +
                       "' of the metrics file '" + path_ + "': " + error.message() + ".");
  }
  std::string text = std::string(kMetricsCsvHeader) + "\n";
  if (completed_epochs > 0 && fs::exists(path_)) {
    for (const EpochMetrics& row : read_metrics_csv(path_)) {
      if (row.epoch <= completed_epochs) text += format_row(row) + "\n";
    }
  }
  replace_file(path_, text);
}

void MetricsCsv::append(const EpochMetrics& row) {
  std::FILE* file = std::fopen(path_.c_str(), "a");
  if (!file) fail_writing(path_);
  const std::string text = format_row(row) + "\n";
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (std::fclose(file) != 0 || !written) fail_writing(path_);
}

std::vector<EpochMetrics> read_metrics_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw MetricsError("cannot read the metrics file '" + path + "': " + std::strerror(errno) +
                       ".");
  }
  std::string line;
  if (!std::getline(in, line) || line != kMetricsCsvHeader) {
    throw MetricsError("'" + path + "' is not a metrics file: its first line is '" + line +
                       "', expected '" + kMetricsCsvHeader + "'.");
  }
  std::vector<EpochMetrics> rows;
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const std::string where = base::detail::str("'", path, "' line ", number);
    std::vector<std::string> fields;
    std::stringstream split(line);
    for (std::string field; std::getline(split, field, ',');) fields.push_back(field);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    if (fields.size() != 5) {
      throw MetricsError(base::detail::str(where, " has ", fields.size(), " fields, expected 5 (",
                                           kMetricsCsvHeader, "): '", line, "'."));
    }
    EpochMetrics row;
    const double epoch = parse_number(fields[0], "the epoch", where);
    row.epoch = static_cast<int64_t>(epoch);
    if (static_cast<double>(row.epoch) != epoch) {
      throw MetricsError(where + ": the epoch is '" + fields[0] + "', not a whole number.");
    }
    row.loss = parse_number(fields[1], "the loss", where);
    if (!fields[2].empty()) row.accuracy = parse_number(fields[2], "the accuracy", where);
    row.samples_per_s = parse_number(fields[3], "samples_per_s", where);
    row.seconds = parse_number(fields[4], "seconds", where);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace ddp::training
