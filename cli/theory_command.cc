#include "cli/theory_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/output/whole_file.h"
#include "theory/measure.h"

namespace fs = std::filesystem;

namespace rv {
int cmd_theory(const std::vector<std::string>& runs, const std::string& out, bool plot,
               const std::string& self_exe) {
  // Every run measured before anything is written: one bad folder stops the command cleanly.
  std::vector<TheoryMeasure> measures;
  for (const std::string& r : runs) measures.push_back(measure_run(r));
  int violated = 0;
  for (const TheoryMeasure& m : measures) {
    write_whole_file((fs::path(m.run) / "theory.json").string(), theory_json(m).dump(2) + "\n");
    write_whole_file((fs::path(m.run) / "theory.csv").string(), theory_csv(m));
    std::cout << m.run << ": " << theory_line(m) << "\n";
    if (m.violated()) ++violated;
  }
  int status = 0;
  if (plot) {
    std::vector<std::string> args = runs;
    if (!out.empty()) args.insert(args.end(), {"--out", out});
    args.push_back("--theory");
    status = cmd_report(self_exe, args);
  }
  if (violated == 0) return status;
  // The detection rule of docs/theory.md fired: the runs are written and drawn all the same.
  std::cerr << "ravnest theory: " << violated << " of " << measures.size()
            << " run(s) violate their bound or their configuration (see VIOLATED above)\n";
  return status != 0 ? status : kExitViolated;
}

}  // namespace rv
