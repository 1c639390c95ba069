// Shared bits of the benchmarks: wall-clock timing and writing a JSON figure file.
#pragma once

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

namespace rv::bench {

inline double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Prints `j` and, if `path` is not empty, writes it there.
inline void emit(const nlohmann::json& j, const std::string& path) {
  std::cout << j.dump(2) << std::endl;
  if (!path.empty()) std::ofstream(path) << j.dump(2) << "\n";
}

}  // namespace rv::bench
