// `ravnest theory RUN...`: runs on problems with known constants measured against the convergence
// bound (theory/measure.h): writes theory.json and theory.csv into each run folder, prints
// one line per run (measured, bound, their ratio, the theorem, whether eta, T and C meet its
// condition, the paper's condition beside it, and what the run violates), and
// draws the measured running average beside the bound (theory.png, by analysis/report.py).
#pragma once

#include <string>
#include <vector>

namespace rv {

// The exit status when a run breaks its bound or its configuration (the detection rule of
// docs/theory.md): everything is written and drawn first.
constexpr int kExitViolated = 1;

// Exit status 0, or kExitViolated; rv::InputError (status 2) for a folder that is not such a run.
// `self_exe`: this binary's path (cmd_report finds the script beside it).
int cmd_theory(const std::vector<std::string>& runs, const std::string& out, bool plot,
               const std::string& self_exe);

}  // namespace rv
