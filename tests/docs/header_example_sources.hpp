#pragma once

// What the generated header_examples.cpp (cmake/ExtractHeaderExamples.cmake)
// tells header_examples_test.cpp about the examples it compiled, apart from
// header_example_context.hpp, which the examples themselves need (all of
// ddp), so that the test does not compile against every public header.

namespace header_examples {

/// Where an example came from: its header (relative to include/) and the
/// line of its `\code`.
struct HeaderExampleSource {
  const char* header;
  int line;
};

/// Defined by the generated header_examples.cpp: the examples it compiled,
/// and their sources (ending with {nullptr, 0}).
extern const int kHeaderExampleCount;
extern const HeaderExampleSource kHeaderExampleSources[];

}  // namespace header_examples
