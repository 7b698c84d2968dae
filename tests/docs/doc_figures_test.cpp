// The figures the README and the guides quote come from the latest recorded
// results (docs/figures.json): each is written VALUE<!-- figure KEY --> and
// must be that key's recorded value, every key must be quoted somewhere, and
// no marker may name a key that is not recorded.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Quote {
  std::string file;
  int line = 0;
  std::string before;  // the line's text up to the marker, bold marks dropped
  std::string key;
};

// Every VALUE<!-- figure KEY --> of README.md and docs/**/*.md: VALUE is
// what ends the text before the marker on its line (it may hold spaces).
std::vector<Quote> quotes_in(const fs::path& source) {
  std::vector<fs::path> files{source / "README.md"};
  for (const auto& entry : fs::recursive_directory_iterator(source / "docs")) {
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  }
  const std::regex marker(R"(<!-- figure ([a-z0-9_]+) -->)");
  std::vector<Quote> quotes;
  for (const auto& file : files) {
    std::istringstream lines(read_text(file));
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      for (std::sregex_iterator it(line.begin(), line.end(), marker), end; it != end; ++it) {
        std::string before = line.substr(0, it->position());
        while (!before.empty() && before.back() == '*') before.pop_back();
        quotes.push_back({fs::relative(file, source).string(), number, before, (*it)[1]});
      }
      if (line.find("<!-- figure") != std::string::npos && !std::regex_search(line, marker)) {
        quotes.push_back({fs::relative(file, source).string(), number, "", "(malformed)"});
      }
    }
  }
  return quotes;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() &&
         text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(DocsFigures, EachQuotedFigureIsTheLatestRecordedOne) {
  const fs::path source = DDP_SOURCE_DIR;
  const auto recorded = nlohmann::json::parse(read_text(source / "docs/figures.json"));
  const auto quotes = quotes_in(source);
  std::set<std::string> quoted;
  for (const auto& q : quotes) {
    const std::string where = q.file + ":" + std::to_string(q.line);
    ASSERT_TRUE(recorded.contains(q.key) && q.key[0] != '_')
        << where << " quotes figure '" << q.key
        << "', which docs/figures.json does not record: record it there or write the marker as "
           "VALUE<!-- figure KEY -->";
    const std::string value = recorded[q.key]["value"].get<std::string>();
    EXPECT_TRUE(ends_with(q.before, value))
        << where << " quotes " << q.key << " as \""
        << q.before.substr(q.before.size() > 24 ? q.before.size() - 24 : 0)
        << "\"; the latest recorded result (" << recorded[q.key]["by"].get<std::string>() << ", "
        << recorded[q.key]["recorded"].get<std::string>() << ") is " << value;
    quoted.insert(q.key);
  }
  for (const auto& [key, figure] : recorded.items()) {
    if (key[0] == '_') continue;
    EXPECT_TRUE(quoted.count(key)) << "docs/figures.json records '" << key
                                   << "', which no document quotes: remove it or quote it";
  }
}

}  // namespace
}  // namespace ddp::testing
