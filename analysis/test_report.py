"""Tests for analysis/report.py on small fake run folders.

Run from the repository root:  /usr/bin/python3 -m unittest analysis/test_report.py
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.py")
HEADER = "kind,node,cluster,stage,step,micro_batch,start_s,end_s,loss,accuracy,staleness,bytes,peer,samples,cpu_s,grad_norm2"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(folder, name="quick", algorithm="ravnest", executor="sim", with_loss=True,
             clusters=2, stages=2, micro_batches=60, batch=16, training="", variant=None):
    """Writes a fake run folder: a GPipe schedule per cluster (bubbles), losses, evals."""
    os.makedirs(folder, exist_ok=True)
    rows, evals, per_node = [HEADER], ["time_s,node,cluster,step,train_samples,test_loss,test_accuracy"], []
    t_f, t_b, t_u, group = 0.010, 0.020, 0.002, 8
    end_time = 0.0
    for c in range(clusters):
        free = [0.001 * c] * stages  # list-scheduled GPipe: forwards, backwards, flush
        busy = [0.0] * stages
        for g0 in range(0, micro_batches, group):
            mbs = range(g0, min(g0 + group, micro_batches))
            done = {}
            for m in mbs:
                for s in range(stages):
                    node, start = c * stages + s, max(free[s], done.get((s - 1, m), 0.0))
                    free[s] = done[(s, m)] = start + t_f
                    busy[s] += t_f
                    rows.append(f"forward,{node},{c},{s},{m},{m},{start:.6f},{free[s]:.6f},,,,,,")
                    rows.append(f"send,{node},{c},{s},{m},{m},{free[s]:.6f},{free[s]:.6f},,,,4096,{node + 1},")
                    if with_loss and s == stages - 1:
                        rows.append(f"loss,{node},{c},{s},{m},{m},,{free[s]:.6f},"
                                    f"{2.3 * 0.97 ** m:.5f},,,,,{(m + 1) * batch}")
            for m in reversed(mbs):
                for s in reversed(range(stages)):
                    node, start = c * stages + s, max(free[s], done.get((s + 1, -1 - m), done[(s, m)]))
                    free[s] = done[(s, -1 - m)] = start + t_b
                    busy[s] += t_b
                    rows.append(f"backward,{node},{c},{s},{m},{m},{start:.6f},{free[s]:.6f},,,,,,")
            for s in range(stages):
                node = c * stages + s
                rows.append(f"update,{node},{c},{s},{g0},,{free[s]:.6f},{free[s] + t_u:.6f},,,1,,,")
                free[s] += t_u
                busy[s] += t_u
                if g0 % 24 == 16:  # an evaluation forward now and then
                    rows.append(f"forward,{node},{c},{s},{g0},-1,{free[s]:.6f},{free[s] + 0.005:.6f},,,,,,")
                    free[s] += 0.005
                    busy[s] += 0.005
                    if s == stages - 1:
                        acc = 0.5 + 0.4 * g0 / micro_batches
                        evals.append(f"{free[s]:.6f},{node},{c},{g0},{(g0 + group) * batch},"
                                     f"{1.5 - acc:.4f},{acc:.4f}")
        end_time = max(end_time, max(free))
        for s in range(stages):
            node = c * stages + s
            rows.append(f"memory,{node},{c},{s},,,,0,,,,{1000000 * (s + 1)},,")
            per_node.append({"node": node, "device": "cpu", "cluster": c, "stage": s, "busy_s": busy[s],
                             "busy_fraction": None, "idle_fraction": None, "wait_s": 0.0,
                             "bytes_sent": 0, "bytes_received": 0, "peak_memory_bytes": 1 << 24,
                             "measured_peak_memory_bytes": None, "updates": micro_batches // group,
                             "staleness_mean": 1.0, "staleness_max": 1})
    for p in per_node:
        p["busy_fraction"] = p["busy_s"] / end_time
        p["idle_fraction"] = 1 - p["busy_fraction"]
    with open(os.path.join(folder, "metrics.csv"), "w") as f:
        f.write("\n".join(rows[:1] + [r + ",," for r in rows[1:]]) + "\n")  # cpu_s, grad_norm2: none
    with open(os.path.join(folder, "eval.csv"), "w") as f:
        f.write("\n".join(evals) + "\n")
    summary = {"scenario": name, "executor": executor, "mode": "numeric", "algorithm": algorithm,
               "nodes": clusters * stages, "clusters": clusters, "time_s": end_time,
               "train_samples": clusters * micro_batches * batch,
               "samples_per_s": clusters * micro_batches * batch / end_time,
               "steady_samples_per_s": None, "staleness": {"mean": 1.0, "max": 1},
               "per_node": per_node,
               "final": {"train_loss": None, "test_loss": None, "test_accuracy": 0.87}}
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump(summary, f)
    with open(os.path.join(folder, "scenario.toml"), "w") as f:
        f.write(f'name = "{name}"\n[training]\nalgorithm = "{algorithm}"\n{training}[data]\nbatch_size = {batch}\n')
    with open(os.path.join(folder, "run.json"), "w") as f:
        run = {"executor": executor, "mode": "numeric", "wall_seconds": 1.0}
        if variant:  # as the algorithm registry labels a run (run.json)
            run["variant"] = variant
        json.dump(run, f)
    return folder


def run_report(*args):
    return subprocess.run([sys.executable, REPORT, *args], capture_output=True, text=True)


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def assert_png(self, path):
        self.assertTrue(os.path.isfile(path), path)
        self.assertGreater(os.path.getsize(path), 1000, path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), PNG_MAGIC, path)

    def assert_error(self, proc, fragment):
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("report: error:", proc.stderr)
        self.assertIn(fragment, proc.stderr)

    def test_single_run_default_output(self):
        run = make_run(os.path.join(self.dir, "run1"))
        proc = run_report(run)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        out = os.path.join(run, "report")
        names = ["loss_vs_time.png", "loss_vs_samples.png", "accuracy_vs_time.png",
                 "accuracy_vs_samples.png", "utilisation.png", "timeline_quick_ravnest_2_clusters_sim.png"]
        for name in names:
            self.assert_png(os.path.join(out, name))
            self.assertIn(os.path.join(out, name), proc.stdout)
        with open(os.path.join(out, "report.md")) as f:
            md = f.read()
        self.assertIn("quick ravnest, 2 clusters (sim)", md)
        self.assertIn("0.8700", md)

    def test_several_runs_duplicates_and_timing_mode(self):
        a = make_run(os.path.join(self.dir, "a"))
        b = make_run(os.path.join(self.dir, "b"))  # same label as a: disambiguated
        c = make_run(os.path.join(self.dir, "c"), algorithm="gpipe", executor="real", with_loss=False)
        out = os.path.join(self.dir, "out")
        proc = run_report(a, b, c, "--out", out, "--title", "Comparison")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("no training-loss rows", proc.stdout)
        for name in ["loss_vs_time.png", "loss_vs_samples.png", "accuracy_vs_time.png",
                     "accuracy_vs_samples.png", "utilisation.png",
                     "timeline_quick_ravnest_2_clusters_sim_a.png",
                     "timeline_quick_ravnest_2_clusters_sim_b.png", "timeline_quick_gpipe_2_clusters_real.png"]:
            self.assert_png(os.path.join(out, name))
        with open(os.path.join(out, "report.md")) as f:
            md = f.read()
        self.assertIn("quick ravnest, 2 clusters (sim) [a]", md)
        self.assertIn("quick gpipe, 2 clusters (real)", md)

    def test_sweep_speedup_and_time_to_accuracy(self):
        runs = [make_run(os.path.join(self.dir, f"c{c}"), clusters=c) for c in (1, 2, 4)]
        out = os.path.join(self.dir, "sweep")
        proc = run_report(*runs, "--out", out)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assert_png(os.path.join(out, "speedup.png"))
        self.assert_png(os.path.join(out, "time_to_accuracy.png"))
        # One cluster count only: no speedup plot.
        out2 = os.path.join(self.dir, "same")
        proc = run_report(runs[1], make_run(os.path.join(self.dir, "c2b"), clusters=2), "--out", out2)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(out2, "speedup.png")))

    def test_variants_are_labelled_by_how_they_average(self):
        runs = [make_run(os.path.join(self.dir, f"v{c}"), clusters=c) for c in (1, 2)]
        runs += [make_run(os.path.join(self.dir, f"o{c}"), clusters=c,
                          training='averaging = "overlapped"\nallreduce = "single-ring"\n',
                          variant="ravnest overlapped single-ring") for c in (1, 2)]
        out = os.path.join(self.dir, "variants")
        proc = run_report(*runs, "--out", out)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(out, "report.md")) as f:
            md = f.read()
        self.assertIn("| quick ravnest (sim) |", md)
        self.assertIn("| quick ravnest overlapped single-ring, 2 clusters (sim) |", md)
        self.assert_png(os.path.join(out, "speedup.png"))

    def test_refused_sweep_point_is_listed_with_its_reason(self):
        run = make_run(os.path.join(self.dir, "ravnest"), clusters=1)
        refused = os.path.join(self.dir, "syncdp")
        os.makedirs(refused)
        with open(os.path.join(refused, "refused.json"), "w") as f:
            json.dump({"scenario": "quick", "algorithm": "sync-dp", "nodes": 4,
                       "overrides": ["training.algorithm=sync-dp"],
                       "reason": "sync-dp needs every node to hold the whole model (2 GiB)"}, f)
        out = os.path.join(self.dir, "out")
        proc = run_report(run, refused, "--out", out)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(os.path.join(out, "report.md")) as f:
            md = f.read()
        self.assertIn("## Refused by the planner", md)
        self.assertIn("sync-dp needs every node to hold the whole model (2 GiB)", md)
        self.assertIn("`training.algorithm=sync-dp`", md)
        # Only refused points: report.md all the same, no figures.
        out2 = os.path.join(self.dir, "out2")
        proc = run_report(refused, "--out", out2)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(os.path.isfile(os.path.join(out2, "report.md")))
        # A refused.json without its reason is an error that names the file.
        with open(os.path.join(refused, "refused.json"), "w") as f:
            json.dump({"algorithm": "sync-dp"}, f)
        self.assert_error(run_report(refused, "--out", out2), "refused.json: no 'reason'")

    def test_validate_folder_draws_both_runs_and_its_verdict(self):
        folder = os.path.join(self.dir, "v")
        make_run(os.path.join(folder, "sim"), executor="sim")
        make_run(os.path.join(folder, "real"), executor="real")
        verdict = "agrees: steady samples/s 3.0% apart (target 10%) (dilation 4)"
        with open(os.path.join(folder, "validate.json"), "w") as f:
            json.dump({"scenario": "quick", "algorithm": "ravnest", "dilation": 4, "verdict": verdict,
                       "figures": [{"figure": "steady_samples_per_s", "label": "steady-state samples/s",
                                    "sim": 103.0, "real": 100.0, "error": 0.03}]}, f)
        proc = run_report(folder)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        out = os.path.join(folder, "report")
        self.assert_png(os.path.join(out, "loss_vs_time.png"))
        self.assert_png(os.path.join(out, "utilisation.png"))
        with open(os.path.join(out, "report.md")) as f:
            md = f.read()
        self.assertIn("# quick: simulated and emulated", md)
        self.assertIn("## Validation: quick (ravnest), dilation 4", md)
        self.assertIn(verdict, md)
        self.assertIn("| steady-state samples/s | 103 | 100 | 3.0% |", md)
        self.assertIn("quick ravnest, 2 clusters (sim)", md)
        self.assertIn("quick ravnest, 2 clusters (real)", md)

    def test_theory_draws_the_measured_average_beside_the_bound(self):
        run = make_run(os.path.join(self.dir, "q"))
        with open(os.path.join(run, "theory.json"), "w") as f:
            json.dump({"ratio": 0.41, "applies": True,
                       "verdict": "measured 0.036, bound 0.088 (measured/bound 0.41) over 3 updates"}, f)
        with open(os.path.join(run, "theory.csv"), "w") as f:
            f.write("k,grad_norm2,running_mean,bound\n0,1,1,10\n1,0.5,0.75,5\n2,0.1,0.533,3.3\n")
        # --theory: only theory.png and report.md, which says where the run stands.
        proc = run_report(run, "--theory", "--out", os.path.join(self.dir, "t"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assert_png(os.path.join(self.dir, "t", "theory.png"))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "t", "loss_vs_time.png")))
        with open(os.path.join(self.dir, "t", "report.md")) as f:
            md = f.read()
        self.assertIn("## Convergence bound", md)
        self.assertIn("measured/bound 0.41", md)
        # The full report draws it too; a run without theory.csv draws no theory.png.
        proc = run_report(run, "--out", os.path.join(self.dir, "full"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assert_png(os.path.join(self.dir, "full", "theory.png"))
        other = make_run(os.path.join(self.dir, "nn"))
        proc = run_report(other, "--out", os.path.join(self.dir, "nn-report"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "nn-report", "theory.png")))

    def test_minimal_folder_with_only_metrics(self):
        run = os.path.join(self.dir, "bare")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.csv"), "w") as f:
            f.write(HEADER + "\nforward,0,0,0,0,0,0.0,0.5,,,,,,,,\nbackward,0,0,0,0,0,0.5,1.5,,,,,,,,\n")
        proc = run_report(run)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assert_png(os.path.join(run, "report", "timeline_bare.png"))
        self.assert_png(os.path.join(run, "report", "utilisation.png"))

    def test_missing_folder(self):
        self.assert_error(run_report(os.path.join(self.dir, "nope")), "run folder not found")

    def test_folder_without_metrics(self):
        run = os.path.join(self.dir, "empty")
        os.makedirs(run)
        self.assert_error(run_report(run), "no metrics.csv")

    def test_bad_header(self):
        run = os.path.join(self.dir, "badhdr")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.csv"), "w") as f:
            f.write("kind,node,time\nforward,0,1\n")
        self.assert_error(run_report(run), "bad header")

    def test_unparsable_number_names_line(self):
        run = make_run(os.path.join(self.dir, "badnum"))
        with open(os.path.join(run, "metrics.csv"), "a") as f:
            f.write("forward,0,0,0,1,1,abc,0.2,,,,,,,,\n")
        with open(os.path.join(run, "metrics.csv")) as f:
            n_lines = len(f.read().splitlines())
        proc = run_report(run)
        self.assert_error(proc, f"metrics.csv:{n_lines}: column 'start_s': not a number: 'abc'")

    def test_wrong_field_count(self):
        run = os.path.join(self.dir, "short")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.csv"), "w") as f:
            f.write(HEADER + "\nforward,0,0\n")
        self.assert_error(run_report(run), "metrics.csv:2: 3 fields")


if __name__ == "__main__":
    unittest.main()
