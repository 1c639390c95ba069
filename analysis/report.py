#!/usr/bin/python3
"""Plots and a Markdown summary from one or more run folders.

Usage:
    /usr/bin/python3 analysis/report.py RUN [RUN ...] [--out DIR] [--title TEXT] [--log]

A run folder is what `ravnest sim` / `ravnest real` writes: metrics.csv (required),
summary.json, plan.json, eval.csv, scenario.toml and run.json (optional; missing values are
derived from metrics.csv or shown as "-"). A folder holding only refused.json is a sweep point
the planner refused (e.g. sync-dp on nodes that cannot hold the model): report.md lists it with
the planner's reason. A folder of `ravnest validate` (validate.json, sim/, real/) stands for its
two runs, drawn on the same axes, and report.md opens with the validation's verdict and figures.

Outputs, in --out (default: RUN/report for one run, ./report for several). Every figure X.png
comes with X.json beside it: the series it plotted, in the units of its axes.
    loss_vs_time.png, loss_vs_samples.png       training loss (moving average; raw faint)
    accuracy_vs_time.png, accuracy_vs_samples.png  test accuracy from eval.csv
    timeline_<label>.png                        per node (first window): a compute lane, an
                                                uplink lane and a downlink lane (transfers)
    utilisation.png                             per node: compute, uplink and downlink busy
                                                fraction, one panel per run
    stage_times.png                             per stage: the plan's predicted stage time beside
                                                the measured compute time per micro-batch
    speedup.png, time_to_accuracy.png           against clusters, per algorithm (sweeps)
    theory.png                                  runs measured by `ravnest theory` (theory.csv):
                                                the running average of the exact squared
                                                gradient norm beside the convergence bound
    report.md                                   one table row per run (steady training samples/s
                                                and with evaluations, each measured beside
                                                predicted; modeled and measured memory), the
                                                stage-time table, refused points, the figures

Time axes say what the time is: "simulated time (s)" for runs of the simulator (run.json
executor "sim"), "wall time (s)" for runs on real processes or threads ("real", "loopback"), and
"time (s): simulated for sim runs, wall for real" on a figure that holds both.

Transfers. metrics.csv records each message twice, as instants: `send` at the sender (node A,
peer B, at start_s) and `recv` at the receiver (node B, peer A, at end_s). The k-th send from A to
B (in time order, file order among equal times) is matched with the k-th recv at B from A: one
connection per pair delivers in order. A message occupies A's uplink and B's downlink from its send
instant to its receipt (latency and queueing included, so a link's "busy" is an upper bound on its
transmit time). Sends without a matching recv (a run cut short) are left out and counted in the
timeline's JSON. A link's busy fraction is the length of the union of its messages' intervals,
clipped to [0, run time], over the run time; compute's is summary.json's busy_fraction (else the
compute spans' time over the run time).

Runs that differ only by seed (same scenario apart from `seed` and [output], same variant,
executor and cluster count, different seeds) are one series: the mean, with a min-max band (loss
and accuracy curves, speedup) or min-max error bars (utilisation). report.md keeps a row per run.

"Training samples" on an x axis is the sum over clusters of the samples each cluster has
processed so far. Runs without loss rows (timing-mode simulations) get no loss lines.
The run folder's files are read by runs.py (beside this script, in analysis/ or share/ravnest):
its CSV tables by their header's names, so folders of older versions (no device_s) and of newer
ones (more columns, another order) draw alike; a column a folder lacks is drawn as missing.
Errors (missing folder or metrics.csv, a header without a column the tables need, rows that do
not match the header, an unparsable number, an --out that would overwrite a run's own
theory.json) are printed as `report: error: ...` on stderr with exit status 2, naming the file.
The paths written are printed on stdout.
"""

import argparse
import json
import math
import os
import re
import sys
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# runs.py, beside this file in the source tree (analysis/) and in an installed one (share/ravnest),
# reads a run folder's files; its name here leaves `runs` for lists of runs. Without it (or
# pandas), --help still answers and a report is refused saying why.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import runs as run_files  # noqa: E402
except ImportError as e:
    run_files, RUN_FILES_ERROR = None, e

SPAN_COLOURS = {"wait": "#e8e8e8", "forward": "tab:blue", "backward": "tab:orange",
                "update": "tab:green", "eval forward": "tab:grey", "average": "tab:purple"}
COMPUTE_KINDS = ("forward", "backward", "update", "average")
LANE_COLOURS = {"uplink": "tab:red", "downlink": "tab:cyan"}
MAX_TIMELINE_ROWS = 24    # more nodes than this are cut from the timeline (noted in the title)
TIMELINE_MICRO_BATCHES = 40
WALL_EXECUTORS = ("real", "loopback")   # executors whose time is the wall clock's
RUN_FILES = ("theory.json", "summary.json", "plan.json", "run.json")  # a figure's JSON never overwrites these


class ReportError(Exception):
    """A problem with the inputs; reported as `report: error: ...`, exit status 2."""


class Columns:
    """A table's number columns by name, as float arrays (a run_files DataFrame seen the way the
    plots use it). A column the file lacks (an older run folder's) is all NaN, never a KeyError."""

    def __init__(self, df):
        self.df = df
        self._arrays = {}

    def __getitem__(self, name):
        if name not in self._arrays:
            self._arrays[name] = run_files.column(self.df, name).to_numpy(dtype=float)
        return self._arrays[name]

    def __len__(self):
        return len(self.df)


def read_json(path):
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ReportError(f"cannot parse {path}: {e}")


class Run:
    """One run folder: its metrics split by kind, eval curve, summary and label. Its files are read
    by runs.py (run_files.load_run); a file that does not read is a ReportError naming it."""

    def __init__(self, folder):
        if not os.path.isdir(folder):
            raise ReportError(f"run folder not found: {folder}")
        self.folder = folder
        metrics_path = os.path.join(folder, "metrics.csv")
        if not os.path.isfile(metrics_path):
            if os.path.isfile(os.path.join(folder, "node_metrics.csv")):
                raise ReportError(f"no metrics.csv in run folder {folder}: the run kept one row per node "
                                  "(output.metrics = \"summary\"); run it again with output.metrics = "
                                  "\"events\" to plot it")
            raise ReportError(f"no metrics.csv in run folder {folder}")
        if run_files is None:
            raise ReportError(f"cannot import runs.py, which reads run folders, from "
                              f"{os.path.dirname(os.path.abspath(__file__))} (cmake --install puts it "
                              f"beside report.py): {RUN_FILES_ERROR}")
        try:
            files = run_files.load_run(folder)
        except run_files.RunError as e:
            raise ReportError(str(e)) from e
        self.metrics = files.metrics
        self.by_kind = {k: Columns(rows) for k, rows in files.metrics.groupby("kind", sort=False)}
        self.summary = files.summary or {}
        run_json = files.info or {}
        scenario = files.scenario or {}
        self.eval = Columns(files.eval) if files.eval is not None else None
        s = self.summary
        folder_name = os.path.basename(os.path.normpath(folder))
        self.scenario = s.get("scenario") or scenario.get("name") or folder_name
        self.algorithm = s.get("algorithm") or scenario.get("training", {}).get("algorithm", "?")
        self.executor = s.get("executor") or run_json.get("executor", "?")
        self.folder_name = folder_name
        # The variant: the algorithm, and how it averages where that is not the default, as the
        # algorithm registry labels it (run.json); a run folder without one is its algorithm.
        self.variant = run_json.get("variant") or self.algorithm
        # run.json's status: "running" (still going, or killed: its rows are what it did),
        # "failed" (with its error), "stopped" (on request, to be resumed) or "interrupted" (by a
        # signal; both with a reason), "complete"; folders from before live outputs have none.
        self.status = run_json.get("status", "complete")
        self.error = run_json.get("error") or run_json.get("reason", "")
        clusters = s.get("clusters")
        self.label = (f"{self.scenario} {self.variant}"
                      f"{f', {clusters} clusters' if clusters and int(clusters) > 1 else ''} ({self.executor})")
        self.base_label = self.label   # before disambiguate() appends the folder
        self.scenario_dict = scenario
        self.seed = scenario.get("seed")
        self._transfers = None
        self.time_s = s.get("time_s") or self.span_end()
        # The planner's one line on its plan (plan.json "reason"; older run folders have none).
        self.plan = files.plan or {}
        self.plan_reason = self.plan.get("reason") or ""
        # `ravnest theory`'s measurement against the convergence bound, where it was made.
        self.theory = files.theory or {}
        self.theory_curve = (Columns(files.theory_curve)
                             if self.theory and files.theory_curve is not None else None)

    def kind(self, name):
        """The metrics rows of kind `name` (none: every column empty), as Columns."""
        if name not in self.by_kind:
            return Columns(self.metrics.iloc[0:0])
        return self.by_kind[name]

    def span_end(self):
        ends = [d["end_s"] for d in self.by_kind.values() if len(d["end_s"])]
        ends = np.concatenate(ends) if ends else np.zeros(0)
        ends = ends[np.isfinite(ends)]
        return float(ends.max()) if len(ends) else 0.0

    def loss_curve(self):
        """(time, total samples, loss) arrays for training-loss rows, sorted by time."""
        d = self.kind("loss")
        ok = np.isfinite(d["loss"]) & np.isfinite(d["end_s"])
        order = np.argsort(d["end_s"][ok], kind="stable")
        t, loss = d["end_s"][ok][order], d["loss"][ok][order]
        # Keyed by (cluster, node): under churn a cluster's last stage may pass to another node,
        # whose count starts again; the sum over both is what the cluster trained.
        keys = list(zip(d["cluster"][ok][order], d["node"][ok][order]))
        return t, cumulative_samples(keys, d["samples"][ok][order]), loss

    def accuracy_curve(self):
        """(time, total samples, accuracy) from eval.csv (or eval rows), one point per step."""
        if self.eval is not None:
            e = self.eval
            t, cl, step = e["time_s"], e["cluster"], e["step"]
            samples, acc = e["train_samples"], e["test_accuracy"]
        else:
            d = self.kind("eval")
            t, cl, step, samples, acc = d["end_s"], d["cluster"], d["step"], d["samples"], d["accuracy"]
        ok = np.isfinite(acc) & np.isfinite(t)
        order = np.argsort(t[ok], kind="stable")
        t, cl, step, acc = t[ok][order], cl[ok][order], step[ok][order], acc[ok][order]
        total = cumulative_samples(cl, samples[ok][order])
        # Clusters evaluating the same step become one point (mean accuracy, latest time).
        keys = [s if math.isfinite(s) else -1 - i for i, s in enumerate(step)]
        points = {}
        for k, ti, si, ai in zip(keys, t, total, acc):
            points.setdefault(k, []).append((ti, si, ai))
        pts = sorted((max(p[0] for p in v), max(p[1] for p in v), float(np.mean([p[2] for p in v])))
                     for v in points.values())
        return tuple(np.array(c, dtype=float) for c in zip(*pts)) if pts else (np.zeros(0),) * 3

    def nodes(self):
        """{node id: stage} from summary.json, completed from the metrics rows."""
        stages = {int(p["node"]): p.get("stage") for p in self.summary.get("per_node", [])
                  if p.get("node") is not None}
        for d in self.by_kind.values():
            for n, st in zip(d["node"], d["stage"]):
                if math.isfinite(n) and stages.get(int(n)) is None:
                    stages[int(n)] = int(st) if math.isfinite(st) else None
        return dict(sorted(stages.items()))

    def busy_fractions(self):
        """{node: busy fraction}: from summary.json, else compute-span time / run time."""
        per = {int(p["node"]): p.get("busy_fraction") for p in self.summary.get("per_node", [])}
        if per and all(v is not None for v in per.values()):
            return dict(sorted(per.items()))
        busy = {n: 0.0 for n in self.nodes()}
        for k in ("forward", "backward", "update", "average"):
            d = self.kind(k)
            for n, a, b in zip(d["node"], d["start_s"], d["end_s"]):
                if math.isfinite(n) and math.isfinite(a) and math.isfinite(b):
                    busy[int(n)] = busy.get(int(n), 0.0) + (b - a)
        return {n: (v / self.time_s if self.time_s else 0.0) for n, v in sorted(busy.items())}

    def transfers(self):
        """Matched messages: (sender, receiver, send_s, receipt_s, bytes) tuples, and the number
        of sends without a matching recv. The k-th send from A to B (time order) is the k-th recv
        at B from A (see the module docstring); a receipt before its send (never expected) is
        drawn as an instant."""
        if self._transfers is not None:
            return self._transfers
        def by_pair(d, time_col, swap):
            pairs = {}
            for n, p, t, b in zip(d["node"], d["peer"], d[time_col], d["bytes"]):
                if math.isfinite(n) and math.isfinite(p) and p >= 0 and math.isfinite(t):
                    key = (int(p), int(n)) if swap else (int(n), int(p))
                    pairs.setdefault(key, []).append((t, b if math.isfinite(b) else 0.0))
            for v in pairs.values():
                v.sort(key=lambda x: x[0])   # stable: file order among equal times
            return pairs
        sends = by_pair(self.kind("send"), "start_s", False)
        recvs = by_pair(self.kind("recv"), "end_s", True)
        out, unmatched = [], 0
        for (a, b), ss in sorted(sends.items()):
            rs = recvs.get((a, b), [])
            unmatched += max(0, len(ss) - len(rs))
            for (t0, nbytes), (t1, _) in zip(ss, rs):
                out.append((a, b, t0, max(t0, t1), nbytes))
        self._transfers = (out, unmatched)
        return self._transfers

    def link_busy_fractions(self):
        """{node: (uplink, downlink) busy fraction}: the union of the node's messages' send-to-
        receipt intervals (sent for the uplink, received for the downlink), clipped to [0, run
        time], over the run time. Nodes without messages get 0."""
        total = self.time_s or self.span_end()
        up, down = {}, {}
        for a, b, t0, t1, _ in self.transfers()[0]:
            up.setdefault(a, []).append((t0, t1))
            down.setdefault(b, []).append((t0, t1))
        def frac(spans):
            return union_length(spans, 0.0, total) / total if total > 0 else 0.0
        return {n: (frac(up.get(n, [])), frac(down.get(n, [])))
                for n in sorted(set(self.nodes()) | set(up) | set(down))}

    def active_nodes(self):
        """Nodes with any compute span or message; the others (left idle by the plan) are not
        drawn on timelines or utilisation charts."""
        active = set()
        for k in COMPUTE_KINDS + ("send", "recv"):
            active |= {int(n) for n in self.kind(k)["node"] if math.isfinite(n)}
        return active

    def used_nodes(self):
        """Number of nodes the run computes on: plan.json's stages, else nodes with compute spans."""
        clusters = self.plan.get("clusters") or []
        if clusters:
            return sum(len(c.get("stages") or []) for c in clusters)
        return len({int(n) for k in COMPUTE_KINDS for n in self.kind(k)["node"] if math.isfinite(n)})

    def peak_memory(self, measured):
        """{node: peak bytes}, modeled (summary peak_memory_bytes, else `memory` rows) or measured
        (summary measured_peak_memory_bytes, else `measured_memory` rows); nodes the plan leaves
        idle and zeros (a simulation measures nothing) are left out."""
        key = "measured_peak_memory_bytes" if measured else "peak_memory_bytes"
        peaks = {int(p["node"]): p.get(key) for p in self.summary.get("per_node", [])
                 if p.get("node") is not None and (p.get("stage") is None or p.get("stage") >= 0)}
        peaks = {n: float(v) for n, v in peaks.items() if v}
        if not peaks:
            d = self.kind("measured_memory" if measured else "memory")
            for n, b in zip(d["node"], d["bytes"]):
                if math.isfinite(n) and math.isfinite(b) and b > 0:
                    peaks[int(n)] = max(peaks.get(int(n), 0.0), float(b))
        return peaks

    def stage_times(self):
        """Per stage of plan.json: the plan's predicted stage time (s per micro-batch; the planner's
        max(compute, uplink, downlink) of the stage, planner/cost.cc stage_time) beside the
        measured compute time per micro-batch: the median over training micro-batches (micro_batch
        >= 0) of that micro-batch's forward + backward span time on the stage's node, and the
        node's update time per micro-batch (total update time / micro-batches). [] without a plan."""
        rows = []
        fwd, bwd, upd = self.kind("forward"), self.kind("backward"), self.kind("update")
        for ci, c in enumerate(self.plan.get("clusters") or []):
            for si, st in enumerate(c.get("stages") or []):
                node = st.get("node")
                per_mb = {}
                for d, name in ((fwd, "f"), (bwd, "b")):
                    sel = (d["node"] == node) & (d["micro_batch"] >= 0) & np.isfinite(d["end_s"])
                    for mb, a, b in zip(d["micro_batch"][sel], d["start_s"][sel], d["end_s"][sel]):
                        e = per_mb.setdefault(mb, {})
                        e[name] = e.get(name, 0.0) + (b - a)
                both = [e["f"] + e["b"] for e in per_mb.values() if "f" in e and "b" in e]
                sel = (upd["node"] == node) & np.isfinite(upd["end_s"])
                update = float(np.sum(upd["end_s"][sel] - upd["start_s"][sel]))
                rows.append({"cluster": ci, "stage": si, "node": node,
                             "predicted_s": st.get("predicted_time_s"),
                             "predicted_compute_s": st.get("predicted_compute_s"),
                             "measured_compute_s": float(np.median(both)) if both else None,
                             "measured_update_s": update / len(both) if both else None,
                             "micro_batches": len(both)})
        return rows


def union_length(spans, lo, hi):
    """Length of the union of (start, end) intervals, clipped to [lo, hi]."""
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in spans):
        if b <= a:
            continue
        if cur_b is None or a > cur_b:
            total += (cur_b - cur_a) if cur_b is not None else 0.0
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    return total + ((cur_b - cur_a) if cur_b is not None else 0.0)


def time_kind(executor):
    """"simulated" for the simulator's runs, "wall" for real processes or threads, else None."""
    return "simulated" if executor == "sim" else "wall" if executor in WALL_EXECUTORS else None


def time_label(runs):
    """The time axis' label for a figure of these runs (see the module docstring)."""
    kinds = {time_kind(r.executor) for r in runs}
    if kinds == {"simulated"}:
        return "simulated time (s)"
    if kinds == {"wall"}:
        return "wall time (s)"
    if None not in kinds:
        return "time (s): simulated for sim runs, wall for real"
    if kinds == {None}:
        return "time (s): executor unknown (no run.json)"
    return "time (s): simulated for sim runs, wall for real, unknown for the others"


def seed_groups(runs):
    """Runs that differ only by seed, as lists (first appearance order). Two runs are of one group
    when their scenario.toml is the same but for `seed` and [output], and their variant, executor
    and cluster count agree; a group never holds two runs of the same seed (a repeat is its own
    series). Runs without scenario.toml are groups of one."""
    groups = []
    for r in runs:
        if not r.scenario_dict or r.seed is None:
            groups.append((None, [r]))
            continue
        rest = {k: v for k, v in r.scenario_dict.items() if k not in ("seed", "output")}
        key = (r.scenario, r.variant, r.executor, r.summary.get("clusters"),
               json.dumps(rest, sort_keys=True, default=str))
        for k, g in groups:
            if k == key and all(o.seed != r.seed for o in g):
                g.append(r)
                break
        else:
            groups.append((key, [r]))
    return [g for _, g in groups]


def group_label(group, spread="min-max band"):
    if len(group) == 1:
        return group[0].label
    return (f"{group[0].base_label}, mean of {len(group)} seeds "
            f"({', '.join(str(r.seed) for r in group)}), {spread}")


def to_jsonable(v):
    """numpy arrays and scalars to lists and floats; NaN and infinities to null."""
    if isinstance(v, dict):
        return {str(k): to_jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [to_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    return v


def save_json(png_path, data, written, runs=()):
    """X.json beside X.png. Refuses to overwrite a run's own file (an --out that is a run folder)."""
    path = os.path.splitext(png_path)[0] + ".json"
    for r in runs:
        if (os.path.basename(path) in RUN_FILES and os.path.exists(path)
                and os.path.samefile(os.path.dirname(path), r.folder)):
            raise ReportError(f"--out {os.path.dirname(path)} is the run folder itself: writing "
                              f"{os.path.basename(path)} would overwrite the run's own; choose another folder")
    with open(path, "w") as f:
        json.dump(to_jsonable(data), f, indent=1)
    written.append(path)


def cumulative_samples(clusters, samples):
    """Sum over clusters (or any keys) of each one's latest `samples` value, row by row."""
    latest, out = {}, np.empty(len(samples))
    for i, (c, s) in enumerate(zip(clusters, samples)):
        if math.isfinite(s):
            latest[c] = s
        out[i] = sum(latest.values()) if latest else math.nan
    return out


def moving_average(y, window):
    """Trailing moving average; the first window-1 points average what is available."""
    c = np.cumsum(np.insert(y, 0, 0.0))
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def safe_name(text):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


def ms(seconds):
    """Seconds to milliseconds; None stays None."""
    return None if seconds is None else 1e3 * seconds


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def save(fig, path, written):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)


def mean_band(curves, points=300):
    """Mean and min-max of several (x, y) curves on a common grid: over the x range all curves
    cover (else the range any covers, each point averaging the curves that reach it)."""
    curves = [(x, y) for x, y in curves if len(x)]
    if not curves:
        return np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0)
    lo, hi = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    if not hi > lo:
        lo, hi = min(x[0] for x, _ in curves), max(x[-1] for x, _ in curves)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    ys = np.array([np.where((grid >= x[0]) & (grid <= x[-1]), np.interp(grid, x, y), np.nan)
                   for x, y in curves])
    with warnings.catch_warnings():   # a grid point no curve reaches stays NaN, quietly
        warnings.simplefilter("ignore", RuntimeWarning)
        return grid, np.nanmean(ys, axis=0), np.nanmin(ys, axis=0), np.nanmax(ys, axis=0)


def with_gaps(x, *ys):
    """x and ys with a NaN between two points further apart in x than 20 times the median step, so
    that a line is broken where the run did not train (an evaluation, an averaging round) instead
    of drawn straight across, which would read as a plateau."""
    if len(x) < 3:
        return (x,) + ys
    dx = np.diff(x)
    step = np.median(dx[dx > 0]) if np.any(dx > 0) else 0.0
    cut = np.nonzero(dx > 20 * step)[0] + 1 if step > 0 else np.array([], dtype=int)
    if len(cut) == 0:
        return (x,) + ys
    return tuple(np.insert(np.asarray(a, dtype=float), cut, np.nan) for a in (x,) + ys)


def plot_curves(runs, title, out, written):
    """Loss and accuracy against time and against samples, all runs on one axis per plot; runs
    that differ only by seed are one mean line with a min-max band (module docstring)."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    groups = seed_groups(runs)
    loss = {r.folder: r.loss_curve() for r in runs}
    acc = {r.folder: r.accuracy_curve() for r in runs}
    for r in runs:
        if len(loss[r.folder][2]) == 0:
            print(f"report: note: {r.folder} has no training-loss rows; no loss lines for it")
    for x_index, x_name, x_label in ((0, "time", time_label(runs)), (1, "samples", "training samples")):
        for metric, curves, y_label in (("loss", loss, "training loss"), ("accuracy", acc, "test accuracy")):
            fig, ax = plt.subplots(figsize=(8, 4.8))
            series = []
            for i, g in enumerate(groups):
                c = colours[i % len(colours)]
                per_run = []
                for r in g:
                    x, y = curves[r.folder][x_index], curves[r.folder][2]
                    ok = np.isfinite(x)
                    x, y = x[ok], y[ok]
                    if len(y) == 0:
                        continue
                    order = np.argsort(x, kind="stable")
                    x, y = x[order], y[order]
                    shown = (moving_average(y, max(1, min(100, len(y) // 20))) if metric == "loss" else y)
                    per_run.append((x, y, shown))
                if not per_run:
                    continue
                entry = {"label": group_label(g), "runs": [r.folder for r in g],
                         "seeds": [r.seed for r in g]}
                if len(per_run) == 1:
                    x, y, shown = per_run[0]
                    if metric == "loss":
                        gx, gy, gshown = with_gaps(x, y, shown) if x_name == "time" else (x, y, shown)
                        ax.plot(gx, gy, color=c, alpha=0.2, linewidth=0.8)
                        ax.plot(gx, gshown, color=c, label=entry["label"])
                        entry.update(x=x, y=shown, y_raw=y)
                    else:
                        ax.plot(x, y, marker="o", markersize=4, color=c, label=entry["label"])
                        entry.update(x=x, y=y)
                else:
                    gx, mean, lo, hi = mean_band([(x, shown) for x, _, shown in per_run])
                    ax.fill_between(gx, lo, hi, color=c, alpha=0.2, linewidth=0)
                    ax.plot(gx, mean, color=c, label=entry["label"])
                    entry.update(x=gx, y=mean, band_min=lo, band_max=hi)
                series.append(entry)
            smoothing = " (moving average; raw faint)" if metric == "loss" else ""
            name = f"{'loss' if metric == 'loss' else 'accuracy'}_vs_{x_name}"
            finish(ax, f"{title}: {y_label} vs {x_name}{smoothing}", x_label, y_label)
            path = os.path.join(out, f"{name}.png")
            save(fig, path, written)
            save_json(path, {"title": f"{title}: {y_label} vs {x_name}", "x_label": x_label,
                             "y_label": y_label, "series": series}, written, runs)


def churn_events(run):
    """The run's departures and arrivals: sorted (time, "leave" | "join", node)."""
    out = []
    for k in ("leave", "join"):
        d = run.kind(k)
        out += [(float(t), k, int(n)) for t, n in zip(d["end_s"], d["node"])]
    return sorted(out)


def last_stage_ends(run):
    """End times of the backward passes of the clusters' last stages (a finished micro-batch
    each), by the event's own cluster and stage: under churn another node may hold a stage."""
    stages = [len(c.get("stages", [])) for c in (run.plan.get("clusters") or [])]
    d = run.kind("backward")
    if not len(d["end_s"]) or not stages:
        return np.zeros(0)
    cl, st, mb = d["cluster"].astype(int), d["stage"].astype(int), d["micro_batch"]
    last = np.array([0 <= c < len(stages) and s == stages[c] - 1 for c, s in zip(cl, st)], dtype=bool)
    return np.sort(d["end_s"][last & (mb >= 0)])


def mark_churn(ax, events):
    """Vertical lines at departures (red, dashed) and arrivals (green, dotted), labelled once."""
    seen = set()
    for t, k, _ in events:
        style = dict(color="tab:red", linestyle="--") if k == "leave" else dict(color="tab:green", linestyle=":")
        ax.axvline(t, alpha=0.6, linewidth=1, label=None if k in seen else
                   ("a node leaves" if k == "leave" else "a node arrives"), **style)
        seen.add(k)


def plot_churn(runs, title, out, written):
    """Per run with churn: throughput (finished micro-batches' samples per second, in 60 windows)
    and training loss against time, each departure and arrival marked."""
    for r in runs:
        events = churn_events(r)
        if not events:
            continue
        ends = last_stage_ends(r)
        batch = (r.scenario_dict.get("data") or {}).get("batch_size", 1)
        t_end = float(r.time_s or (ends[-1] if len(ends) else 0))
        if t_end <= 0:
            continue
        edges = np.linspace(0, t_end, 61)
        counts, _ = np.histogram(ends, bins=edges)
        rate = counts * batch / np.diff(edges)
        centres = (edges[:-1] + edges[1:]) / 2
        t, _, loss = r.loss_curve()
        panels = 2 if len(loss) else 1
        fig, axes = plt.subplots(panels, 1, figsize=(8, 3.2 * panels + 0.8), sharex=True, squeeze=False)
        ax = axes[0][0]
        ax.step(centres, rate, where="mid", color="tab:blue", label="samples/s")
        mark_churn(ax, events)
        ax.set_ylabel("samples/s")
        ax.legend(fontsize=8)
        data = {"title": f"{title}: churn, {r.label}", "x_label": time_label([r]),
                "series": [{"label": "samples/s", "x": centres, "y": rate}],
                "events": [{"time_s": a, "kind": k, "node": n} for a, k, n in events]}
        if len(loss):
            shown = moving_average(loss, max(1, min(100, len(loss) // 20)))
            ax2 = axes[1][0]
            ax2.plot(t, loss, color="tab:blue", alpha=0.2, linewidth=0.8)
            ax2.plot(t, shown, color="tab:blue", label="training loss (moving average)")
            mark_churn(ax2, events)
            ax2.set_ylabel("training loss")
            ax2.legend(fontsize=8)
            data["series"].append({"label": "training loss", "x": t, "y": shown, "y_raw": loss})
        churn = r.summary.get("churn") or {}
        lost = churn.get("samples_lost")
        planned = churn.get("planned_samples")
        sub = (f" ({lost} of {planned} planned samples lost)" if lost is not None and planned else "")
        finish(axes[-1][0], "", time_label([r]), "training loss" if len(loss) else "samples/s")
        axes[0][0].grid(alpha=0.3)
        axes[0][0].set_title(f"{title}: throughput and loss under churn{sub}\n{r.label}", fontsize=9)
        path = os.path.join(out, f"churn_{safe_name(r.label)}.png")
        save(fig, path, written)
        save_json(path, data, written, [r])


def churn_rate(run):
    """churn.leave_per_hour of the run's scenario (0 without churn)."""
    return float((run.scenario_dict.get("churn") or {}).get("leave_per_hour", 0.0) or 0.0)


def plot_churn_rate(runs, title, out, written):
    """Final test accuracy and the share of planned samples trained against the churn rate, when
    the runs span several rates (a `ravnest sweep` over churn.leave_per_hour); seeds give a
    min-max bar around their mean."""
    rates = sorted({churn_rate(r) for r in runs})
    if len(rates) < 2:
        return
    acc, kept = {}, {}
    for r in runs:
        a = (r.summary.get("final") or {}).get("test_accuracy")
        if a is not None:
            acc.setdefault(churn_rate(r), []).append(float(a))
        # Planned: every cluster trains training.steps micro-batches (summary.json "churn" has it
        # where churn was on; a run without churn planned the same).
        c = r.summary.get("churn") or {}
        planned = c.get("planned_samples")
        if not planned:
            steps = (r.scenario_dict.get("training") or {}).get("steps")
            batch = (r.scenario_dict.get("data") or {}).get("batch_size")
            clusters = r.summary.get("clusters")
            planned = steps * batch * clusters if steps and batch and clusters else None
        if planned:
            kept.setdefault(churn_rate(r), []).append(r.summary.get("train_samples", 0) / planned)
    fig, axes = plt.subplots(2, 1, figsize=(8, 6.4), sharex=True)
    series = []
    for ax, values, label in ((axes[0], acc, "final test accuracy"), (axes[1], kept, "share of planned samples trained")):
        xs = [x for x in rates if x in values]
        if not xs:
            continue
        mean = np.array([np.mean(values[x]) for x in xs])
        lo = np.array([min(values[x]) for x in xs])
        hi = np.array([max(values[x]) for x in xs])
        pct = np.array(xs) * 100
        ax.errorbar(pct, mean, yerr=[np.maximum(mean - lo, 0), np.maximum(hi - mean, 0)], marker="o", capsize=3,
                    label=f"{label} (mean over seeds)")
        ax.legend(fontsize="small")
        ax.set_ylabel(label)
        series.append({"label": label, "x": pct, "y": mean, "min": lo, "max": hi,
                       "runs": {x * 100: len(values[x]) for x in xs}})  # by rate in %, as x
    finish(axes[1], "", "departures per node per hour (%)", "share of planned samples trained")
    axes[0].grid(alpha=0.3)
    axes[0].set_title(f"{title}: accuracy against churn (seeds: min-max)", fontsize=9)
    path = os.path.join(out, "churn_rate.png")
    save(fig, path, written)
    save_json(path, {"title": f"{title}: accuracy against churn", "x_label": "departures per node per hour (%)",
                     "series": series}, written, runs)


def churn_lines(runs):
    """report.md: what churn cost each run (summary.json "churn")."""
    rows = [r for r in runs if r.summary.get("churn")]
    if not rows:
        return []
    lines = ["## Churn", "",
             "Departures and arrivals, stages taken over by spares or newcomers, micro-batches dropped "
             "in flight, averaging rounds a cluster sat out (cluster x round), state transfers, the "
             "samples the plan's clusters did not train, and the time clusters spent without finishing "
             "a micro-batch around their losses (summed over clusters).", "",
             "| run | leaves per node per hour | leaves | joins | takeovers | dropped micro-batches "
             "| rounds sat out | state transfers (MiB) | samples lost (of planned) "
             "| cluster-seconds without progress |", "|" + "---|" * 10]
    for r in rows:
        c = r.summary["churn"]
        lines.append(f"| {r.label} | {fmt(churn_rate(r), '.3g')} | {c.get('leaves')} | {c.get('joins')} "
                     f"| {c.get('takeovers')} | {c.get('dropped_micro_batches')} | {c.get('rounds_sat_out')} "
                     f"| {c.get('state_transfers')} ({fmt(c.get('state_transfer_bytes', 0) / 2**20, '.2f')}) "
                     f"| {c.get('samples_lost')} ({c.get('planned_samples')}) "
                     f"| {fmt(c.get('cluster_seconds_without_progress'), '.1f')} |")
    lines.append("")
    return lines


def plot_theory(runs, title, out, written):
    """theory.png: per run, (1/K) sum_k ||grad f(w_k)||^2 against K (solid) and the bound at K
    (dashed, drawn faint where the run breaks its conditions: then it is no guarantee). A network's
    run (theory.json "estimated") is drawn with its estimates, dotted, and labelled as such."""
    measured = [r for r in runs if r.theory_curve is not None]
    if not measured:
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    series = []
    for i, r in enumerate(measured):
        c = r.theory_curve
        series.append({"label": r.label, "run": r.folder, "k": c["k"] + 1,
                       "running_mean": c["running_mean"], "bound": c["bound"],
                       "estimated": bool(r.theory.get("estimated")),
                       "applies": bool(r.theory.get("applies"))})
        colour = f"C{i % 10}"
        k = c["k"] + 1
        t = r.theory
        if t.get("estimated"):
            ax.plot(k, c["running_mean"], color=colour,
                    label=f"{r.label}: estimated (stochastic norm less sigma^2/N)")
            ax.plot(k, c["bound"], color=colour, linestyle=":",
                    label=f"{r.label}: the bound's shape with estimated L, sigma^2 (not a guarantee)")
            continue
        violated = " VIOLATED" if t.get("violated") else ""
        ax.plot(k, c["running_mean"], color=colour,
                label=f"{r.label}: measured (ratio {t.get('ratio', float('nan')):.2g} at K){violated}")
        applies = bool(t.get("applies"))
        theorem = (t.get("bound") or {}).get("theorem")
        ax.plot(k, c["bound"], color=colour, linestyle="--", alpha=1.0 if applies else 0.4,
                label=f"{r.label}: bound" + (f" (Theorem {theorem})" if theorem else "")
                + ("" if applies else " (conditions not met)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    finish(ax, f"{title}: convergence against the bound", "updates K (per cluster)",
           "(1/K) sum ||grad f(w_k)||^2")
    path = os.path.join(out, "theory.png")
    save(fig, path, written)
    save_json(path, {"x_label": "updates K (per cluster)", "y_label": "(1/K) sum ||grad f(w_k)||^2",
                     "log": True, "series": series}, written, runs)


def theory_lines(runs):
    measured = [r for r in runs if r.theory]
    if not measured:
        return []
    lines = ["## Convergence bound", "",
             "The exact squared gradient norm of the clusters' objective at their average after each "
             "update, averaged over the run's K updates, beside the bound of docs/theory.md (a Lian et al. "
             "2015-style bound with local-SGD drift, derived there; Theorem 2 adds a dissimilarity term "
             "where the clusters' data differ) with the run's own eta, T, C, H and N, and the paper's "
             "condition beside ours (`ravnest theory`). For a neural network, whose L, sigma^2 and f* "
             "are unknown, they "
             "are estimated along a plain-SGD replay of the run and the measured side is each update's "
             "stochastic gradient norm less its expected noise: a shape to compare with, never a "
             "guarantee.", ""]
    for r in measured:
        lines.append(f"- {r.label}: {r.theory.get('verdict', '-')}")
    return lines + [""]


def finish(ax, title, xlabel, ylabel):
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center")


def timeline_window(run):
    """End of the timeline window: all of a short run, else the first ~40 micro-batches
    (capped at 30% of the run time, but never fewer than 10 micro-batches)."""
    total = run.time_s or run.span_end()
    fwd = run.kind("forward")
    train = (fwd["micro_batch"] >= 0) & np.isfinite(fwd["end_s"])
    if not train.any():
        return total, "whole run"
    stage = fwd["stage"][train]
    first = stage == np.nanmin(stage) if np.isfinite(stage).any() else np.ones(len(stage), bool)
    nodes = fwd["node"][train][first]
    busiest = max(set(nodes.tolist()), key=lambda n: int((nodes == n).sum()))
    ends = np.sort(fwd["end_s"][train][first][nodes == busiest])
    if len(ends) <= TIMELINE_MICRO_BATCHES:
        return total, "whole run"
    end = min(ends[TIMELINE_MICRO_BATCHES - 1], max(0.3 * total, ends[9]))
    n_mb = int(np.searchsorted(ends, end, side="right"))
    return end, f"first {end:.3g} s of {total:.3g} s (~{n_mb} micro-batches)"


def plot_timeline(run, title, out, written):
    """Per node, three lanes over the first window: compute spans (gaps, the bubbles, stay white;
    waiting for a message is a thin grey band), then the node's uplink and downlink, a bar per
    message from its send instant to its receipt (matching rule in the module docstring). Bars
    are drawn at least about a pixel wide, so spans far shorter than the window stay visible.
    Nodes without spans or messages (left idle by the plan) are left out, as the title says."""
    end, window_text = timeline_window(run)
    nodes = run.nodes()
    active = run.active_nodes()
    drawn = [n for n in nodes if n in active] or list(nodes)
    idle = len(nodes) - len(drawn)
    shown = drawn[:MAX_TIMELINE_ROWS]
    if len(drawn) > len(shown):
        window_text += f", first {len(shown)} of {len(drawn)} active nodes"
    if idle:
        window_text += f"; {idle} node{'s' if idle > 1 else ''} without work not shown"
    lanes = ("compute", "uplink", "downlink")
    row = {n: 3 * i for i, n in enumerate(shown)}
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.32 * 3 * max(1, len(shown))))
    per_node = {n: {"node": n, "stage": nodes.get(n), "compute": {}, "uplink": [], "downlink": []}
                for n in shown}
    handles = []
    for name, colour in SPAN_COLOURS.items():
        d = run.kind("forward" if name == "eval forward" else name)
        sel = np.isfinite(d["start_s"]) & np.isfinite(d["end_s"]) & (d["start_s"] < end)
        if name in ("forward", "eval forward"):
            sel &= (d["micro_batch"] < 0) if name == "eval forward" else ~(d["micro_batch"] < 0)
        spans = {}
        for n, a, b in zip(d["node"][sel], d["start_s"][sel], d["end_s"][sel]):
            if int(n) in row:
                spans.setdefault(int(n), []).append((a, max(min(b, end) - a, 0.0)))
        for n, bars in spans.items():
            if name == "wait":   # a thin band: compute on top of it stays readable
                ax.broken_barh(bars, (row[n] - 0.12, 0.24), facecolors="#c8c8c8", edgecolor="none")
            else:   # the edge in the bar's colour keeps sub-pixel spans visible
                ax.broken_barh(bars, (row[n] - 0.4, 0.8), facecolors=colour, edgecolor=colour,
                               linewidth=0.4)
            per_node[n]["compute"][name] = [(a, a + w) for a, w in bars]
        handles.append(matplotlib.patches.Patch(facecolor="#c8c8c8" if name == "wait" else colour,
                                                edgecolor="none",
                                                label="waiting for a message" if name == "wait" else name))
    messages, unmatched = run.transfers()
    in_view = [m for m in messages if m[2] < end]
    for lane, offset, who in (("uplink", 1, 0), ("downlink", 2, 1)):
        bars = {}
        for m in in_view:
            n = m[who]
            if n in row:
                bars.setdefault(n, []).append((m[2], max(min(m[3], end) - m[2], 0.0)))
                per_node[n][lane].append({"send_s": m[2], "receipt_s": m[3], "bytes": m[4],
                                          "peer": m[1 - who]})
        for n, b in bars.items():
            ax.broken_barh(b, (row[n] + offset - 0.35, 0.7), facecolors=LANE_COLOURS[lane],
                           edgecolor=LANE_COLOURS[lane], linewidth=0.4, alpha=0.45)
        handles.append(matplotlib.patches.Patch(
            facecolor=LANE_COLOURS[lane], alpha=0.45, edgecolor="none",
            label=f"{lane}: a message, send to receipt"))
    ticks, labels = [], []
    for n in shown:
        ticks += [row[n], row[n] + 1, row[n] + 2]
        labels += [f"node {n} (stage {'?' if nodes[n] is None else nodes[n]})", "up", "down"]
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize="small")
    for n in shown[1:]:
        ax.axhline(row[n] - 0.5, color="#888888", linewidth=0.6)
    ax.set_ylim(3 * len(shown) - 0.5, -0.5)
    ax.set_xlim(0, end if end > 0 else 1)
    xlabel = time_label([run])
    ax.set_xlabel(xlabel)
    ax.set_title(f"{title}: {run.label}\ntimeline, {window_text}\n"
                 "(overlapping messages draw darker; spans shorter than a pixel are drawn a pixel wide)",
                 fontsize="medium")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    path = os.path.join(out, f"timeline_{safe_name(run.label)}.png")
    save(fig, path, written)
    save_json(path, {"label": run.label, "run": run.folder, "executor": run.executor,
                     "x_label": xlabel, "window_s": [0.0, end], "window": window_text,
                     "lanes": list(lanes), "matching": "k-th send from A to B = k-th recv at B from A",
                     "messages_in_window": len(in_view), "unmatched_sends": unmatched,
                     "nodes": [per_node[n] for n in shown]}, written, [run])


def utilisation_of(run):
    """[{node, stage, compute, uplink, downlink}] busy fractions of the run's active nodes."""
    compute, links, stages = run.busy_fractions(), run.link_busy_fractions(), run.nodes()
    active = run.active_nodes()
    return [{"node": n, "stage": stages.get(n), "compute": compute.get(n) or 0.0,
             "uplink": links.get(n, (0.0, 0.0))[0], "downlink": links.get(n, (0.0, 0.0))[1]}
            for n in sorted(set(compute) | set(links)) if n in active or not active]


def plot_utilisation(runs, title, out, written):
    """One panel per series (a run, or runs differing only by seed: mean, min-max error bars):
    per node, grouped bars of the compute, uplink and downlink busy fraction (module docstring).
    Values are written on the bars where there is room, so small fractions stay readable."""
    groups = seed_groups(runs)
    measures = (("compute", "tab:blue"), ("uplink", LANE_COLOURS["uplink"]),
                ("downlink", LANE_COLOURS["downlink"]))
    panels = []
    for g in groups:
        per_run = [{e["node"]: e for e in utilisation_of(r)} for r in g]
        nodes = sorted(set().union(*per_run))
        entries = []
        for n in nodes:
            e = {"node": n, "stage": next((p[n]["stage"] for p in per_run if n in p), None)}
            for m, _ in measures:
                vals = [p[n][m] for p in per_run if n in p]
                e[m] = float(np.mean(vals))
                if len(g) > 1:
                    e[f"{m}_min"], e[f"{m}_max"] = float(min(vals)), float(max(vals))
            entries.append(e)
        idle = sorted(set().union(*[set(r.nodes()) for r in g]) - set(nodes))
        panels.append({"label": group_label(g, "min-max error bars"), "runs": [r.folder for r in g],
                       "time_s": float(np.mean([r.time_s or 0.0 for r in g])),
                       "nodes": entries, "nodes_without_work": idle})
    widest = max(len(p["nodes"]) for p in panels) or 1
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, sharey=True,
                             figsize=(max(8, 0.45 * widest + 3), 0.6 + 2.6 * len(panels)))
    for ax, p in zip(axes[:, 0], panels):
        xs = np.arange(len(p["nodes"]))
        for j, (m, colour) in enumerate(measures):
            vals = [e[m] for e in p["nodes"]]
            err = None
            if f"{m}_min" in (p["nodes"][0] if p["nodes"] else {}):
                # (at least 0: the mean of equal values may differ from them in the last bit)
                err = [[max(0.0, e[m] - e[f"{m}_min"]) for e in p["nodes"]],
                       [max(0.0, e[f"{m}_max"] - e[m]) for e in p["nodes"]]]
            ax.bar(xs + (j - 1) * 0.27, vals, 0.27, color=colour, label=m, yerr=err, capsize=2)
            if widest <= 16:
                for x, v in zip(xs, vals):
                    ax.text(x + (j - 1) * 0.27, v + 0.02, f"{100 * v:.0f}%" if v >= 0.1 else f"{100 * v:.1f}%",
                            ha="center", va="bottom", fontsize=7, rotation=0 if widest <= 6 else 90)
        step = max(1, len(xs) // 40)
        ax.set_xlim(-0.6, max(len(xs), 3) - 0.4)   # a lone node's bars keep their width
        ax.set_xticks(xs[::step])
        ax.set_xticklabels([f"{e['node']}" + ("" if e["stage"] is None else f"\ns{e['stage']}")
                            for e in p["nodes"][::step]], fontsize="small")
        ax.set_ylim(0, 1.25)   # room for the values above full bars
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_ylabel("busy fraction")
        ax.grid(axis="y", alpha=0.3)
        idle = p["nodes_without_work"]
        note = f"; nodes without work, not shown: {', '.join(map(str, idle))}" if idle else ""
        ax.set_title(f"{p['label']}{note}", fontsize="small")
    axes[-1, 0].set_xlabel("node (s<stage>)")
    axes[0, 0].legend(fontsize="small", ncol=3, loc="upper right")
    fig.suptitle(f"{title}: per-node busy fraction (links: union of send-to-receipt intervals)",
                 fontsize="medium")
    path = os.path.join(out, "utilisation.png")
    save(fig, path, written)
    save_json(path, {"y_label": "busy fraction", "measures": [m for m, _ in measures],
                     "link_rule": "union of the node's messages' send-to-receipt intervals over the run time",
                     "runs": panels}, written, runs)


def plot_stage_times(runs, title, out, written):
    """stage_times.png: per stage of each run's plan, the predicted stage time beside the measured
    compute time per micro-batch (Run.stage_times), in ms; drawn when some run has a plan."""
    rows = [(r, st) for r in runs for st in r.stage_times()]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(max(7, 0.5 * len(rows) + 3), 4.5))
    xs = np.arange(len(rows))
    pred = [1e3 * (st["predicted_s"] or 0.0) for _, st in rows]
    comp = [1e3 * (st.get("predicted_compute_s") or 0.0) for _, st in rows]
    meas = [1e3 * (st["measured_compute_s"] or 0.0) for _, st in rows]
    upd = [1e3 * (st["measured_update_s"] or 0.0) for _, st in rows]
    w = 0.27
    ax.bar(xs - w, pred, w, color="tab:grey", label="predicted stage time (plan.json)")
    ax.bar(xs, comp, w, color="tab:cyan", label="of which predicted compute")
    ax.bar(xs + w, meas, w, color="tab:blue", label="measured forward + backward (median)")
    ax.bar(xs + w, upd, w, bottom=meas, color="tab:green", label="measured update per micro-batch")
    if len(rows) <= 24:   # the values, so a bar far smaller than its neighbour is still read
        # (upright, so that the values of neighbouring bars never run into each other)
        label = dict(ha="center", va="bottom", fontsize="x-small", rotation=90)
        for x, v in zip(xs, pred):
            ax.text(x - w, v, f" {v:.3g}", **label)
        for x, v in zip(xs, comp):
            ax.text(x, v, f" {v:.3g}", **label)
        for x, v, u in zip(xs, meas, upd):
            ax.text(x + w, v + u, f" {v:.3g}+{u:.2g}", **label)
    many = len({r.folder for r, _ in rows}) > 1
    ax.set_xticks(xs)
    ax.set_xticklabels([(f"{r.label}\n" if many else "") + f"c{st['cluster']} s{st['stage']} n{st['node']}"
                        for r, st in rows], fontsize="x-small", rotation=90 if many else 0)
    ax.margins(y=0.75)   # room for the legend above the bars and their upright values
    finish(ax, f"{title}: time per micro-batch per stage\n(predicted: the larger of the stage's "
           "compute and its links' time)", "cluster c, stage s, node n", "ms per micro-batch")
    path = os.path.join(out, "stage_times.png")
    save(fig, path, written)
    save_json(path, {"y_label": "ms per micro-batch",
                     "stages": [dict(st, run=r.folder, label=r.label) for r, st in rows]}, written, runs)


def single_pc_runs(runs):
    """Runs that compute on one node only (plan.json's one stage of one cluster)."""
    return [r for r in runs if r.used_nodes() == 1 and r.summary.get("samples_per_s")]


def plot_speedup(runs, title, out, written, log=False, refused=()):
    """speedup.png: samples/s against the number of clusters, per variant (an algorithm with its
    averaging, e.g. "ravnest overlapped"), relative to (left) that variant's one-cluster run (its
    fewest clusters where it has none; dashed: linear speedup) and (right) the best single-PC run
    among the runs of the scenario (a run computing on one node), or a note where there is none.
    Runs differing only by seed are averaged (min-max band). Drawn when runs differ in cluster count."""
    scenarios = sorted({r.scenario for r in runs})
    by_variant = {}
    for g in seed_groups(runs):
        r0 = g[0]
        c = r0.summary.get("clusters")
        xs = [float(r.summary["samples_per_s"]) for r in g if r.summary.get("samples_per_s")]
        if c and xs:
            name = r0.variant if len(scenarios) == 1 else f"{r0.scenario} {r0.variant}"
            by_variant.setdefault((r0.scenario, name, r0.executor), []).append((int(c), xs))
    if not any(len({c for c, _ in v}) > 1 for v in by_variant.values()):
        return
    x_label, y_label = "clusters", "speedup (x)"
    ticks = sorted({c for v in by_variant.values() for c, _ in v})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), sharey=False)
    data = {"x_label": x_label, "y_label": y_label, "log": bool(log), "x_ticks": ticks,
            "vs_one_cluster": [], "vs_single_pc": {"baselines": {}, "series": [], "note": ""}}
    notes = []
    best = {}
    for sc in scenarios:
        singles = single_pc_runs([r for r in runs if r.scenario == sc])
        if singles:
            b = max(singles, key=lambda r: r.summary["samples_per_s"])
            best[sc] = b
            data["vs_single_pc"]["baselines"][sc] = {"run": b.folder, "label": b.label,
                                                     "samples_per_s": b.summary["samples_per_s"]}
        else:
            why = [f"{x['label']}: {x['reason']}" for x in refused if x.get("scenario") == sc]
            notes.append(f"{sc}: no single-PC run among these runs" +
                         (f" (refused: {'; '.join(why)})" if why else
                          " (add one, e.g. a run whose plan uses one node)"))
    for i, ((sc, name, executor), pts) in enumerate(sorted(by_variant.items())):
        colour = f"C{i % 10}"
        pts.sort()
        cs = [c for c, _ in pts]
        mean = np.array([np.mean(x) for _, x in pts])
        lo, hi = np.array([min(x) for _, x in pts]), np.array([max(x) for _, x in pts])
        seeds = [len(x) for _, x in pts]
        label = f"{name} ({executor})" + (f", mean of up to {max(seeds)} seeds" if max(seeds) > 1 else "")
        base_c, base = cs[0], mean[0]
        for ax, ref, ref_text, key in ((ax1, base, f"{base_c} cluster{'s' if base_c > 1 else ''}", "vs_one_cluster"),
                                       (ax2, best[sc].summary["samples_per_s"] if sc in best else None,
                                        "best single PC", "vs_single_pc")):
            if ref is None:
                continue
            ax.plot(cs, mean / ref, marker="o", color=colour, label=f"{label} (vs {ref_text})")
            if max(seeds) > 1:
                ax.fill_between(cs, lo / ref, hi / ref, color=colour, alpha=0.2, linewidth=0)
            entry = {"label": label, "scenario": sc, "baseline": ref_text, "baseline_samples_per_s": ref,
                     "clusters": cs, "speedup": mean / ref, "min": lo / ref, "max": hi / ref, "seeds": seeds,
                     "samples_per_s": mean}
            if key == "vs_one_cluster":
                data[key].append(entry)
            else:
                data[key]["series"].append(entry)
    top = max(ticks) / min(ticks)
    ax1.plot([min(ticks), max(ticks)], [1, top], linestyle="--", color="grey", label="linear")
    ax2.axhline(1.0, linestyle="--", color="grey", label="the single PC")
    for ax in (ax1, ax2):
        if log:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks(ticks)   # cluster counts are integers: ticks at the counts run, no others
        ax.set_xticklabels([str(t) for t in ticks])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax2.set_xlim(ax1.get_xlim())
    finish(ax1, "against one cluster of the same algorithm", x_label, y_label)
    pcs = "; ".join(f"{b.label}, {b.summary['samples_per_s']:.4g} samples/s" for b in best.values())
    finish(ax2, "against the best single PC" + (f"\n({pcs})" if pcs else ""), x_label, y_label)
    if notes:
        data["vs_single_pc"]["note"] = " ".join(notes)
        ax2.text(0.5, 0.1 if best else 0.4, "\n".join(notes), transform=ax2.transAxes, ha="center",
                 va="center", fontsize="small", wrap=True,
                 bbox={"facecolor": "white", "edgecolor": "grey"})
    fig.suptitle(f"{title}: speedup against the number of clusters (samples/s ratio)")
    path = os.path.join(out, "speedup.png")
    save(fig, path, written)
    save_json(path, data, written, runs)


def time_to_accuracy(run, target):
    """First time (s) at which the run's test accuracy reaches `target`, or None."""
    t, _, acc = run.accuracy_curve()
    hit = np.nonzero(acc >= target)[0]
    return float(t[hit[0]]) if len(hit) else None


def plot_time_to_accuracy(runs, title, out, written, target=None):
    """Bars: time each series took to reach the target test accuracy (default: the best accuracy
    that every run reaches). Runs that differ only by seed are one bar: the mean over the seeds
    that reached it, with a min-max error bar, and how many of them did."""
    best = [float(np.max(r.accuracy_curve()[2])) for r in runs if len(r.accuracy_curve()[2])]
    if len(best) < 2:
        return
    target = target if target is not None else min(best)
    bars = []   # per seed group: label, runs, times (None: not reached)
    for g in seed_groups(runs):
        times = [time_to_accuracy(r, target) for r in g]
        bars.append((group_label(g, "min-max bar") if len(g) > 1 else g[0].label, g, times))
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.4 * len(bars)))
    entries = []
    for i, (label, g, times) in enumerate(bars):
        reached = [t for t in times if t is not None]
        mean = float(np.mean(reached)) if reached else math.nan
        entry = {"label": label, "runs": [r.folder for r in g], "time_s": None if math.isnan(mean) else mean,
                 "reached": len(reached), "seeds": [r.seed for r in g]}
        if len(g) > 1 and reached:
            entry.update({"min": min(reached), "max": max(reached)})
            ax.errorbar([mean], [i], xerr=[[max(0.0, mean - min(reached))], [max(0.0, max(reached) - mean)]], fmt="none",
                        ecolor="black", capsize=3)
        ax.barh([i], [0 if math.isnan(mean) else mean], color="tab:blue")
        text = " not reached" if math.isnan(mean) else f" {mean:.3g} s"
        if len(g) > 1:
            text += f" ({len(reached)} of {len(g)} seeds reached it)"
        ax.text(0 if math.isnan(mean) else mean, i, text, va="center", fontsize="small")
        entries.append(entry)
    longest = max([e["max"] if "max" in e else (e["time_s"] or 0.0) for e in entries] + [0.0])
    if longest > 0:
        ax.set_xlim(0, 1.45 * longest)   # room for the values written after the bars
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels([b[0] for b in bars], fontsize="small")
    ax.invert_yaxis()
    xlabel = time_label(runs)
    ax.set_xlabel(xlabel)
    ax.set_title(f"{title}: time to {100 * target:.1f}% test accuracy")
    ax.grid(axis="x", alpha=0.3)
    path = os.path.join(out, "time_to_accuracy.png")
    save(fig, path, written)
    save_json(path, {"x_label": xlabel, "target_accuracy": target, "runs": entries}, written, runs)


def read_refused(folder):
    """A sweep point the planner refused (refused.json): {label, folder, reason, ...}."""
    r = read_json(os.path.join(folder, "refused.json"))
    for key in ("algorithm", "reason"):
        if key not in r:
            raise ReportError(f"{folder}/refused.json: no '{key}'")
    r["folder"] = folder
    r["label"] = f"{r.get('scenario', '?')} {r['algorithm']}"
    return r


def expand_validations(folders):
    """Replaces each `ravnest validate` folder by its sim/ and real/ runs; returns (folders,
    [(folder, validate.json)])."""
    runs, validations = [], []
    for f in folders:
        path = os.path.join(f, "validate.json")
        if os.path.isfile(path):
            validations.append((f, read_json(path)))
            runs += [os.path.join(f, "sim"), os.path.join(f, "real")]
        else:
            runs.append(f)
    return runs, validations


def validation_lines(validations):
    """report.md's section of each validation: its verdict and its figures, sim against real."""
    lines = []
    for folder, v in validations:
        lines += [f"## Validation: {v.get('scenario', '?')} ({v.get('algorithm', '?')}), "
                  f"dilation {v.get('dilation', 1):g}", "", f"**{v.get('verdict', '')}**", "",
                  "| figure | sim | real | error |", "|---|---:|---:|---:|"]
        for f in v.get("figures", []):
            err = "-" if f.get("error") is None else f"{100 * f['error']:.1f}%"
            lines.append(f"| {f.get('label', f.get('figure'))} | {fmt(f.get('sim'), '.4g')} "
                         f"| {fmt(f.get('real'), '.4g')} | {err} |")
        lines += ["", f"Per node and the dilation's measurements: `{os.path.join(folder, 'validate.md')}`.", ""]
    return lines


def write_markdown(runs, refused, title, out, images, written, validations=()):
    """report.md: the validations' verdicts, one summary row per run, the points the planner
    refused, then the figures."""
    lines = [f"# {title}", ""] + validation_lines(validations) + [
        "| run | executor | algorithm | nodes | time (s) | samples/s over the run "
        "| steady training samples/s measured | predicted "
        "| steady samples/s with evaluations measured | predicted "
        "| final test accuracy | mean staleness | mean idle fraction "
        "| peak modeled memory per node (MiB, max / mean) | peak measured memory per node (MiB, max / mean) "
        "| averaging (s, busiest node) | folder |",
        "|" + "---|" * 17]
    for r in runs:
        s = r.summary
        per = s.get("per_node", [])
        # Over the nodes the plan uses (a node left idle by the plan would count as idle).
        idle = [p["idle_fraction"] for p in per
                if p.get("idle_fraction") is not None and p.get("stage", 0) >= 0]
        if not idle:
            idle = [1.0 - v for v in r.busy_fractions().values() if v is not None]
        acc = (s.get("final") or {}).get("test_accuracy")
        if acc is None and len(r.accuracy_curve()[2]):
            acc = float(r.accuracy_curve()[2][-1])
        mem_text = []
        for measured in (False, True):   # MiB; "-" where nothing was modeled / measured (sim)
            mem = [m / 2**20 for m in r.peak_memory(measured).values()]
            mem_text.append(f"{max(mem):.1f} / {np.mean(mem):.1f}" if mem else "-")
        window = s.get("steady_window") or {}   # core/output/steady_state.h
        averaging = (s.get("averaging") or {})
        avg_text = (f"{averaging['time_s_max_node']:.3f} ({averaging.get('allreduce', '?')}, "
                    f"{averaging.get('rounds', 0)} rounds)" if averaging.get("rounds") else "-")
        lines.append(
            f"| {r.label} | {r.executor} | {r.algorithm} | {s.get('nodes') or len(r.nodes())} "
            f"| {fmt(r.time_s, '.3f')} | {fmt(s.get('samples_per_s'), '.1f')} "
            f"| {fmt(s.get('steady_samples_per_s'), '.1f')} "
            f"| {fmt(r.plan.get('predicted_samples_per_s'), '.1f')} "
            f"| {fmt(s.get('steady_samples_per_s_with_evaluations'), '.1f')} "
            f"| {fmt(window.get('predicted_samples_per_s_with_evaluations') if r.plan else None, '.1f')} "
            f"| {fmt(acc, '.4f')} | {fmt((s.get('staleness') or {}).get('mean'), '.2f')} "
            f"| {fmt(float(np.mean(idle)) if idle else None, '.3f')} | {mem_text[0]} | {mem_text[1]} "
            f"| {avg_text} | `{r.folder}` |")
    lines.append("")
    unfinished = [r for r in runs if r.status != "complete"]
    if unfinished:
        lines += ["Runs that did not finish (their rows are what they did until then):", ""]
        lines += [f"- {r.label}: " + ("still running, or killed" if r.status == "running"
                                      else f"{r.status}: {r.error or 'no reason given'}") for r in unfinished]
        lines.append("")
    stage_rows = [(r, st) for r in runs for st in r.stage_times()]
    if stage_rows:
        lines += ["## Predicted against measured stage times", "",
                  "Per stage, in ms per micro-batch: the plan's predicted stage time (plan.json "
                  "predicted_time_s: the larger of the stage's compute and its uplink and downlink "
                  "time) beside the measured compute: the median over micro-batches of forward + "
                  "backward on the stage's node, and its update time per micro-batch. Per cluster: "
                  "the predicted period (plan.json predicted_period_s) and samples/s. The compute "
                  "ratio sets the measured compute (forward + backward + update) against the "
                  "predicted compute (plan.json predicted_compute_s).", "",
                  "| run | cluster | stage | node | predicted (ms) | predicted compute (ms) "
                  "| measured forward + backward (ms, median) "
                  "| measured update (ms per micro-batch) | measured / predicted compute | micro-batches |",
                  "|" + "---|" * 10]
        for r, st in stage_rows:
            p, pc, m = st["predicted_s"], st.get("predicted_compute_s"), st["measured_compute_s"]
            total = m + (st["measured_update_s"] or 0.0) if m is not None else None
            ratio = total / pc if total is not None and pc else None
            lines.append(f"| {r.label} | {st['cluster']} | {st['stage']} | {st['node']} "
                         f"| {fmt(ms(p), '.3f')} | {fmt(ms(pc), '.3f')} | {fmt(ms(m), '.3f')} "
                         f"| {fmt(ms(st['measured_update_s']), '.3f')} "
                         f"| {fmt(ratio, '.2f')} | {st['micro_batches']} |")
        lines.append("")
        clusters = [(r, i, c) for r in runs for i, c in enumerate(r.plan.get("clusters") or [])]
        lines += ["| run | cluster | predicted period (ms per micro-batch) | predicted samples/s |",
                  "|" + "---|" * 4]
        lines += [f"| {r.label} | {i} | {fmt(ms(c.get('predicted_period_s')), '.3f')} "
                  f"| {fmt(c.get('predicted_samples_per_s'), '.1f')} |" for r, i, c in clusters]
    lines.append("")
    lines += churn_lines(runs)
    lines += theory_lines(runs)
    reasons = [r for r in runs if r.plan_reason]
    if reasons:
        lines += ["## Plans", ""]
        lines += [f"- {r.label}: {r.plan_reason}" for r in reasons]
        lines.append("")
    if refused:
        lines += ["## Refused by the planner", "",
                  "Points of the sweep that this pool cannot run at all (for sync-dp: nodes that "
                  "cannot hold the whole model, which Ravnest's pipelines split between them).", "",
                  "| run | algorithm | nodes | settings | why | folder |", "|" + "---|" * 6]
        for r in refused:
            settings = ", ".join(f"`{o}`" for o in r.get("overrides", [])) or "-"
            reason = str(r["reason"]).replace("|", "\\|")
            lines.append(f"| {r['label']} | {r['algorithm']} | {r.get('nodes', '-')} | {settings} "
                         f"| {reason} | `{r['folder']}` |")
        lines.append("")
    lines += [f"![{os.path.basename(p)}]({os.path.basename(p)})" for p in images]
    path = os.path.join(out, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    written.append(path)


def disambiguate(runs):
    """Runs with the same label get their folder name (then an index) appended."""
    for attempt in ("folder", "index"):
        seen = {}
        for r in runs:
            seen.setdefault(r.label, []).append(r)
        for group in seen.values():
            if len(group) > 1:
                for i, r in enumerate(group):
                    r.label += f" [{r.folder_name}]" if attempt == "folder" else f" #{i + 1}"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ravnest report", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Outputs: PNG figures and report.md; see the module "
                                            "docstring of analysis/report.py.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s)")
    parser.add_argument("--out", help="output folder (default: RUN/report for one run, "
                                      "./report for several)")
    parser.add_argument("--title", default=None, help="title prefix for every figure")
    parser.add_argument("--theory", action="store_true",
                        help="only theory.png and report.md (what `ravnest theory` draws)")
    parser.add_argument("--target-accuracy", type=float, default=None,
                        help="accuracy for time_to_accuracy.png (default: the best that every run reaches)")
    parser.add_argument("--log", action="store_true",
                        help="log-scale axes for speedup.png (clusters base 2, speedup base 10)")
    args = parser.parse_args(argv)
    try:
        folders, validations = expand_validations(args.runs)
        refused = [read_refused(f) for f in folders
                   if os.path.isfile(os.path.join(f, "refused.json"))
                   and not os.path.isfile(os.path.join(f, "metrics.csv"))]
        runs = [Run(f) for f in folders if f not in {r["folder"] for r in refused}]
        disambiguate(runs)
        out = args.out or (os.path.join(args.runs[0], "report") if len(args.runs) == 1 else "report")
        if args.title:
            title = args.title
        elif len(validations) == 1 and len(args.runs) == 1:
            title = f"{runs[0].scenario}: simulated and emulated"
        else:
            title = runs[0].scenario if len(runs) == 1 and not refused else "Ravnest testbed runs"
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as e:
            raise ReportError(f"cannot create output folder {out}: {e}")
        written = []
        if runs and args.theory:
            plot_theory(runs, title, out, written)
        elif runs:
            plot_curves(runs, title, out, written)
            for r in runs:
                plot_timeline(r, title, out, written)
            plot_utilisation(runs, title, out, written)
            plot_stage_times(runs, title, out, written)
            plot_speedup(runs, title, out, written, log=args.log, refused=refused)
            plot_time_to_accuracy(runs, title, out, written, args.target_accuracy)
            plot_churn(runs, title, out, written)
            plot_churn_rate(runs, title, out, written)
            plot_theory(runs, title, out, written)
        write_markdown(runs, refused, title, out, [p for p in written if p.endswith(".png")],
                       written, validations)
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
