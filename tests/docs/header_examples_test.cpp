// DocsHeaderExamples: the examples in the public headers' comments compile.
// The build compiles them (the generated header_examples.cpp, from
// cmake/ExtractHeaderExamples.cmake), so this binary exists only if every
// extracted example compiled and linked; the test checks that none was left
// out, by counting the `\code` markers in the headers here, apart from the
// generator's scan.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "header_example_sources.hpp"

namespace {

/// The `\code` markers of every header under include/ddp/, by header
/// (relative to include/): a plain count of the text, whatever the comment.
std::map<std::string, int> code_markers(const std::filesystem::path& include_dir) {
  std::map<std::string, int> markers;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(include_dir / "ddp")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".hpp") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string content = text.str();
    int count = 0;
    for (size_t at = content.find("\\code"); at != std::string::npos;
         at = content.find("\\code", at + 1)) {
      ++count;
    }
    if (count > 0) {
      markers[std::filesystem::relative(entry.path(), include_dir).generic_string()] = count;
    }
  }
  return markers;
}

}  // namespace

TEST(DocsHeaderExamples, EveryExampleCompiles) {
  const std::map<std::string, int> markers = code_markers(DDP_INCLUDE_DIR);
  int marked = 0;
  for (const auto& [header, count] : markers) marked += count;

  std::map<std::string, int> compiled;
  for (const auto* source = header_examples::kHeaderExampleSources; source->header; ++source) {
    ++compiled[source->header];
  }
  EXPECT_GT(marked, 0) << "no \\code marker under " << DDP_INCLUDE_DIR << "/ddp";
  EXPECT_EQ(header_examples::kHeaderExampleCount, marked)
      << "examples compiled vs \\code markers in the headers";
  std::string differing;
  for (const auto& [header, count] : markers) {
    const int extracted = compiled.count(header) ? compiled.at(header) : 0;
    if (extracted != count) {
      differing += "\n  include/" + header + ": " + std::to_string(count) + " \\code marker(s), " +
                   std::to_string(extracted) + " example(s) compiled";
    }
  }
  EXPECT_TRUE(differing.empty())
      << "an example the generator did not extract (it takes a block that opens with a line "
         "that is only `/// \\code` and closes with one that is only `/// \\endcode`):"
      << differing;
}
