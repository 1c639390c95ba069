#include "core/input/toml_input.h"

#include <vector>

#include "core/error.h"

namespace rv {
namespace {

// One pass over TOML text, following the grammar far enough to tell keys from values and strings
// and comments from structure: at the start of a line a key (counting its parts) or a table
// header; after '=' a value, in which '[' and '{' open arrays and inline tables (whose keys are
// counted too) and ',' separates elements. Every character is looked at once; nothing recurses.
class LimitScanner {
 public:
  LimitScanner(std::string_view text, const std::string& source, const TomlLimits& limits)
      : t_(text), source_(source), lim_(limits) {}

  void run() {
    if (t_.size() > lim_.max_bytes)
      throw ScenarioError(source_, "",
                          "the file has " + std::to_string(t_.size()) +
                              " bytes, more than the limit of " + std::to_string(lim_.max_bytes));
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '\n') {
        newline();
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        skip_comment();
      } else if (c == '[') {
        header();
      } else {
        key(']');  // a key-value pair: the key, '=', the value to the end of its line
        if (i_ < t_.size() && t_[i_] == '=') {
          ++i_;
          value();
        } else {
          skip_line();  // not TOML: toml++ reports it
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ScenarioError(source_ + ":" + std::to_string(line_), "", what);
  }

  void newline() {
    ++line_;
    ++i_;
  }

  void skip_comment() {
    while (i_ < t_.size() && t_[i_] != '\n') ++i_;
  }

  void skip_line() {
    while (i_ < t_.size() && t_[i_] != '\n') {
      if (t_[i_] == '"' || t_[i_] == '\'')
        string();
      else
        ++i_;
    }
  }

  // `[a.b]` or `[[a.b]]`: its key; the rest of the line is a comment or not TOML.
  void header() {
    ++i_;
    if (i_ < t_.size() && t_[i_] == '[') ++i_;
    key(']');
    skip_line();
  }

  // A key (bare, quoted, dotted), up to '=' (left unread), `stop`, a newline or the end; counts
  // its parts.
  void key(char stop) {
    int parts = 1;
    const size_t begin = i_;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '=' || c == stop || c == '\n' || c == '#' || c == '}') return;
      if (c == '"' || c == '\'') {
        string();
        continue;
      }
      if (c == '.' && ++parts > lim_.max_key_parts)
        fail("a key of more than " + std::to_string(lim_.max_key_parts) + " parts (" +
             std::string(t_.substr(begin, 40)) + "...)");
      ++i_;
    }
  }

  // A string at i_ (basic or literal, one line or multi-line); i_ ends after it, or at the newline
  // that ends an unterminated one-line string.
  void string() {
    const char q = t_[i_];
    const size_t begin = i_;
    const int first_line = line_;
    const bool multi = t_.substr(i_, 3) == std::string_view(q == '"' ? "\"\"\"" : "'''");
    i_ += multi ? 3 : 1;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '\\' && q == '"') {
        i_ += 2;
        continue;
      }
      if (c == '\n') {
        if (!multi) break;
        ++line_;
      }
      if (c == q) {
        if (!multi) {
          ++i_;
          break;
        }
        if (t_.substr(i_, 3) == std::string_view(q == '"' ? "\"\"\"" : "'''")) {
          i_ += 3;
          // Up to two more quotes belong to the content: """a"""" is `a"`.
          for (int k = 0; k < 2 && i_ < t_.size() && t_[i_] == q; ++k) ++i_;
          break;
        }
      }
      ++i_;
    }
    if (i_ > t_.size()) i_ = t_.size();
    if (i_ - begin > lim_.max_string_bytes) {
      line_ = first_line;
      fail("a string of more than " + std::to_string(lim_.max_string_bytes) + " bytes");
    }
  }

  // A value, up to the newline that ends it (arrays span lines); inline tables' keys are counted.
  void value() {
    struct Open {
      char kind;            // '[' or '{'
      size_t elements = 0;  // of an array
      bool between = true;  // after '[' or ',': the next character that is not space starts one
    };
    std::vector<Open> open;
    // Counts an element of the innermost array at the first character of it.
    auto element = [&] {
      if (open.empty() || open.back().kind != '[' || !open.back().between) return;
      open.back().between = false;
      if (++open.back().elements > lim_.max_array_elements)
        fail("an array of more than " + std::to_string(lim_.max_array_elements) + " elements");
    };
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '\n') {
        if (open.empty()) return;
        newline();
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        skip_comment();
      } else if (c == '"' || c == '\'') {
        element();
        string();
      } else if (c == '[' || c == '{') {
        element();
        if (open.size() >= static_cast<size_t>(lim_.max_nesting))
          fail("arrays and inline tables nested more than " + std::to_string(lim_.max_nesting) +
               " deep");
        open.push_back({c});
        ++i_;
        if (c == '{') inline_key();
      } else if (c == ']' || c == '}') {
        if (!open.empty()) open.pop_back();
        ++i_;
      } else if (c == ',') {
        ++i_;
        if (!open.empty()) {
          open.back().between = true;
          if (open.back().kind == '{') inline_key();
        }
      } else {
        element();
        ++i_;
      }
    }
  }

  // In an inline table, after '{' or ',': its next key and the '='.
  void inline_key() {
    key('}');
    if (i_ < t_.size() && t_[i_] == '=') ++i_;
  }

  std::string_view t_;
  const std::string& source_;
  const TomlLimits& lim_;
  size_t i_ = 0;
  int line_ = 1;
};

}  // namespace

void check_toml_limits(std::string_view text, const std::string& source, const TomlLimits& limits) {
  LimitScanner(text, source, limits).run();
}

toml::table parse_toml(std::string_view text, const std::string& source, const TomlLimits& limits) {
  check_toml_limits(text, source, limits);
  try {
    return toml::parse(text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    throw ScenarioError(source + ":" + std::to_string(e.source().begin.line), "",
                        "TOML syntax error: " + std::string(e.description()));
  }
}

}  // namespace rv
