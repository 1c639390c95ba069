#!/usr/bin/python3
"""Plots and a Markdown summary from one or more run folders.

Usage:
    /usr/bin/python3 analysis/report.py RUN [RUN ...] [--out DIR] [--title TEXT]

A run folder is what `ravnest sim` / `ravnest real` writes: metrics.csv (required),
summary.json, eval.csv, scenario.toml and run.json (optional; missing values are derived
from metrics.csv or shown as "-"). The report never asks which executor produced a run.
A folder holding only refused.json is a sweep point the planner refused (e.g. sync-dp on
nodes that cannot hold the model): report.md lists it with the planner's reason. A folder of
`ravnest validate` (validate.json, sim/, real/) stands for its two runs, drawn on the same axes,
and report.md opens with the validation's verdict and figures.

Outputs, in --out (default: RUN/report for one run, ./report for several):
    loss_vs_time.png, loss_vs_samples.png       training loss (moving average; raw faint)
    accuracy_vs_time.png, accuracy_vs_samples.png  test accuracy from eval.csv
    timeline_<label>.png                        per-node compute timeline (first window)
    utilisation.png                             per-node busy fraction, runs side by side
    speedup.png, time_to_accuracy.png           against clusters, per algorithm (sweeps)
    theory.png                                  runs measured by `ravnest theory` (theory.csv):
                                                the running average of the exact squared
                                                gradient norm beside the convergence bound
    report.md                                   one table row per run, refused points,
                                                plus the figures

"Training samples" on an x axis is the sum over clusters of the samples each cluster has
processed so far. Runs without loss rows (timing-mode simulations) get no loss lines.
Errors (missing folder or metrics.csv, bad CSV header, unparsable number) are printed as
`report: error: ...` on stderr with exit status 2. The paths written are printed on stdout.
"""

import argparse
import csv
import json
import math
import os
import re
import sys
import tomllib

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

METRICS_HEADER = ["kind", "node", "cluster", "stage", "step", "micro_batch", "start_s", "end_s",
                  "loss", "accuracy", "staleness", "bytes", "peer", "samples", "cpu_s", "grad_norm2"]
THEORY_HEADER = ["k", "grad_norm2", "running_mean", "bound"]
EVAL_HEADER = ["time_s", "node", "cluster", "step", "train_samples", "test_loss", "test_accuracy"]
SPAN_COLOURS = {"wait": "#e8e8e8", "forward": "tab:blue", "backward": "tab:orange",
                "update": "tab:green", "eval forward": "tab:grey", "average": "tab:purple"}
MAX_TIMELINE_ROWS = 32    # more nodes than this are cut from the timeline (noted in the title)
TIMELINE_MICRO_BATCHES = 40


class ReportError(Exception):
    """A problem with the inputs; reported as `report: error: ...`, exit status 2."""


def read_table(path, header):
    """Reads a CSV with exactly `header` into {column: float array}; empty fields are NaN.

    The first column of metrics.csv (`kind`) stays a list of strings."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ReportError(f"cannot read {path}: {e}")
    if not rows or [c.strip() for c in rows[0]] != header:
        got = ",".join(rows[0]) if rows else "(empty file)"
        raise ReportError(f"{path}:1: bad header '{got}', expected '{','.join(header)}'")
    text_cols = 1 if header[0] == "kind" else 0
    cols = {name: [] for name in header}
    for lineno, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise ReportError(f"{path}:{lineno}: {len(row)} fields, expected {len(header)}")
        for i, (name, field) in enumerate(zip(header, row)):
            field = field.strip()
            if i < text_cols:
                cols[name].append(field)
                continue
            try:
                cols[name].append(float(field) if field else math.nan)
            except ValueError:
                raise ReportError(f"{path}:{lineno}: column '{name}': not a number: '{field}'")
    return {name: (vals if i < text_cols else np.array(vals, dtype=float))
            for i, (name, vals) in enumerate(cols.items())}


def read_json(path):
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ReportError(f"cannot parse {path}: {e}")


class Run:
    """One run folder: its metrics split by kind, eval curve, summary and label."""

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
        table = read_table(metrics_path, METRICS_HEADER)
        kinds = np.array(table["kind"], dtype=object)
        self.by_kind = {k: {c: table[c][kinds == k] for c in METRICS_HEADER[1:]}
                        for k in set(table["kind"])}
        self.summary = read_json(os.path.join(folder, "summary.json"))
        run_json = read_json(os.path.join(folder, "run.json"))
        scenario = {}
        toml_path = os.path.join(folder, "scenario.toml")
        if os.path.exists(toml_path):
            try:
                with open(toml_path, "rb") as f:
                    scenario = tomllib.load(f)
            except (OSError, tomllib.TOMLDecodeError) as e:
                raise ReportError(f"cannot parse {toml_path}: {e}")
        eval_path = os.path.join(folder, "eval.csv")
        self.eval = read_table(eval_path, EVAL_HEADER) if os.path.exists(eval_path) else None
        s = self.summary
        folder_name = os.path.basename(os.path.normpath(folder))
        self.scenario = s.get("scenario") or scenario.get("name") or folder_name
        self.algorithm = s.get("algorithm") or scenario.get("training", {}).get("algorithm", "?")
        self.executor = s.get("executor") or run_json.get("executor", "?")
        self.folder_name = folder_name
        # The variant: the algorithm, and how it averages where that is not the default, as the
        # algorithm registry labels it (run.json); a run folder without one is its algorithm.
        self.variant = run_json.get("variant") or self.algorithm
        clusters = s.get("clusters")
        self.label = (f"{self.scenario} {self.variant}"
                      f"{f', {clusters} clusters' if clusters and int(clusters) > 1 else ''} ({self.executor})")
        self.time_s = s.get("time_s") or self.span_end()
        # The planner's one line on its plan (plan.json "reason"; older run folders have none).
        self.plan_reason = read_json(os.path.join(folder, "plan.json")).get("reason") or ""
        # `ravnest theory`'s measurement against the convergence bound, where it was made.
        self.theory = read_json(os.path.join(folder, "theory.json"))
        theory_csv = os.path.join(folder, "theory.csv")
        self.theory_curve = (read_table(theory_csv, THEORY_HEADER)
                             if self.theory and os.path.exists(theory_csv) else None)

    def kind(self, name):
        return self.by_kind.get(name, {c: np.zeros(0) for c in METRICS_HEADER[1:]})

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
        return t, cumulative_samples(d["cluster"][ok][order], d["samples"][ok][order]), loss

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


def cumulative_samples(clusters, samples):
    """Sum over clusters of each cluster's latest `samples` value, row by row."""
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


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def save(fig, path, written):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)


def plot_curves(runs, title, out, written):
    """Loss and accuracy against time and against samples, all runs on one axis per plot."""
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    loss = {r.label: r.loss_curve() for r in runs}
    acc = {r.label: r.accuracy_curve() for r in runs}
    for r in runs:
        if len(loss[r.label][2]) == 0:
            print(f"report: note: {r.folder} has no training-loss rows; no loss lines for it")
    for x_index, x_name, x_label in ((0, "time", "time (s)"), (1, "samples", "training samples")):
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for i, r in enumerate(runs):
            x, y = loss[r.label][x_index], loss[r.label][2]
            ok = np.isfinite(x)
            x, y = x[ok], y[ok]
            if len(y) == 0:
                continue
            c = colours[i % len(colours)]
            ax.plot(x, y, color=c, alpha=0.2, linewidth=0.8)
            ax.plot(x, moving_average(y, max(1, min(100, len(y) // 20))), color=c, label=r.label)
        finish(ax, f"{title}: training loss vs {x_name}", x_label, "training loss")
        save(fig, os.path.join(out, f"loss_vs_{x_name}.png"), written)

        fig, ax = plt.subplots(figsize=(8, 4.8))
        for i, r in enumerate(runs):
            x, y = acc[r.label][x_index], acc[r.label][2]
            ok = np.isfinite(x)
            if ok.any():
                ax.plot(x[ok], y[ok], marker="o", markersize=4, color=colours[i % len(colours)],
                        label=r.label)
        finish(ax, f"{title}: test accuracy vs {x_name}", x_label, "test accuracy")
        save(fig, os.path.join(out, f"accuracy_vs_{x_name}.png"), written)


def plot_theory(runs, title, out, written):
    """theory.png: per run, (1/K) sum_k ||grad f(w_k)||^2 against K (solid) and the bound at K
    (dashed, drawn faint where the run breaks its conditions: then it is no guarantee). A network's
    run (theory.json "estimated") is drawn with its estimates, dotted, and labelled as such."""
    measured = [r for r in runs if r.theory_curve is not None]
    if not measured:
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, r in enumerate(measured):
        c = r.theory_curve
        colour = f"C{i % 10}"
        k = c["k"] + 1
        t = r.theory
        if t.get("estimated"):
            ax.plot(k, c["running_mean"], color=colour,
                    label=f"{r.label}: estimated (stochastic norm less sigma^2/N)")
            ax.plot(k, c["bound"], color=colour, linestyle=":",
                    label=f"{r.label}: the bound's shape with estimated L, sigma^2 (not a guarantee)")
            continue
        ax.plot(k, c["running_mean"], color=colour,
                label=f"{r.label}: measured (ratio {t.get('ratio', float('nan')):.2g} at K)")
        applies = bool(t.get("applies"))
        ax.plot(k, c["bound"], color=colour, linestyle="--", alpha=1.0 if applies else 0.4,
                label=f"{r.label}: bound" + ("" if applies else " (conditions not met)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    finish(ax, f"{title}: convergence against the bound", "updates K (per cluster)",
           "(1/K) sum ||grad f(w_k)||^2")
    save(fig, os.path.join(out, "theory.png"), written)


def theory_lines(runs):
    measured = [r for r in runs if r.theory]
    if not measured:
        return []
    lines = ["## Convergence bound", "",
             "The exact squared gradient norm at the clusters' average after each update, averaged over "
             "the run's K updates, beside the bound of docs/theory.md with the run's own eta, T, C, H "
             "and N (`ravnest theory`). For a neural network, whose L, sigma^2 and f* are unknown, they "
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
    """Per-node bars of compute spans in the first window; gaps (bubbles) stay white."""
    end, window_text = timeline_window(run)
    nodes = run.nodes()
    shown = list(nodes)[:MAX_TIMELINE_ROWS]
    if len(nodes) > len(shown):
        window_text += f", first {len(shown)} of {len(nodes)} nodes"
    row = {n: i for i, n in enumerate(shown)}
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.45 * max(1, len(shown))))
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
            ax.broken_barh(bars, (row[n] - 0.4, 0.8), facecolors=colour, edgecolor="none")
        # A legend entry even if no span is in view.
        handles.append(matplotlib.patches.Patch(facecolor=colour, edgecolor="none",
                                                label="waiting for a message" if name == "wait" else name))
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([f"node {n} (stage {'?' if nodes[n] is None else nodes[n]})"
                        for n in shown])
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlim(0, end if end > 0 else 1)
    ax.set_xlabel("time (s)")
    ax.set_title(f"{title}: {run.label}\ntimeline, {window_text}")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    save(fig, os.path.join(out, f"timeline_{safe_name(run.label)}.png"), written)


def plot_utilisation(runs, title, out, written):
    """Grouped bar chart: busy fraction per node, one colour per run."""
    fracs = [r.busy_fractions() for r in runs]
    all_nodes = sorted(set().union(*fracs))
    pos = {n: i for i, n in enumerate(all_nodes)}
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(8, 0.3 * len(all_nodes) * len(runs) + 2), 4.8))
    for i, (r, f) in enumerate(zip(runs, fracs)):
        xs = [pos[n] - 0.4 + width * (i + 0.5) for n in f]
        ax.bar(xs, [v if v is not None else 0.0 for v in f.values()], width, label=r.label)
    step = max(1, len(all_nodes) // 40)
    ax.set_xticks(range(0, len(all_nodes), step))
    ax.set_xticklabels([str(n) for n in all_nodes[::step]])
    ax.set_ylim(0, 1.05)
    finish(ax, f"{title}: per-node busy fraction", "node", "busy fraction")
    save(fig, os.path.join(out, "utilisation.png"), written)


def plot_speedup(runs, title, out, written):
    """Throughput against the number of clusters, relative to each variant's run with the fewest
    clusters (the dashed line is linear speedup). Drawn when runs differ in their cluster count.
    A variant is an algorithm with its averaging (e.g. "ravnest overlapped")."""
    by_algo = {}
    for r in runs:
        c, x = r.summary.get("clusters"), r.summary.get("samples_per_s")
        if c and x:
            by_algo.setdefault(r.variant, []).append((int(c), float(x)))
    if not any(len({c for c, _ in v}) > 1 for v in by_algo.values()):
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    top = 1
    for algo, pts in sorted(by_algo.items()):
        pts.sort()
        base_c, base_x = pts[0]
        cs = [c for c, _ in pts]
        ax.plot(cs, [x / base_x for _, x in pts], marker="o", label=f"{algo} (vs {base_c} cluster"
                f"{'s' if base_c > 1 else ''})")
        top = max(top, max(cs) / base_c)
    ax.plot([1, top], [1, top], linestyle="--", color="grey", label="linear")
    finish(ax, f"{title}: speedup against the number of clusters", "clusters", "speedup (samples/s)")
    save(fig, os.path.join(out, "speedup.png"), written)


def time_to_accuracy(run, target):
    """First time (s) at which the run's test accuracy reaches `target`, or None."""
    t, _, acc = run.accuracy_curve()
    hit = np.nonzero(acc >= target)[0]
    return float(t[hit[0]]) if len(hit) else None


def plot_time_to_accuracy(runs, title, out, written, target=None):
    """Bars: time each run took to reach the target test accuracy (default: the best accuracy that
    every run reaches)."""
    best = [float(np.max(r.accuracy_curve()[2])) for r in runs if len(r.accuracy_curve()[2])]
    if len(best) < 2:
        return
    target = target if target is not None else min(best)
    names, times = [], []
    for r in runs:
        t = time_to_accuracy(r, target)
        names.append(r.label)
        times.append(t if t is not None else math.nan)
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.4 * len(runs)))
    ax.barh(range(len(runs)), [0 if math.isnan(t) else t for t in times], color="tab:blue")
    for i, t in enumerate(times):
        ax.text(0 if math.isnan(t) else t, i, " not reached" if math.isnan(t) else f" {t:.3g} s",
                va="center", fontsize="small")
    ax.set_yticks(range(len(runs)))
    ax.set_yticklabels(names, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(f"{title}: time to {100 * target:.1f}% test accuracy")
    ax.grid(axis="x", alpha=0.3)
    save(fig, os.path.join(out, "time_to_accuracy.png"), written)


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
    lines = [f"# {title}", ""] + validation_lines(validations) + ["| run | executor | algorithm | nodes | time (s) | samples/s "
             "| final test accuracy | mean staleness | mean idle fraction "
             "| peak memory per node (MiB, max / mean) | averaging (s, busiest node) | folder |",
             "|" + "---|" * 12]
    for r in runs:
        s = r.summary
        per = s.get("per_node", [])
        # Over the nodes the plan uses (a node left idle by the plan would count as idle).
        idle = [p["idle_fraction"] for p in per
                if p.get("idle_fraction") is not None and p.get("stage", 0) >= 0]
        if not idle:
            idle = [1.0 - v for v in r.busy_fractions().values() if v is not None]
        mem = [p.get("measured_peak_memory_bytes") or p.get("peak_memory_bytes") for p in per
               if p.get("stage", 0) >= 0]
        mem = [m / 2**20 for m in mem if m]
        acc = (s.get("final") or {}).get("test_accuracy")
        if acc is None and len(r.accuracy_curve()[2]):
            acc = float(r.accuracy_curve()[2][-1])
        mem_text = f"{max(mem):.1f} / {np.mean(mem):.1f}" if mem else "-"
        averaging = (s.get("averaging") or {})
        avg_text = (f"{averaging['time_s_max_node']:.3f} ({averaging.get('allreduce', '?')}, "
                    f"{averaging.get('rounds', 0)} rounds)" if averaging.get("rounds") else "-")
        lines.append(
            f"| {r.label} | {r.executor} | {r.algorithm} | {s.get('nodes') or len(r.nodes())} "
            f"| {fmt(r.time_s, '.3f')} | {fmt(s.get('samples_per_s'), '.1f')} "
            f"| {fmt(acc, '.4f')} | {fmt((s.get('staleness') or {}).get('mean'), '.2f')} "
            f"| {fmt(float(np.mean(idle)) if idle else None, '.3f')} | {mem_text} | {avg_text} "
            f"| `{r.folder}` |")
    lines.append("")
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
    parser = argparse.ArgumentParser(prog="report", description=__doc__.split("\n")[0],
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
            plot_speedup(runs, title, out, written)
            plot_time_to_accuracy(runs, title, out, written, args.target_accuracy)
            plot_theory(runs, title, out, written)
        write_markdown(runs, refused, title, out, list(written), written, validations)
    except ReportError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
