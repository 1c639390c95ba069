#!/usr/bin/python3
"""A run folder's tables as pandas DataFrames, for your own analysis.

    import sys; sys.path.insert(0, "analysis")      # or share/ravnest of an installed tree
    import runs
    r = runs.load_run("runs/quickstart/sim-20261126-064033")
    r.metrics            # metrics.csv: one row per event (kind, node, ..., start_s, end_s, loss, ...)
    r.spans("forward")   # the rows of one kind, with duration_s = end_s - start_s
    runs.column(r.metrics, "device_s")   # a column by name: all NaN where an older folder lacks it
    r.eval               # eval.csv: test loss and accuracy over time
    r.per_node           # summary.json's per-node figures, one row per node
    r.stages             # plan.json's stages: cluster, stage, node, layer_begin, layer_end, predicted_time_s, ...
    r.summary, r.plan, r.info, r.scenario   # summary.json, plan.json, run.json, scenario.toml as dicts
    r.theory, r.theory_curve   # `ravnest theory`'s theory.json (a dict) and theory.csv (per update)
    both = runs.load_runs(["runs/a/sim-1", "runs/a/real-1"])   # one table of each kind, a `run` column

Times are seconds from the run's start: simulated time for sim runs, wall time for real ones
(r.info["executor"]). What a folder lacks is None (an empty table for metrics-less folders of
output.metrics = "summary", whose per-node rows are in r.node_metrics). A folder that is not a
run folder, or a table that does not read, raises RunError saying which file and why.

The CSV tables (metrics.csv, eval.csv, theory.csv) are read by their header's names: a table has
the columns its file has, in the file's order, so folders of older versions (without device_s)
and of newer ones (more columns, or another order) read alike. `kind` is text, every other column
a number (an empty field is NaN). A table's header must hold the columns the table cannot do
without (METRICS_REQUIRED, EVAL_REQUIRED, THEORY_REQUIRED); a column beyond those is best asked
for through column(), which gives NaN where a file lacks it. read_table() reads such a CSV alone.
"""

import csv
import json
import os
import tomllib

import numpy as np
import pandas as pd

# The columns a table cannot be read without. The writer (core/output/event_schema.cc) holds the
# only full column table: a table here is read by its header's names, whatever columns it has,
# in whatever order; a column an older file lacks is all NaN where asked for by column().
METRICS_REQUIRED = ("kind", "node", "start_s", "end_s")   # metrics.csv, one row per event
EVAL_REQUIRED = ("time_s", "test_loss")                    # eval.csv, one row per evaluation
THEORY_REQUIRED = ("k", "running_mean", "bound")           # theory.csv, of `ravnest theory`
# metrics.csv's only text column; every other column of these tables is a number (empty = NaN).
TEXT_COLUMNS = ("kind",)
# Fields read as NaN without a second look: empty, and how C's printf writes a NaN.
_NAN_FIELDS = ["", "nan", "-nan", "NaN", "-NaN"]


class RunError(Exception):
    """A folder that is not a readable run folder: the message names the file and the problem."""


def column(df, name):
    """The column `name` of `df`, or, where the table lacks it (an older run folder, e.g. one
    written before device_s), a float Series of NaN on df's index: never a KeyError."""
    if name in df.columns:
        return df[name]
    return pd.Series(np.nan, index=df.index, name=name, dtype=float)


def _header(path):
    """The names in the first line of the CSV at `path`, stripped; RunError if it has none."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            names = next(csv.reader([f.readline()]), [])
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise RunError(f"{path}: cannot read it as CSV: {e}") from e
    names = [n.strip() for n in names]
    if not names or names == [""]:
        raise RunError(f"{path}:1: bad header '(empty file)'")
    return names


def _row_lines(path, width):
    """Checks that every row after the header of the CSV at `path` has `width` fields (RunError
    naming the line and its field count otherwise). Returns (rows, line): the number of rows and a
    function from a row's index to its line in the file (empty lines are no rows)."""
    blank, lineno = [], 1
    try:
        with open(path, "rb") as f:
            f.readline()
            for lineno, line in enumerate(f, start=2):
                if b'"' in line:   # quoted fields may hold commas and line ends: the csv module
                    return _row_lines_quoted(path, width)
                if line in (b"\n", b"\r\n"):
                    blank.append(lineno)
                    continue
                fields = line.count(b",") + 1
                if fields != width:
                    raise RunError(f"{path}:{lineno}: {fields} fields, expected {width}")
    except OSError as e:
        raise RunError(f"{path}: cannot read it: {e}") from e

    def line(i):
        n = i + 2
        for b in blank:   # in file order
            if b > n:
                break
            n += 1
        return n
    return lineno - 1 - len(blank), line


def _row_lines_quoted(path, width):
    """_row_lines for a file with quoted fields, through the csv module."""
    starts = []
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            next(reader, None)
            start = reader.line_num + 1
            for row in reader:
                if row:
                    if len(row) != width:
                        raise RunError(f"{path}:{start}: {len(row)} fields, expected {width}")
                    starts.append(start)
                start = reader.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise RunError(f"{path}: cannot read it as CSV: {e}") from e
    return len(starts), starts.__getitem__


def read_table(path, required=(), text=TEXT_COLUMNS, optional=True):
    """The CSV at `path` as a DataFrame of the columns its header names, in its order: the columns
    in `text` as strings, every other one as numbers (an empty field, or nan, is NaN). None if
    there is no file and `optional`. RunError, naming the file, for a header that lacks a column
    of `required` or names one twice, a row whose field count is not the header's (with its line),
    and a field of a number column that is not a number (with its line and column)."""
    if not os.path.exists(path):
        if optional:
            return None
        raise RunError(f"{path}: no such file")
    names = _header(path)
    missing = [c for c in required if c not in names]
    if missing:
        raise RunError(f"{path}:1: bad header '{','.join(names)}': no column "
                       + ", ".join(f"'{c}'" for c in missing))
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:
        raise RunError(f"{path}:1: bad header '{','.join(names)}': the column '{twice[0]}' twice")
    rows, line = _row_lines(path, len(names))
    numeric = [c for c in names if c not in text]
    try:
        df = pd.read_csv(path, header=0, names=names, index_col=False, skip_blank_lines=True,
                         dtype={c: str for c in names if c in text}, keep_default_na=False,
                         na_values={c: _NAN_FIELDS for c in numeric}, float_precision="round_trip",
                         encoding="utf-8")
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as e:
        raise RunError(f"{path}: cannot read it as CSV: {e}") from e
    if len(df) != rows:
        raise RunError(f"{path}: {len(df)} rows read, {rows} expected: not a plain CSV table")
    for c in numeric:
        if df[c].dtype.kind not in "fiu":   # a text field somewhere (or true/false), or no rows
            df[c] = _numbers(path, c, df[c], line)
    return df


def _numbers(path, name, values, line):
    """The column `name` of strings (and NaN) as floats, as Python's float reads them; RunError
    naming the line of the first field that is not a number."""
    out = np.empty(len(values))
    for i, v in enumerate(values):
        if isinstance(v, float) and v != v:   # a field of _NAN_FIELDS
            out[i] = np.nan
            continue
        field = str(v).strip()
        try:
            out[i] = float(field) if field else np.nan
        except ValueError:
            raise RunError(f"{path}:{line(i)}: column '{name}': not a number: '{field}'") from None
    return pd.Series(out, index=values.index, name=name)


def _read_csv(path):
    """A CSV without a schema (node_metrics.csv), as pandas reads it; None if there is none."""
    if not os.path.exists(path):
        return None
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as e:
        raise RunError(f"{path}: cannot read it as CSV: {e}") from e


def _read_json(path):
    """The JSON file at `path` (None if there is none); RunError if it does not read."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunError(f"{path}: not valid JSON: {e}") from e
    except OSError as e:
        raise RunError(f"{path}: cannot read it: {e}") from e


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
        self.metrics = read_table(path("metrics.csv"), METRICS_REQUIRED)
        self.node_metrics = _read_csv(path("node_metrics.csv"))
        self.eval = read_table(path("eval.csv"), EVAL_REQUIRED)
        if self.metrics is None and self.node_metrics is None and self.summary is None:
            raise RunError(f"{folder}: not a run folder (no metrics.csv, node_metrics.csv or summary.json)")
        if self.metrics is None:   # no rows, and the columns every metrics table has
            self.metrics = pd.DataFrame({c: pd.Series(dtype=object if c in TEXT_COLUMNS else float)
                                         for c in METRICS_REQUIRED})
        self.theory = _read_json(path("theory.json"))
        self.theory_curve = read_table(path("theory.csv"), THEORY_REQUIRED)
        self.scenario = None
        if os.path.exists(path("scenario.toml")):
            try:
                with open(path("scenario.toml"), "rb") as f:
                    self.scenario = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                raise RunError(f"{path('scenario.toml')}: not valid TOML: {e}") from e
            except OSError as e:
                raise RunError(f"{path('scenario.toml')}: cannot read it: {e}") from e
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
