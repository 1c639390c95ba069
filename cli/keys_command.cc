#include "cli/keys_command.h"

#include <fmt/core.h>

#include <iostream>

#include "algo/registry.h"
#include "core/scenario/keys.h"

namespace rv {

int run_keys_command(bool markdown) {
  if (markdown) {
    std::cout << keys_markdown(registry_choices(), algorithm_key_rows());
    std::cout.flush();
    return 0;
  }
  std::cout << keys_text(registry_choices(), algorithm_key_rows());
  std::cout << "\nalgorithms (training.algorithm)\n";
  for (const Algorithm& a : algorithms())
    std::cout << fmt::format("  {:<14}{}\n", a.name, a.summary);
  std::cout << "\nall-reduces (training.allreduce)\n";
  for (const Allreduce& a : allreduces())
    std::cout << fmt::format("  {:<14}{}\n", a.name, a.summary);
  std::cout.flush();
  return 0;
}

}  // namespace rv
