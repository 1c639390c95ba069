// The README's scenario key list (the lines between its markers), for the tests that hold it to
// the key table and the registry.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "catch.h"

namespace rv::test {

inline std::string readme_keys() {
  std::ifstream in(RV_SOURCE_DIR "/README.md");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string begin = "<!-- keys:begin -->\n", end = "<!-- keys:end -->";
  const size_t b = text.find(begin), e = text.find(end);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  REQUIRE(b < e);
  return text.substr(b + begin.size(), e - b - begin.size());
}

}  // namespace rv::test
