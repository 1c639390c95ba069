#include "cli/theory_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "theory/measure.h"

namespace fs = std::filesystem;

namespace rv {
namespace {

// Written beside the target, then renamed into place: never half a file.
void write_whole(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".partial");
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) throw Error(tmp.string() + ": cannot write");
  }
  fs::rename(tmp, path);
}

}  // namespace

int cmd_theory(const std::vector<std::string>& runs, const std::string& out, bool plot) {
  // Every run measured before anything is written: one bad folder stops the command cleanly.
  std::vector<TheoryMeasure> measures;
  for (const std::string& r : runs) measures.push_back(measure_run(r));
  for (const TheoryMeasure& m : measures) {
    write_whole(fs::path(m.run) / "theory.json", theory_json(m).dump(2) + "\n");
    write_whole(fs::path(m.run) / "theory.csv", theory_csv(m));
    std::cout << m.run << ": " << theory_line(m) << "\n";
  }
  if (!plot) return 0;
  return cmd_report(runs, out, "", {"--theory"});
}

}  // namespace rv
