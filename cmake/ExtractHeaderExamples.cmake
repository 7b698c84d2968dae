# ExtractHeaderExamples.cmake: the usage examples of the public headers'
# comments as one C++ source, so that the build compiles every one of them
# (tests/docs/, suite DocsHeaderExamples).
#
#   cmake -DINCLUDE_DIR=<repo>/include -DOUTPUT=<file>.cpp -P ExtractHeaderExamples.cmake
#
# An example is the run of `///` lines between a line that is `/// \code` and
# one that is `/// \endcode`, in any .hpp under INCLUDE_DIR/ddp/. Each line
# loses its `///` and the one space after it. Example n of header <stem>.hpp
# becomes the body, in an inner block, of a member function
# `void example_<n>_<stem>()` of a struct derived from HeaderExampleContext
# (tests/docs/header_example_context.hpp), whose members stand for what the
# example takes from its surroundings (group, model, optimizer, ...), so a
# name the example declares itself shadows the placeholder. Two kinds of line
# are treated apart:
# - `#include` lines go to file scope, before every function: a header
#   included inside a function body would declare its names there.
# - An example that defines a function (a line at the example's own
#   indentation of the form `type name(...) {`, e.g. `int main() {`) is
#   emitted at namespace scope as it is, with `main` renamed
#   example_<n>_<stem>.
# Every example carries a #line directive, so a compiler error names the
# header and line the example came from. The source also defines
# kHeaderExampleCount and kHeaderExampleSources (header and line of each),
# which the test compares with the `\code` markers it counts in the headers.
# A `\code` not closed by `\endcode` before the comment ends stops the build;
# a marker written otherwise (`\code{.cpp}`, outside a `///` line) is not
# extracted, and the test's count names the header.

if(NOT INCLUDE_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "ExtractHeaderExamples: give -DINCLUDE_DIR=... and -DOUTPUT=...")
endif()

set(doc_line "^[ \t]*///")
set(code_marker "^[ \t]*///[ \t]*\\\\code[ \t]*$")
set(endcode_marker "^[ \t]*///[ \t]*\\\\endcode[ \t]*$")
set(include_line "^[ \t]*#[ \t]*include[ \t<\"]")
# A function definition's first line: type, name, parameters, brace.
set(function_line "^([ \t]*)[A-Za-z_][A-Za-z0-9_:<>]*[ \t*&]+")
string(APPEND function_line "[A-Za-z_][A-Za-z0-9_]*\\([^;=]*\\)[ \t]*(const[ \t]*)?[{][ \t]*$")

set(includes "")     # hoisted #include lines
set(declarations "") # the struct's member functions
set(members "")      # their definitions
set(free "")         # examples at namespace scope
set(sources "")      # {"ddp/x.hpp", line},
set(count 0)

file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/ddp/*.hpp")
list(SORT headers)
foreach(relative IN LISTS headers)
  set(header "${INCLUDE_DIR}/${relative}")
  file(READ "${header}" text)
  string(FIND "${text}" "\\code" any)
  if(any EQUAL -1)
    continue()
  endif()
  get_filename_component(stem "${relative}" NAME_WE)

  # Line by line with string(FIND): the text holds `;` and brackets, which a
  # CMake list would split on or join across.
  set(rest "${text}")
  set(line_number 0)
  set(inside FALSE)
  while(NOT rest STREQUAL "")
    string(FIND "${rest}" "\n" end)
    if(end EQUAL -1)
      set(line "${rest}")
      set(rest "")
    else()
      string(SUBSTRING "${rest}" 0 ${end} line)
      math(EXPR next "${end} + 1")
      string(SUBSTRING "${rest}" ${next} -1 rest)
    endif()
    math(EXPR line_number "${line_number} + 1")

    if(NOT inside)
      if(line MATCHES "${code_marker}")
        set(inside TRUE)
        set(start ${line_number})
        set(body "")
        set(body_includes "")
        set(at_namespace_scope FALSE)
        set(indent "")
        set(indent_known FALSE)
      endif()
      continue()
    endif()

    if(line MATCHES "${endcode_marker}")
      # The example is complete: emit it.
      math(EXPR count "${count} + 1")
      set(name "example_${count}_${stem}")
      string(APPEND sources "    {\"${relative}\", ${start}},\n")
      string(APPEND includes "${body_includes}")
      if(at_namespace_scope)
        string(REGEX REPLACE "([ \t*&])main\\(" "\\1${name}(" body "${body}")
        # The #line names the \code line, so the body's lines keep theirs.
        string(APPEND free "#line ${start} \"${header}\"\n// ${name}\n${body}\n")
      else()
        string(APPEND declarations "  void ${name}();\n")
        string(APPEND members
          "#line ${start} \"${header}\"\nvoid HeaderExamples::${name}() { {\n${body}} }\n")
      endif()
      set(inside FALSE)
      continue()
    endif()

    if(NOT line MATCHES "${doc_line}")
      message(FATAL_ERROR "${header}:${start}: this \\code block is not closed by a "
                          "`/// \\endcode` line before the comment ends (line ${line_number})")
    endif()
    string(REGEX REPLACE "^[ \t]*/// ?" "" code "${line}")
    if(code MATCHES "${include_line}")
      string(STRIP "${code}" code)
      string(APPEND body_includes "#line ${line_number} \"${header}\"\n${code}\n")
      string(APPEND body "\n")  # keeps the following lines' numbers
      continue()
    endif()
    if(NOT indent_known AND code MATCHES "[^ \t]")
      string(REGEX MATCH "^[ \t]*" indent "${code}")
      set(indent_known TRUE)
    endif()
    if(code MATCHES "${function_line}" AND CMAKE_MATCH_1 STREQUAL indent)
      set(at_namespace_scope TRUE)
    endif()
    string(APPEND body "${code}\n")
  endwhile()
  if(inside)
    message(FATAL_ERROR "${header}:${start}: this \\code block has no `/// \\endcode`")
  endif()
endforeach()

# The generated file's own lines name the generated file again.
macro(append_resuming_here)
  string(REGEX MATCHALL "\n" newlines "${out}")
  list(LENGTH newlines lines_so_far)
  math(EXPR resume "${lines_so_far} + 2")
  string(APPEND out "#line ${resume} \"${OUTPUT}\"\n")
endmacro()

set(out "\
// Generated by cmake/ExtractHeaderExamples.cmake from the \\code blocks of the
// public headers' comments: do not edit (edit the headers). Each example
// is compiled, never run; tests/docs/header_example_context.hpp declares
// the names the examples take from their surroundings.
#include \"header_example_context.hpp\"

// The examples' own #include lines.
${includes}")
append_resuming_here()
string(APPEND out "namespace header_examples {

struct HeaderExamples : HeaderExampleContext {
${declarations}};

${members}${free}")
append_resuming_here()
string(APPEND out "
const int kHeaderExampleCount = ${count};

const HeaderExampleSource kHeaderExampleSources[] = {
${sources}    {nullptr, 0},
};

}  // namespace header_examples
")
file(WRITE "${OUTPUT}" "${out}")
