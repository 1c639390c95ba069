// TOML text checked against limits before toml++ reads it (core/input/toml_input.h): each limit
// refuses its case with the offending line, at the limit plus one and not at the limit; strings,
// comments and quoted keys do not count as structure; every shipped scenario and profile passes.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "catch.h"
#include "core/error.h"
#include "core/input/toml_input.h"

using namespace rv;

namespace {

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// The message of check_toml_limits() on `text`, or "" if it passes.
std::string refusal(const std::string& text, const TomlLimits& limits = {}) {
  try {
    check_toml_limits(text, "f.toml", limits);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

// "<n> dotted parts": a.a.a
std::string dotted(size_t n) { return "a" + repeat(".a", n - 1); }

}  // namespace

TEST_CASE("keys and headers of more parts than the limit are refused, naming the line") {
  const int max = TomlLimits().max_key_parts;
  CHECK(refusal("x = 1\n[" + dotted(max) + "]\ny = 2\n").empty());
  CHECK_THAT(refusal("x = 1\n[" + dotted(max + 1) + "]\n"),
             Catch::Matchers::StartsWith("f.toml:2: a key of more than"));
  CHECK_THAT(refusal("\n\n[[" + dotted(max + 1) + "]]\n"),
             Catch::Matchers::StartsWith("f.toml:3: "));
  CHECK(refusal(dotted(max) + " = 1\n").empty());
  CHECK_THAT(refusal(dotted(max + 1) + " = 1\n"),
             Catch::Matchers::StartsWith("f.toml:1: a key of more than"));
  // Keys inside inline tables, after '{' and after ','.
  CHECK(refusal("t = { " + dotted(max) + " = 1, b = 2 }\n").empty());
  CHECK_THAT(refusal("t = { b = 1, " + dotted(max + 1) + " = 2 }\n"),
             Catch::Matchers::StartsWith("f.toml:1: a key of"));
  // Dots inside quoted keys are one part.
  CHECK(refusal("\"" + repeat("a.", 100) + "\" = 1\n").empty());
  CHECK(refusal("[x.'" + repeat("a.", 100) + "']\n").empty());
  // What toml++ would do with the refused case: recurse once per part (crashed at 40,000).
  CHECK_THAT(refusal("[" + dotted(40000) + "]\n"), Catch::Matchers::StartsWith("f.toml:1: "));
}

TEST_CASE("arrays and inline tables nested past the limit are refused") {
  const int max = TomlLimits().max_nesting;
  CHECK(refusal("a = " + repeat("[", max) + repeat("]", max) + "\n").empty());
  CHECK_THAT(refusal("a = " + repeat("[", max + 1) + repeat("]", max + 1) + "\n"),
             Catch::Matchers::StartsWith("f.toml:1: arrays and inline tables nested"));
  CHECK_THAT(refusal("a = 1\nb = " + repeat("{ c = ", max + 1) + "1" + repeat("}", max + 1) + "\n"),
             Catch::Matchers::StartsWith("f.toml:2: "));
  // Arrays span lines; the line named is the one where the limit is passed.
  CHECK_THAT(refusal("a = [\n" + repeat("[\n", max) + "]\n"),
             Catch::Matchers::StartsWith("f.toml:" + std::to_string(max + 1) + ": "));
  // Brackets in strings and comments are text.
  CHECK(refusal("a = \"" + repeat("[", 1000) + "\"  # " + repeat("{", 1000) + "\n").empty());
  CHECK(refusal("a = '''\n" + repeat("[{", 1000) + "\n'''\nb = 1\n").empty());
  CHECK(refusal("a = \"\"\"x\\\"\"\"" + repeat("[", 100) + "\"\"\"\n").empty());
}

TEST_CASE("strings, arrays and files past their limits are refused") {
  TomlLimits small;
  small.max_string_bytes = 100;
  small.max_array_elements = 10;
  small.max_bytes = 1000;
  CHECK(refusal("a = \"" + repeat("x", 98) + "\"\n", small).empty());
  CHECK_THAT(refusal("a = 1\n\nb = \"" + repeat("x", 99) + "\"\n", small),
             Catch::Matchers::StartsWith("f.toml:3: a string of more than 100"));
  // A multi-line string is named at its first line.
  CHECK_THAT(refusal("a = '''\n" + repeat("y\n", 60) + "'''\n", small),
             Catch::Matchers::StartsWith("f.toml:1: a string"));
  CHECK(refusal("a = [" + repeat("1, ", 9) + "1]\n", small).empty());
  CHECK(refusal("a = [\n" + repeat("  \"x\",  # c,\n", 10) + "]\n", small).empty());
  CHECK_THAT(refusal("a = [" + repeat("1, ", 10) + "1]\n", small),
             Catch::Matchers::StartsWith("f.toml:1: an array of more than 10"));
  CHECK_THAT(refusal("a = [" + repeat("[], ", 10) + "[]]\n", small),
             Catch::Matchers::StartsWith("f.toml:1: an array"));
  // Elements of inner arrays count for their own array.
  CHECK(refusal("a = [" + repeat("[1, 2, 3, 4, 5, 6], ", 9) + "[]]\n", small).empty());
  CHECK_THAT(refusal(repeat("# padding\n", 101), small),
             Catch::Matchers::StartsWith("f.toml: the file has 1010 bytes"));
}

TEST_CASE("parse_toml names the line of a syntax error and parses what passes") {
  try {
    parse_toml("a = 1\nb = [1,\n", "f.toml");
    FAIL("no error");
  } catch (const ScenarioError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Matchers::StartsWith("f.toml:"));
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("TOML syntax error"));
  }
  const toml::table t = parse_toml("[x]\ny = \"a.b[c]\" # ]\n", "f.toml");
  CHECK(t["x"]["y"].value<std::string>() == "a.b[c]");
}

TEST_CASE("every shipped scenario and profile is within the limits") {
  int files = 0;
  for (const char* folder : {"scenarios", "profiles"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(
             std::filesystem::path(RV_SOURCE_DIR) / folder)) {
      if (e.path().extension() != ".toml") continue;
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      INFO(e.path());
      CHECK_NOTHROW(parse_toml(ss.str(), e.path().string()));
      ++files;
    }
  }
  CHECK(files >= 10);  // the folders were found
}
