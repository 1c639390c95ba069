// Reading TOML that a user wrote (scenarios, compute profiles, --set values) without trusting it.
//
// toml++ builds its tables recursively: a header `[a.a.a...]` or a dotted key of tens of thousands
// of parts overflows the stack before any error is raised. parse_toml() therefore reads the text
// once first, with the grammar's own rules for strings, comments, keys and values, and refuses it
// if it passes a limit below; only then does toml++ parse it. Each limit is far above what a
// scenario needs (its deepest key has 3 parts, its longest array one entry per node).
//
// Contract: parse_toml() returns the parsed table or throws rv::ScenarioError whose `where` is
// "source:line" (the line of the offending text; for a file over the size limit, "source"), with
// an empty key. It reads `text` only.
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace rv {

struct TomlLimits {
  size_t max_bytes = size_t{4} << 20;          // the whole text
  int max_key_parts = 16;                      // parts of one key or table header: a.b.c is 3
  int max_nesting = 32;                        // arrays and inline tables inside one another
  size_t max_string_bytes = size_t{64} << 10;  // one string, as written (escapes included)
  size_t max_array_elements = 200000;          // elements of one array (one per node, at most)
};

// Throws rv::ScenarioError at the first limit `text` passes. Text that is not valid TOML may pass:
// toml++ then reports it (the check only follows the grammar as far as toml++ would read).
void check_toml_limits(std::string_view text, const std::string& source,
                       const TomlLimits& limits = {});

// check_toml_limits(), then toml++; a syntax error becomes rv::ScenarioError("source:line", "",
// "TOML syntax error: ...").
toml::table parse_toml(std::string_view text, const std::string& source,
                       const TomlLimits& limits = {});

}  // namespace rv
