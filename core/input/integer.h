// Integers from the environment and the command line (RANK, WORLD_SIZE, ports), parsed strictly:
// all of the text, decimal, in range, no wrap-around ("4294967297" is not rank 1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rv {

// `text` as an integer in [lo, hi]; throws rv::InputError("<what>='<text>': ...") otherwise.
int64_t parse_integer(std::string_view text, int64_t lo, int64_t hi, const std::string& what);

}  // namespace rv
