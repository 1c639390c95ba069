"""Tests for analysis/report.py on small fake run folders.

Run from the repository root:  /usr/bin/python3 -m unittest analysis/test_report.py
"""

import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.py")
HEADER = "kind,node,cluster,stage,step,micro_batch,start_s,end_s,loss,accuracy,staleness,bytes,peer,samples,cpu_s,grad_norm2,device_s"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(folder, name="quick", algorithm="ravnest", executor="sim", with_loss=True,
             clusters=2, stages=2, micro_batches=60, batch=16, training="", variant=None, seed=None,
             plan=False, measured_memory=None, latency=0.004, speed=1.0):
    """Writes a fake run folder: a GPipe schedule per cluster (bubbles), losses, evals, and a
    message from each stage to the next per micro-batch (send, and its recv `latency` s later).
    seed: written to scenario.toml; plan: a plan.json with predicted figures; measured_memory:
    bytes in summary.json's measured_peak_memory_bytes; speed: divides every compute time."""
    os.makedirs(folder, exist_ok=True)
    rows, evals, per_node = [HEADER], ["time_s,node,cluster,step,train_samples,test_loss,test_accuracy"], []
    t_f, t_b, t_u, group = 0.010 / speed, 0.020 / speed, 0.002 / speed, 8
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
                    if s + 1 < stages:
                        t1 = free[s] + latency
                        rows.append(f"send,{node},{c},{s},{m},{m},{free[s]:.6f},{free[s]:.6f},,,,4096,{node + 1},")
                        rows.append(f"recv,{node + 1},{c},{s + 1},{m},{m},{t1:.6f},{t1:.6f},,,,4096,{node},")
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
                             "measured_peak_memory_bytes": measured_memory, "updates": micro_batches // group,
                             "staleness_mean": 1.0, "staleness_max": 1})
    for p in per_node:
        p["busy_fraction"] = p["busy_s"] / end_time
        p["idle_fraction"] = 1 - p["busy_fraction"]
    with open(os.path.join(folder, "metrics.csv"), "w") as f:
        f.write("\n".join(rows[:1] + [r + ",,," for r in rows[1:]]) + "\n")  # cpu_s, grad_norm2, device_s: none
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
        f.write(f'name = "{name}"\n' + (f"seed = {seed}\n" if seed is not None else "") +
                f'[training]\nalgorithm = "{algorithm}"\n{training}[data]\nbatch_size = {batch}\n'
                f'[output]\ndir = "{folder}"\n')
    if plan:
        period = (t_f + t_b + t_u) * stages
        with open(os.path.join(folder, "plan.json"), "w") as f:
            json.dump({"predicted_samples_per_s": 1234.5, "reason": "a fake plan",
                       "clusters": [{"predicted_period_s": period, "predicted_samples_per_s": batch / period,
                                     "stages": [{"node": c * stages + s, "layers": [s, s + 1],
                                                 "memory_bytes": 1 << 20, "predicted_time_s": 0.025,
                                                 "predicted_compute_s": 0.020}
                                                for s in range(stages)]}
                                    for c in range(clusters)]}, f)
    with open(os.path.join(folder, "run.json"), "w") as f:
        run = {"executor": executor, "mode": "numeric", "wall_seconds": 1.0}
        if variant:  # as the algorithm registry labels a run (run.json)
            run["variant"] = variant
        json.dump(run, f)
    return folder


def rewrite_columns(path, order=None, drop=(), extra=None):
    """Rewrites the CSV at `path` with its columns in `order` (names; default: the file's order
    reversed), without the columns in `drop`, and with `extra` = (name, value) inserted as the second
    column: what a newer or older writer could make of the same rows. Returns the new header."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    names = [c for c in (order or header[::-1]) if c not in drop]
    if extra:
        names.insert(1, extra[0])
    out = [names] + [[r[header.index(c)] if c in header else extra[1] for c in names] for r in rows[1:] if r]
    with open(path, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(out)
    return names


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

    def report_ok(self, *args):
        """Runs the report and requires exit status 0; its CompletedProcess."""
        proc = run_report(*args)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc

    def read_md(self, out):
        with open(os.path.join(out, "report.md")) as f:
            return f.read()

    def assert_error(self, proc, fragment):
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("report: error:", proc.stderr)
        self.assertIn(fragment, proc.stderr)

    def test_single_run_default_output(self):
        run = make_run(os.path.join(self.dir, "run1"))
        proc = self.report_ok(run)
        out = os.path.join(run, "report")
        names = ["loss_vs_time.png", "loss_vs_samples.png", "accuracy_vs_time.png",
                 "accuracy_vs_samples.png", "utilisation.png", "timeline_quick_ravnest_2_clusters_sim.png"]
        for name in names:
            self.assert_png(os.path.join(out, name))
            self.assertIn(os.path.join(out, name), proc.stdout)
            json_path = os.path.join(out, name[:-4] + ".json")   # the series it plotted, beside it
            self.assertIn(json_path, proc.stdout)
            with open(json_path) as f:
                self.assertIsInstance(json.load(f), dict)
        md = self.read_md(out)
        self.assertIn("quick ravnest, 2 clusters (sim)", md)
        self.assertIn("0.8700", md)

    def test_several_runs_duplicates_and_timing_mode(self):
        a = make_run(os.path.join(self.dir, "a"))
        b = make_run(os.path.join(self.dir, "b"))  # same label as a: disambiguated
        c = make_run(os.path.join(self.dir, "c"), algorithm="gpipe", executor="real", with_loss=False)
        out = os.path.join(self.dir, "out")
        proc = self.report_ok(a, b, c, "--out", out, "--title", "Comparison")
        self.assertIn("no training-loss rows", proc.stdout)
        for name in ["loss_vs_time.png", "loss_vs_samples.png", "accuracy_vs_time.png",
                     "accuracy_vs_samples.png", "utilisation.png",
                     "timeline_quick_ravnest_2_clusters_sim_a.png",
                     "timeline_quick_ravnest_2_clusters_sim_b.png", "timeline_quick_gpipe_2_clusters_real.png"]:
            self.assert_png(os.path.join(out, name))
        md = self.read_md(out)
        self.assertIn("quick ravnest, 2 clusters (sim) [a]", md)
        self.assertIn("quick gpipe, 2 clusters (real)", md)

    def test_sweep_speedup_and_time_to_accuracy(self):
        runs = [make_run(os.path.join(self.dir, f"c{c}"), clusters=c) for c in (1, 2, 4)]
        out = os.path.join(self.dir, "sweep")
        proc = self.report_ok(*runs, "--out", out)
        self.assert_png(os.path.join(out, "speedup.png"))
        self.assert_png(os.path.join(out, "time_to_accuracy.png"))
        # One cluster count only: no speedup plot.
        out2 = os.path.join(self.dir, "same")
        proc = self.report_ok(runs[1], make_run(os.path.join(self.dir, "c2b"), clusters=2), "--out", out2)
        self.assertFalse(os.path.exists(os.path.join(out2, "speedup.png")))

    def test_variants_are_labelled_by_how_they_average(self):
        runs = [make_run(os.path.join(self.dir, f"v{c}"), clusters=c) for c in (1, 2)]
        runs += [make_run(os.path.join(self.dir, f"o{c}"), clusters=c,
                          training='averaging = "overlapped"\nallreduce = "single-ring"\n',
                          variant="ravnest overlapped single-ring") for c in (1, 2)]
        out = os.path.join(self.dir, "variants")
        proc = self.report_ok(*runs, "--out", out)
        md = self.read_md(out)
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
        proc = self.report_ok(run, refused, "--out", out)
        md = self.read_md(out)
        self.assertIn("## Refused by the planner", md)
        self.assertIn("sync-dp needs every node to hold the whole model (2 GiB)", md)
        self.assertIn("`training.algorithm=sync-dp`", md)
        # Only refused points: report.md all the same, no figures.
        out2 = os.path.join(self.dir, "out2")
        proc = self.report_ok(refused, "--out", out2)
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
        proc = self.report_ok(folder)
        out = os.path.join(folder, "report")
        self.assert_png(os.path.join(out, "loss_vs_time.png"))
        self.assert_png(os.path.join(out, "utilisation.png"))
        md = self.read_md(out)
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
        proc = self.report_ok(run, "--theory", "--out", os.path.join(self.dir, "t"))
        self.assert_png(os.path.join(self.dir, "t", "theory.png"))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "t", "loss_vs_time.png")))
        with open(os.path.join(self.dir, "t", "report.md")) as f:
            md = f.read()
        self.assertIn("## Convergence bound", md)
        self.assertIn("measured/bound 0.41", md)
        # The full report draws it too; a run without theory.csv draws no theory.png.
        proc = self.report_ok(run, "--out", os.path.join(self.dir, "full"))
        self.assert_png(os.path.join(self.dir, "full", "theory.png"))
        other = make_run(os.path.join(self.dir, "nn"))
        proc = self.report_ok(other, "--out", os.path.join(self.dir, "nn-report"))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "nn-report", "theory.png")))

    def test_minimal_folder_with_only_metrics(self):
        run = os.path.join(self.dir, "bare")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.csv"), "w") as f:
            f.write(HEADER + "\nforward,0,0,0,0,0,0.0,0.5,,,,,,,,,\nbackward,0,0,0,0,0,0.5,1.5,,,,,,,,,\n")
        proc = self.report_ok(run)
        self.assert_png(os.path.join(run, "report", "timeline_bare.png"))
        self.assert_png(os.path.join(run, "report", "utilisation.png"))

    def test_folder_from_before_device_s_reads(self):
        # metrics.csv of a run folder written before the device_s column: reported as before.
        run = os.path.join(self.dir, "older")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.csv"), "w") as f:
            f.write(HEADER.rsplit(",", 1)[0] +
                    "\nforward,0,0,0,0,0,0.0,0.5,,,,,,,,\nbackward,0,0,0,0,0,0.5,1.5,,,,,,,,\n")
        self.report_ok(run)
        self.assert_png(os.path.join(run, "report", "utilisation.png"))

    def test_columns_in_another_order_and_an_unknown_one_draw_the_same(self):
        # A newer writer: metrics.csv and eval.csv with their columns reordered and one more column
        # the report does not know. Read by name, the run draws the same figures from the same data.
        run = make_run(os.path.join(self.dir, "r"), plan=True)
        before = os.path.join(self.dir, "before")
        self.report_ok(run, "--out", before)
        rewrite_columns(os.path.join(run, "metrics.csv"), extra=("future_x", "7"))
        rewrite_columns(os.path.join(run, "eval.csv"), extra=("future_y", ""))
        after = os.path.join(self.dir, "after")
        self.report_ok(run, "--out", after)
        self.assertEqual(sorted(os.listdir(before)), sorted(os.listdir(after)))
        self.assertIn("timeline_quick_ravnest_2_clusters_sim.png", os.listdir(after))
        for name in os.listdir(before):
            if name.endswith(".png"):
                self.assert_png(os.path.join(after, name))
            else:   # the series plotted and report.md: the same
                with open(os.path.join(before, name)) as f, open(os.path.join(after, name)) as g:
                    self.assertEqual(f.read(), g.read(), name)

    def test_header_without_a_needed_column_names_it(self):
        run = make_run(os.path.join(self.dir, "noend"), micro_batches=8)
        rewrite_columns(os.path.join(run, "metrics.csv"), order=HEADER.split(","), drop=("end_s",))
        self.assert_error(run_report(run), "metrics.csv:1: bad header")
        self.assert_error(run_report(run), "no column 'end_s'")

    def read_json(self, *parts):
        with open(os.path.join(*parts)) as f:
            return json.load(f)

    def test_timeline_draws_transfer_lanes_beside_compute(self):
        run = make_run(os.path.join(self.dir, "t"), clusters=1, stages=2)
        with open(os.path.join(run, "metrics.csv"), "a") as f:   # a last send that never arrives
            f.write("send,0,0,0,99,99,10.0,10.0,,,,4096,1,,,,\n")
        out = os.path.join(self.dir, "out")
        proc = self.report_ok(run, "--out", out)
        self.assert_png(os.path.join(out, "timeline_quick_ravnest_sim.png"))
        t = self.read_json(out, "timeline_quick_ravnest_sim.json")
        self.assertEqual(t["lanes"], ["compute", "uplink", "downlink"])
        self.assertEqual(t["unmatched_sends"], 1)
        nodes = {n["node"]: n for n in t["nodes"]}
        self.assertEqual(set(nodes), {0, 1})
        self.assertGreater(len(nodes[0]["compute"]["forward"]), 0)
        up, down = nodes[0]["uplink"], nodes[1]["downlink"]
        self.assertGreater(len(up), 0)
        self.assertEqual(len(up), len(down))   # the same messages, seen from either end
        self.assertEqual(nodes[0]["downlink"], [])
        self.assertEqual(nodes[1]["uplink"], [])
        for m in up:   # matched in order: each receipt 4 ms after its send
            self.assertEqual(m["peer"], 1)
            self.assertAlmostEqual(m["receipt_s"] - m["send_s"], 0.004, places=5)
            self.assertLessEqual(m["send_s"], t["window_s"][1])

    def test_utilisation_has_link_busy_fractions(self):
        run = make_run(os.path.join(self.dir, "u"), clusters=2, stages=2)
        out = os.path.join(self.dir, "out")
        proc = self.report_ok(run, "--out", out)
        self.assert_png(os.path.join(out, "utilisation.png"))
        u = self.read_json(out, "utilisation.json")
        self.assertEqual(len(u["runs"]), 1)
        nodes = {n["node"]: n for n in u["runs"][0]["nodes"]}
        self.assertEqual(set(nodes), {0, 1, 2, 3})
        for n in nodes.values():
            for m in ("compute", "uplink", "downlink"):
                self.assertGreaterEqual(n[m], 0.0)
                self.assertLessEqual(n[m], 1.0)
        for sender, receiver in ((0, 1), (2, 3)):
            self.assertGreater(nodes[sender]["uplink"], 0.0)
            self.assertEqual(nodes[sender]["downlink"], 0.0)
            self.assertGreater(nodes[receiver]["downlink"], 0.0)
            self.assertEqual(nodes[receiver]["uplink"], 0.0)
            self.assertAlmostEqual(nodes[sender]["uplink"], nodes[receiver]["downlink"])
            self.assertGreater(nodes[sender]["compute"], nodes[sender]["uplink"])

    def test_predicted_beside_measured_and_memory_columns(self):
        sim = make_run(os.path.join(self.dir, "sim"), clusters=1, plan=True)
        real = make_run(os.path.join(self.dir, "real"), clusters=1, executor="real",
                        measured_memory=3 << 20)
        out = os.path.join(self.dir, "out")
        proc = self.report_ok(sim, real, "--out", out)
        md = self.read_md(out)
        self.assertIn("| samples/s over the run | steady training samples/s measured | predicted "
                      "| steady samples/s with evaluations measured | predicted |", md)
        self.assertIn("| peak modeled memory per node (MiB, max / mean) "
                      "| peak measured memory per node (MiB, max / mean) |", md)
        rows = {line.split(" | ")[0]: line.split(" | ") for line in md.splitlines()
                if line.startswith("| quick ravnest (") and len(line.split(" | ")) == 17}
        sim_row, real_row = rows["| quick ravnest (sim)"], rows["| quick ravnest (real)"]
        self.assertEqual(sim_row[7], "1234.5")       # predicted, beside the measured steady samples/s
        self.assertEqual(real_row[7], "-")           # no plan.json
        self.assertEqual(sim_row[9], "-")            # no steady window in this summary
        self.assertEqual(sim_row[13:15], ["16.0 / 16.0", "-"])   # modeled; nothing measured in sim
        self.assertEqual(real_row[13:15], ["16.0 / 16.0", "3.0 / 3.0"])
        # The per-stage table: predicted 25 ms (of which compute 20 ms), measured forward + backward
        # 30 ms per micro-batch and 0.267 ms of update: 1.51 x the predicted compute.
        self.assertIn("## Predicted against measured stage times", md)
        self.assertIn("| quick ravnest (sim) | 0 | 1 | 1 | 25.000 | 20.000 | 30.000 | 0.267 | 1.51 | 60 |", md)
        self.assert_png(os.path.join(out, "stage_times.png"))
        st = self.read_json(out, "stage_times.json")
        self.assertEqual(len(st["stages"]), 2)
        self.assertAlmostEqual(st["stages"][0]["measured_compute_s"], 0.030, places=6)
        self.assertEqual(st["stages"][0]["predicted_s"], 0.025)
        self.assertEqual(st["stages"][0]["predicted_compute_s"], 0.020)

    def test_speedup_axes_baselines_and_log(self):
        runs = [make_run(os.path.join(self.dir, f"c{c}"), clusters=c) for c in (1, 2, 4)]
        out = os.path.join(self.dir, "sweep")
        proc = self.report_ok(*runs, "--out", out, "--log")
        sp = self.read_json(out, "speedup.json")
        self.assertEqual(sp["y_label"], "speedup (x)")
        self.assertEqual(sp["x_ticks"], [1, 2, 4])
        self.assertTrue(all(isinstance(t, int) for t in sp["x_ticks"]))
        self.assertTrue(sp["log"])
        (series,) = sp["vs_one_cluster"]
        self.assertEqual(series["clusters"], [1, 2, 4])
        self.assertAlmostEqual(series["speedup"][0], 1.0)
        self.assertGreater(series["speedup"][2], series["speedup"][1])
        # Each fake cluster has two nodes: no single-PC run, which the plot says.
        self.assertEqual(sp["vs_single_pc"]["series"], [])
        self.assertIn("no single-PC run", sp["vs_single_pc"]["note"])
        # With a one-node run, the best single PC is the other baseline.
        pc = make_run(os.path.join(self.dir, "pc"), clusters=1, stages=1, algorithm="gpipe", plan=True,
                      speed=2.0)
        proc = self.report_ok(*runs, pc, "--out", out)
        sp = self.read_json(out, "speedup.json")
        self.assertFalse(sp["log"])
        base = sp["vs_single_pc"]["baselines"]["quick"]
        self.assertEqual(base["run"], pc)
        ravnest = [s for s in sp["vs_single_pc"]["series"] if s["label"].startswith("ravnest")][0]
        self.assertAlmostEqual(ravnest["speedup"][0] * base["samples_per_s"], ravnest["samples_per_s"][0])
        self.assertEqual(sp["vs_single_pc"]["note"], "")

    def test_runs_differing_only_by_seed_are_one_mean_series(self):
        runs = [make_run(os.path.join(self.dir, f"s{seed}c{c}"), seed=seed, clusters=c, speed=1 + 0.1 * seed)
                for c in (1, 2) for seed in (1, 2, 3)]
        other = make_run(os.path.join(self.dir, "gpipe"), seed=1, algorithm="gpipe", clusters=1)
        out = os.path.join(self.dir, "out")
        proc = self.report_ok(*runs, other, "--out", out)
        loss = self.read_json(out, "loss_vs_time.json")
        self.assertEqual(len(loss["series"]), 3)   # ravnest 1 cluster, 2 clusters, gpipe
        merged = loss["series"][0]
        self.assertEqual(merged["seeds"], [1, 2, 3])
        self.assertIn("mean of 3 seeds", merged["label"])
        for lo, y, hi in zip(merged["band_min"], merged["y"], merged["band_max"]):
            self.assertLessEqual(lo, y + 1e-12)
            self.assertLessEqual(y, hi + 1e-12)
        self.assertNotIn("band_min", loss["series"][2])
        acc = self.read_json(out, "accuracy_vs_samples.json")
        self.assertEqual(len(acc["series"]), 3)
        u = self.read_json(out, "utilisation.json")
        self.assertEqual(len(u["runs"]), 3)
        self.assertIn("compute_min", u["runs"][0]["nodes"][0])
        sp = self.read_json(out, "speedup.json")
        ravnest = [s for s in sp["vs_one_cluster"] if s["label"].startswith("ravnest")][0]
        self.assertEqual(ravnest["seeds"], [3, 3])
        self.assertLess(ravnest["min"][1], ravnest["max"][1])
        tta = self.read_json(out, "time_to_accuracy.json")
        self.assertEqual(len(tta["runs"]), 3)   # one bar per series, as the curves
        bar = tta["runs"][0]
        self.assertEqual(bar["seeds"], [1, 2, 3])
        self.assertEqual(bar["reached"], 3)
        self.assertLessEqual(bar["min"], bar["time_s"])
        self.assertLessEqual(bar["time_s"], bar["max"])
        self.assertLess(bar["min"], bar["max"])
        # The same seed twice is a repeat, not a seed series: two lines.
        a = make_run(os.path.join(self.dir, "r1"), seed=5)
        b = make_run(os.path.join(self.dir, "r2"), seed=5)
        proc = self.report_ok(a, b, "--out", os.path.join(self.dir, "rep"))
        self.assertEqual(len(self.read_json(self.dir, "rep", "loss_vs_time.json")["series"]), 2)

    def test_seeds_with_equal_figures_draw_without_error(self):
        # Three seeds of one schedule: equal busy fractions, whose mean may differ from each of them
        # in the last bit; the error bars are never negative.
        runs = [make_run(os.path.join(self.dir, f"eq{seed}"), seed=seed, clusters=2) for seed in (1, 2, 3)]
        out = os.path.join(self.dir, "eq")
        self.report_ok(*runs, "--out", out)
        u = self.read_json(out, "utilisation.json")
        self.assertEqual(len(u["runs"]), 1)
        node = u["runs"][0]["nodes"][0]
        self.assertAlmostEqual(node["compute_min"], node["compute_max"])

    def test_loss_lines_break_where_the_run_did_not_train(self):
        sys.path.insert(0, os.path.dirname(REPORT))
        try:
            import report
        finally:
            sys.path.pop(0)
        x, y = report.with_gaps([0.0, 1.0, 2.0, 3.0, 100.0, 101.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.5])
        self.assertEqual(len(x), 7)
        self.assertTrue(x[4] != x[4] and y[4] != y[4])   # NaN: the line breaks there
        self.assertEqual(list(x[5:]), [100.0, 101.0])
        x, = report.with_gaps([0.0, 1.0, 2.0, 3.5])
        self.assertEqual(len(x), 4)   # no gap: unchanged

    def test_time_axes_say_simulated_or_wall_time(self):
        sim = make_run(os.path.join(self.dir, "sim"), executor="sim")
        real = make_run(os.path.join(self.dir, "real"), executor="real")
        for runs, label in (([sim], "simulated time (s)"), ([real], "wall time (s)"),
                            ([sim, real], "time (s): simulated for sim runs, wall for real")):
            out = os.path.join(self.dir, "out-" + "-".join(os.path.basename(r) for r in runs))
            proc = self.report_ok(*runs, "--out", out)
            for name in ("loss_vs_time.json", "accuracy_vs_time.json"):
                self.assertEqual(self.read_json(out, name)["x_label"], label)
            self.assertEqual(self.read_json(out, "loss_vs_samples.json")["x_label"], "training samples")
            for r in runs:
                executor = os.path.basename(r)
                t = self.read_json(out, f"timeline_quick_ravnest_2_clusters_{executor}.json")
                self.assertEqual(t["x_label"], "simulated time (s)" if executor == "sim" else "wall time (s)")
        self.assertEqual(self.read_json(out, "time_to_accuracy.json")["x_label"],
                         "time (s): simulated for sim runs, wall for real")

    def test_out_must_not_overwrite_a_runs_theory_json(self):
        run = make_run(os.path.join(self.dir, "q"))
        with open(os.path.join(run, "theory.json"), "w") as f:
            json.dump({"ratio": 0.5, "applies": True, "verdict": "v"}, f)
        with open(os.path.join(run, "theory.csv"), "w") as f:
            f.write("k,grad_norm2,running_mean,bound\n0,1,1,10\n1,0.5,0.75,5\n")
        self.assert_error(run_report(run, "--theory", "--out", run), "would overwrite the run's own")
        with open(os.path.join(run, "theory.json")) as f:
            self.assertEqual(json.load(f)["verdict"], "v")

    def test_unfinished_runs_are_listed_with_their_status(self):
        # Live run folders (core/output/live_run.h): a killed run says "running", a failed one its error.
        runs = []
        for name, status in (("killed", {"status": "running"}), ("broken", {"status": "failed", "error": "node 1 crashed"}),
                             ("done", {"status": "complete"})):
            run = make_run(os.path.join(self.dir, name), micro_batches=8)
            with open(os.path.join(run, "run.json")) as f:
                info = json.load(f)
            info.update(status)
            with open(os.path.join(run, "run.json"), "w") as f:
                json.dump(info, f)
            runs.append(run)
        out = os.path.join(self.dir, "rep")
        proc = self.report_ok(*runs, "--out", out)
        md = self.read_md(out)
        self.assertIn("Runs that did not finish", md)
        self.assertIn(": still running, or killed", md)
        self.assertIn(": failed: node 1 crashed", md)
        self.assertEqual(md.count("\n- "), 2)   # the complete run is not listed

    def test_churn_runs_mark_departures_and_draw_accuracy_against_the_rate(self):
        runs = []
        for i, (rate, acc) in enumerate(((0.0, 0.87), (0.1, 0.86), (0.1, 0.84), (0.2, 0.80))):
            folder = make_run(os.path.join(self.dir, f"r{i}"), name="churny", seed=i, plan=True,
                              training="steps = 60\n")
            with open(os.path.join(folder, "scenario.toml"), "a") as f:
                f.write(f"[churn]\nleave_per_hour = {rate}\n")
            with open(os.path.join(folder, "summary.json")) as f:
                summary = json.load(f)
            summary["final"]["test_accuracy"] = acc
            if rate > 0:
                with open(os.path.join(folder, "metrics.csv"), "a") as f:
                    f.write("leave,1,-1,-1,-1,-1,0.100000,0.100000,,,-1,0,-1,0,,,\n"
                            "join,5,-1,-1,-1,-1,0.200000,0.200000,,,-1,0,-1,0,,,\n")
                summary["churn"] = {"leaves": 1, "joins": 1, "takeovers": 1, "dropped_micro_batches": 2,
                                    "rounds_sat_out": 1, "state_transfers": 2, "state_transfer_bytes": 1 << 20,
                                    "planned_samples": summary["train_samples"] * 2,
                                    "samples_lost": summary["train_samples"]}
            with open(os.path.join(folder, "summary.json"), "w") as f:
                json.dump(summary, f)
            runs.append(folder)
        out = os.path.join(self.dir, "out")
        self.report_ok(*runs, "--out", out)
        churned = sorted(p for p in os.listdir(out) if p.startswith("churn_") and p.endswith(".png")
                         and p != "churn_rate.png")
        self.assertEqual(len(churned), 3, churned)  # the three runs with churn, not the one without
        for p in churned:
            self.assert_png(os.path.join(out, p))
            with open(os.path.join(out, p[:-4] + ".json")) as f:
                data = json.load(f)
            self.assertEqual([e["kind"] for e in data["events"]], ["leave", "join"])
            self.assertEqual([e["node"] for e in data["events"]], [1, 5])
        self.assert_png(os.path.join(out, "churn_rate.png"))
        with open(os.path.join(out, "churn_rate.json")) as f:
            rate = json.load(f)
        acc = rate["series"][0]
        self.assertEqual(acc["x"], [0.0, 10.0, 20.0])
        self.assertEqual(acc["y"], [0.87, 0.85, 0.80])  # the two seeds at 10% averaged
        self.assertEqual(acc["min"][1], 0.84)
        self.assertEqual(acc["max"][1], 0.86)
        kept = rate["series"][1]
        self.assertEqual(kept["y"], [1.0, 0.5, 0.5])  # without churn: every planned sample
        md = self.read_md(out)
        self.assertIn("## Churn", md)
        section = md.split("## Churn", 1)[1].split("\n## ", 1)[0]
        rows = [l for l in section.splitlines() if l.startswith("| churny")]
        self.assertEqual(len(rows), 3)  # the runs with churn
        self.assertTrue(all("| 1 | 1 | 1 | 2 | 1 | 2 (1.00) |" in r for r in rows), rows)

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
            f.write("forward,0,0,0,1,1,abc,0.2,,,,,,,,,\n")
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
