// Inputs for fuzzing the project's two boundaries with the outside: scenario files (with --set
// overrides) and peers' message headers. Deterministic: the same seed gives the same cases.
//
// Scenario cases start from seed files (the shipped scenarios) and are either
//   - structure-aware: the seed parsed, then 1 to 4 edits of its tree driven by the key table
//     (a known key set to an edge value of its type or of another type, a key or table removed, an
//     unknown key added, a table replaced by a scalar, a device group duplicated or emptied, a pool
//     grown) and written back as TOML, sometimes with --set overrides; or
//   - byte-level: 1 to 16 edits of the text (bytes flipped, inserted, deleted; TOML punctuation
//     inserted; slices duplicated; the text cut), or structure near and past the input limits
//     (core/input/toml_input.h) spliced in.
// Frame cases are headers of real messages (wire_format.h) with words set to edge values or
// random, cut short, or random throughout.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace rv::fuzz {

struct ScenarioCase {
  std::string text;
  std::vector<std::string> overrides;  // --set KEY=VALUE
  const char* kind = "";               // the mutation class, for counts
};

class ScenarioMutator {
 public:
  // `seeds`: valid scenario texts.
  ScenarioMutator(std::vector<std::string> seeds, uint64_t seed);
  ScenarioCase next();

 private:
  ScenarioCase structural();
  ScenarioCase bytes();
  ScenarioCase limits();

  std::vector<std::string> seeds_;
  std::mt19937_64 rng_;
};

struct FrameCase {
  std::vector<int64_t> words;  // the header as received (its length: the words that arrived)
  const char* kind = "";
};

class FrameMutator {
 public:
  explicit FrameMutator(uint64_t seed);
  FrameCase next();

 private:
  std::mt19937_64 rng_;
};

}  // namespace rv::fuzz
