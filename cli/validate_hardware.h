// ravnest validate's second agreement, the model against hardware: the real run takes nothing from
// the model, and the simulation is told only what this host measured before it.
//
//  1. `ravnest calibrate --threads T` profiles one rank of this host computing alone (T LibTorch
//     threads, as `ravnest real` gives a rank). Not `--share K`: its load processes make the
//     cores' time-sharing part of a calibration by chance (each operation is timed by itself, and
//     its median call is interrupted or not); the simulation shares the cores instead (3).
//  2. The real run: each node computes at this host's own speed (real.emulate_speed = false), and
//     its messages cross real TCP through the kernel shaper (real.shaper = "kernel": htb for the
//     bandwidths, rv-delay-line on the packet path for the latencies, so that TCP sees the round
//     trip), undilated.
//  3. The simulation of the same scenario with every device computing as the profile says (its
//     tflops the profile's peak, its profile the profile) and the scenario's own links, its nodes
//     sharing this host's cores as the real run's ranks do (sim.shared_cores = the host's cores).
//  4. After the real run, the same calibration again (host-after.toml).
// Then the two runs' figures side by side (core/output/validation.h, agreement "hardware"), and
// the check that the host computed at one speed over the run: the median over the real run's
// compute spans of their modeled time under the calibration after it over that under the one
// before, within kComputeTolerance (core/output/validation.h) of 1. A run whose host drifted is
// flagged in the verdict, never dropped: a shared host's noise shows there. The real spans' own
// time against the calibration before (compute_ratio) is reported beside it, not judged: it
// holds the model's error on those spans as well as any drift, and the two cannot be told apart
// from it alone.
//
// Root only (the kernel shaper); elsewhere the figure is reported as not measured, with why: the
// user-space shaper is the network model itself, so a run through it measures nothing of the
// network against hardware.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"

namespace rv {

// Why this host cannot measure scenario `s` against hardware ("" when it can).
std::string hardware_unmeasurable(const Scenario& s);

// Runs 1-4 above in `dir` (made; calibrate.txt, host.toml, real/, calibrate-after.txt,
// host-after.toml, sim/) for the scenario of `o`,
// and returns validate.json's "model_against_hardware": {"measured": false, "why": ...} where
// hardware_unmeasurable says so, else compare_runs() of sim/ and real/ with the calibration.
// `self_exe`: this program, run for the calibration and the simulation (SimGrid runs once per
// process); `quick`: the calibration's fewer shapes and repeats (`calibrate --quick`: tests).
// rv::Error if a step fails.
nlohmann::json validate_against_hardware(const CommonOptions& o, const std::string& self_exe,
                                         const Scenario& s, const std::filesystem::path& dir,
                                         bool quick = false);

}  // namespace rv
