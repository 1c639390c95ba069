// core/spawn.h: a child's exit status, its output in a file or a descriptor, a signal's status,
// and a program that cannot start.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "catch.h"
#include "core/error.h"
#include "core/spawn.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a child's exit status, and its output in a file or on a descriptor", "[spawn]") {
  CHECK(wait_process(spawn_process("/bin/sh", {"sh", "-c", "exit 0"})) == 0);
  CHECK(wait_process(spawn_process("/bin/sh", {"sh", "-c", "exit 3"})) == 3);
  // A signal reads as a shell reports it.
  CHECK(wait_process(spawn_process("/bin/sh", {"sh", "-c", "kill -9 $$"})) == 128 + 9);

  const fs::path dir = fs::temp_directory_path() / ("rv-spawn-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path log = dir / "log.txt";
  std::ofstream(log) << "old text, truncated\n";
  SpawnOptions to_file;
  to_file.output_file = log.string();
  CHECK(wait_process(spawn_process("/bin/sh", {"sh", "-c", "echo out; echo err >&2"}, to_file)) ==
        0);
  CHECK(read_file(log) == "out\nerr\n");

  std::FILE* f = std::fopen((dir / "fd.txt").c_str(), "w");
  REQUIRE(f != nullptr);
  SpawnOptions to_fd;
  to_fd.output_fd = fileno(f);
  CHECK(wait_process(spawn_process("/bin/sh", {"sh", "-c", "echo fd"}, to_fd)) == 0);
  std::fclose(f);
  CHECK(read_file(dir / "fd.txt") == "fd\n");
  fs::remove_all(dir);
}

TEST_CASE("a program that cannot start is an error naming it", "[spawn]") {
  try {
    spawn_process("/no/such/program", {"program"});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("cannot start /no/such/program") != std::string::npos);
  }
}
