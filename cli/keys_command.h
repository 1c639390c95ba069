// `ravnest keys`: prints every scenario key (type, unit, default, range or choices, help) from the
// key table in core/scenario/keys.cc, with the names the registry (algo/registry.h) accepts for
// training.algorithm and training.allreduce.
#pragma once

namespace rv {

// Prints the key list to stdout: as the README's Markdown table when `markdown`, else as text
// followed by the registered algorithms and all-reduces with one line each. Returns the exit
// status (0).
int run_keys_command(bool markdown);

}  // namespace rv
