// Files written whole or not at all: the text goes to a temporary file beside the target
// (".<name>.partial.<pid>"), is flushed and closed, and is renamed over the target only then. A
// failure (a full disk, a missing folder) leaves the target as it was (an older plan.json
// survives) and no temporary file behind.
#pragma once

#include <string>

namespace rv {

// Throws rv::Error("<path>: cannot write (<reason>)") on failure.
void write_whole_file(const std::string& path, const std::string& text);

}  // namespace rv
