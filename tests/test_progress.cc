// The progress line (exec/progress.h): percentage, the run's clock, loss, and the rate and time
// left, from values given here (the wall clock is the caller's; nothing here reads a clock).
#include "catch.h"
#include "core/output/metrics.h"
#include "core/output/provenance.h"
#include "exec/progress.h"

using namespace rv;

TEST_CASE("progress: rate and time left from the updates done and the wall time gone",
          "[progress]") {
  // 250 of 1000 updates in 50 s: 5 updates/s, 750 left: 150 s.
  const std::string line = progress_line(250, 1000, "simulated", 12.5, 0.6931, 50.0);
  CHECK(line.find("[ 25.0%]") != std::string::npos);
  CHECK(line.find("simulated time 12.50 s") != std::string::npos);
  CHECK(line.find("loss 0.6931") != std::string::npos);
  CHECK(line.find("5 updates/s") != std::string::npos);
  CHECK(line.find("ETA 0:02:30") != std::string::npos);
  // Hours, and no loss yet.
  const std::string slow = progress_line(1, 7201, "wall", 3.0, kNaN, 1.0);
  CHECK(slow.find("loss") == std::string::npos);
  CHECK(slow.find("ETA 2:00:00") != std::string::npos);
  // Nothing done, or no time gone: no rate to go by, so none shown.
  CHECK(progress_line(0, 100, "wall", 0, kNaN, 10.0).find("ETA") == std::string::npos);
  CHECK(progress_line(5, 100, "wall", 0, kNaN, 0.0).find("ETA") == std::string::npos);
}

TEST_CASE("provenance: command lines read back as the shell would", "[progress][output]") {
  CHECK(shell_join({"ravnest", "sim", "a.toml"}) == "ravnest sim a.toml");
  CHECK(shell_join({"ravnest", "--set", "training.algorithm=\"gpipe\""}) ==
        "ravnest --set 'training.algorithm=\"gpipe\"'");
  CHECK(shell_join({"it's", ""}) == "'it'\\''s' ''");
}
