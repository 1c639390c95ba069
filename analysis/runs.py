#!/usr/bin/python3
"""A run folder's tables as pandas DataFrames, for your own analysis.

    import sys; sys.path.insert(0, "analysis")      # or share/ravnest of an installed tree
    import runs
    r = runs.load_run("runs/quickstart/sim-20261126-064033")
    r.metrics            # metrics.csv: one row per event (kind, node, ..., start_s, end_s, loss, ...)
    r.spans("forward")   # the rows of one kind, with duration_s = end_s - start_s
    r.eval               # eval.csv: test loss and accuracy over time
    r.per_node           # summary.json's per-node figures, one row per node
    r.stages             # plan.json's stages: cluster, stage, node, layer_begin, layer_end, predicted_time_s, ...
    r.summary, r.plan, r.info, r.scenario   # summary.json, plan.json, run.json, scenario.toml as dicts
    both = runs.load_runs(["runs/a/sim-1", "runs/a/real-1"])   # one table of each kind, a `run` column

Times are seconds from the run's start: simulated time for sim runs, wall time for real ones
(r.info["executor"]). What a folder lacks is None (an empty table for metrics-less folders of
output.metrics = "summary", whose per-node rows are in r.node_metrics). A folder that is not a
run folder, or a table that does not read, raises RunError saying which file and why.
"""

import json
import os
import tomllib

import pandas as pd

METRICS_COLUMNS = ["kind", "node", "cluster", "stage", "step", "micro_batch", "start_s", "end_s",
                   "loss", "accuracy", "staleness", "bytes", "peer", "samples", "cpu_s", "grad_norm2", "device_s"]
# Run folders written before device_s (a GPU span's kernel time): read with it all NaN.
METRICS_COLUMNS_NO_DEVICE = METRICS_COLUMNS[:-1]
EVAL_COLUMNS = ["time_s", "node", "cluster", "step", "train_samples", "test_loss", "test_accuracy"]


class RunError(Exception):
    """A folder that is not a readable run folder: the message names the file and the problem."""


def _read_csv(path, columns=None, older=None):
    """The CSV at `path` (None if there is none), whose columns must be `columns`, or `older` (an
    earlier version of them: the missing ones are added, all NaN)."""
    if not os.path.exists(path):
        return None
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise RunError(f"{path}: cannot read it as CSV: {e}") from e
    if older is not None and list(df.columns) == older:
        for c in columns:
            if c not in df.columns:
                df[c] = float("nan")
    if columns is not None and list(df.columns) != columns:
        raise RunError(f"{path}: expected the columns {','.join(columns)}, found {','.join(map(str, df.columns))}")
    return df


def _read_json(path):
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(f"{path}: not valid JSON: {e}") from e


class Run:
    """One run folder's contents (see the module's docstring)."""

    def __init__(self, folder):
        self.folder = os.path.abspath(folder)
        if not os.path.isdir(self.folder):
            raise RunError(f"{folder}: no such folder")
        path = lambda name: os.path.join(self.folder, name)  # noqa: E731
        self.info = _read_json(path("run.json"))
        self.summary = _read_json(path("summary.json"))
        self.plan = _read_json(path("plan.json"))
        self.metrics = _read_csv(path("metrics.csv"), METRICS_COLUMNS, METRICS_COLUMNS_NO_DEVICE)
        self.node_metrics = _read_csv(path("node_metrics.csv"))
        self.eval = _read_csv(path("eval.csv"), EVAL_COLUMNS)
        if self.metrics is None and self.node_metrics is None and self.summary is None:
            raise RunError(f"{folder}: not a run folder (no metrics.csv, node_metrics.csv or summary.json)")
        if self.metrics is None:
            self.metrics = pd.DataFrame(columns=METRICS_COLUMNS)
        self.scenario = None
        if os.path.exists(path("scenario.toml")):
            try:
                with open(path("scenario.toml"), "rb") as f:
                    self.scenario = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                raise RunError(f"{path('scenario.toml')}: not valid TOML: {e}") from e
        self.per_node = pd.DataFrame(self.summary["per_node"]) if self.summary and "per_node" in self.summary else None
        self.stages = None
        if self.plan and "clusters" in self.plan:
            rows = []
            for c, cluster in enumerate(self.plan["clusters"]):
                for s, st in enumerate(cluster.get("stages", [])):
                    layers = st.get("layers", [None, None])
                    rows.append({"cluster": c, "stage": s, "node": st.get("node"), "layer_begin": layers[0],
                                 "layer_end": layers[1], "predicted_time_s": st.get("predicted_time_s"),
                                 "predicted_compute_s": st.get("predicted_compute_s"),
                                 "memory_bytes": st.get("memory_bytes"),
                                 "cluster_predicted_period_s": cluster.get("predicted_period_s")})
            self.stages = pd.DataFrame(rows)

    def spans(self, kind):
        """The metrics rows of `kind` (forward, backward, update, wait, average, flush, ...) with
        duration_s = end_s - start_s (0 for instants such as send and recv)."""
        rows = self.metrics[self.metrics["kind"] == kind].copy()
        rows["duration_s"] = rows["end_s"] - rows["start_s"]
        return rows

    def __repr__(self):
        executor = self.info.get("executor", "?") if self.info else "?"
        return f"Run({self.folder!r}, executor={executor}, {len(self.metrics)} metrics rows)"


def load_run(folder):
    """The run folder `folder` as a Run; RunError if it is not one."""
    return Run(folder)


def load_runs(folders):
    """Several runs' tables stacked, with a `run` column (the folder's path as given):
    {"metrics": DataFrame, "eval": DataFrame, "per_node": DataFrame, "stages": DataFrame}; a
    table no run has is an empty DataFrame."""
    out = {}
    loaded = [(f, load_run(f)) for f in folders]
    for name in ("metrics", "eval", "per_node", "stages"):
        parts = []
        for f, r in loaded:
            t = getattr(r, name)
            if t is not None and len(t) > 0:
                parts.append(t.assign(run=f))
        out[name] = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return out
