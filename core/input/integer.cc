#include "core/input/integer.h"

#include <charconv>

#include "core/error.h"

namespace rv {

int64_t parse_integer(std::string_view text, int64_t lo, int64_t hi, const std::string& what) {
  const std::string shown(text.substr(0, 40));
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec == std::errc::invalid_argument || r.ptr != end)
    throw InputError(what + "='" + shown + "' is not a decimal integer");
  if (r.ec == std::errc::result_out_of_range || v < lo || v > hi)
    throw InputError(what + "='" + shown + "' is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return v;
}

}  // namespace rv
