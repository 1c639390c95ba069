// Files written whole or not at all (core/output/whole_file.h): a write replaces the target; a
// failed one leaves the target as it was and no temporary file behind, including on a full disk
// (a 64 KiB tmpfs: needs root, skipped otherwise).
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "catch.h"
#include "core/error.h"
#include "core/output/whole_file.h"

using namespace rv;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("rv-whole-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

size_t entries(const fs::path& d) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(d)) (void)e, ++n;
  return n;
}

}  // namespace

TEST_CASE("a whole write replaces the target, a failed one keeps it") {
  const fs::path d = fresh_dir("replace");
  const fs::path target = d / "plan.json";
  write_whole_file(target.string(), "old\n");
  CHECK(slurp(target) == "old\n");
  write_whole_file(target.string(), "new\n");
  CHECK(slurp(target) == "new\n");
  CHECK(entries(d) == 1);
  // The temporary name taken by a folder: the write fails before touching the target.
  fs::create_directories(d / (".plan.json.partial." + std::to_string(::getpid())));
  CHECK_THROWS_AS(write_whole_file(target.string(), "newer\n"), Error);
  CHECK(slurp(target) == "new\n");
  // A missing folder.
  CHECK_THROWS_AS(write_whole_file((d / "no" / "x.json").string(), "x"), Error);
  fs::remove_all(d);
}

TEST_CASE("a full disk keeps the older file and leaves no temporary file") {
  if (::geteuid() != 0) {
    std::cout << "SKIPPED: needs root to mount a small tmpfs\n";
    return;
  }
  const fs::path d = fresh_dir("full");
  if (::mount("tmpfs", d.c_str(), "tmpfs", 0, "size=64k") != 0) {
    std::cout << "SKIPPED: cannot mount a tmpfs here\n";
    return;
  }
  const fs::path target = d / "plan.json";
  write_whole_file(target.string(), "old\n");
  try {
    write_whole_file(target.string(), std::string(1 << 20, 'x'));
    FAIL("a 1 MiB write fitted into 64 KiB");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("plan.json: cannot write"));
  }
  CHECK(slurp(target) == "old\n");
  CHECK(entries(d) == 1);
  ::umount(d.c_str());
  fs::remove_all(d);
}
