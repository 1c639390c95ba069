#!/usr/bin/env python3
"""Killed and stopped ranks at random moments of real runs: how soon the run ends, whom it names.

Each run starts `ravnest real` on a 3-node scenario (the digits CNN, two clusters, real.timeout_s
= --timeout, steps enough to outlast the run), waits a random moment after the ranks start (from
the rendezvous on), then sends one rank, chosen at random, SIGKILL or SIGSTOP (alternately). It
measures the wall time from the signal to the launcher's exit, and checks:
  - the launcher exits with status 1 (a runtime failure) within 3 x timeout + 10 s (else a hang:
    the launcher is killed, the run counted);
  - its message names the rank that was signalled as the cause (for a killed rank: "rank R was
    killed by signal 9", or the peers' "lost peer R"; for a stopped one: "rank(s) R stopped
    answering", "stayed stopped", or "peer R silent");
  - no rank outlives the launcher, and its temporary folder is gone.
Writes the figures as JSON (--out) and prints a summary. A benchmark, not a test: wall-clock times.

Usage: bench/peer_loss.py [--runs 200] [--timeout 2] [--seed 1] [--out FILE]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAVNEST = os.path.join(ROOT, "build", "ravnest")

SCENARIO = """name = "peer-loss"
seed = 5
[model]
kind = "cnn"
head = "linear"
channels = [8, 16]
hidden = [32]
[data]
kind = "digits"
batch_size = 32
[training]
optimizer = "adam"
lr = 0.003
steps = 1000000
eval_every = 0
[real]
timeout_s = {timeout}
[[devices]]
count = 3
up_mbps = 20
down_mbps = 50
latency_ms = 10
[planner]
method = "manual"
[[planner.cluster]]
nodes = [0, 1]
[[planner.cluster]]
nodes = [2]
"""


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return None
    for i, a in enumerate(args[:-1]):
        if a == b"--rank":
            return int(args[i + 1])
    return None


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not alive.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def named_rank(fault, err):
    """The rank the launcher's message gives as the cause, or None."""
    m = re.search(r"real run failed: rank\(s\) ([0-9, ]+) (stopped answering|stayed stopped)", err)
    if m:
        ranks = [int(x) for x in m.group(1).split(",")]
        return ranks[0] if len(ranks) == 1 else tuple(ranks)
    m = re.search(r"real run failed: rank (\d+) (was killed by signal|exited)", err)
    if m and "was killed" in m.group(2):
        return int(m.group(1))
    # A rank that ended because of a peer: the peer it names.
    m = re.search(r"(?:lost peer|peer) (\d+)(?: silent| \(its process ended)", err)
    if m:
        return int(m.group(1))
    return None


def one_run(i, rng, timeout, work):
    fault = "kill" if i % 2 == 0 else "stop"
    sig = signal.SIGKILL if fault == "kill" else signal.SIGSTOP
    victim = rng.randrange(3)
    moment = rng.uniform(0.0, 6.0)
    tmp = os.path.join(work, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    env = dict(os.environ, TMPDIR=tmp)
    with open(os.path.join(work, "err.txt"), "w") as err_f:
        p = subprocess.Popen([RAVNEST, "real", "s.toml", "--progress", "off"], cwd=work, env=env,
                             stdout=subprocess.DEVNULL, stderr=err_f)
        ranks = {}
        t0 = time.monotonic()
        while len(ranks) < 3 and time.monotonic() - t0 < 30 and p.poll() is None:
            for c in children_of(p.pid):
                r = rank_of(c)
                if r is not None:
                    ranks[r] = c
            time.sleep(0.01)
        if len(ranks) < 3:
            p.kill()
            p.wait()
            return {"run": i, "fault": fault, "error": "ranks did not start"}
        time.sleep(moment)
        t_fault = time.monotonic()
        os.kill(ranks[victim], sig)
        limit = 3 * timeout + 10
        hang = False
        try:
            status = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            hang = True
            p.kill()
            status = p.wait()
        t_end = time.monotonic()
    with open(os.path.join(work, "err.txt")) as f:
        err = f.read()
    time.sleep(0.05)
    leftover = [r for r, c in ranks.items() if alive(c)]
    for c in ranks.values():
        try:
            os.kill(c, signal.SIGKILL)
        except ProcessLookupError:
            pass
    named = named_rank(fault, err)
    return {
        "run": i, "fault": fault, "victim": victim, "moment_s": round(moment, 3),
        "detect_s": round(t_end - t_fault, 3), "status": status, "hang": hang,
        "named": named, "right_rank": named == victim, "ranks_left": leftover,
        "tmp_left": os.listdir(tmp), "message": err.strip().splitlines()[-1] if err.strip() else "",
    }


def summary(rows):
    out = {}
    for fault in ("kill", "stop"):
        rs = [r for r in rows if r.get("fault") == fault and "detect_s" in r]
        d = sorted(r["detect_s"] for r in rs if not r["hang"])
        out[fault] = {
            "runs": len(rs),
            "hangs": sum(r["hang"] for r in rs),
            "exit_1": sum(r["status"] == 1 for r in rs),
            "right_rank": sum(r["right_rank"] for r in rs),
            "ranks_left": sum(bool(r["ranks_left"]) for r in rs),
            "tmp_left": sum(bool(r["tmp_left"]) for r in rs),
            "detect_s": {
                "min": d[0] if d else None,
                "median": statistics.median(d) if d else None,
                "p95": d[min(len(d) - 1, int(0.95 * len(d)))] if d else None,
                "max": d[-1] if d else None,
            },
        }
    out["errors"] = sum("error" in r for r in rows)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "peer_loss.json"))
    a = ap.parse_args()
    if not os.access(RAVNEST, os.X_OK):
        sys.exit(f"peer_loss: {RAVNEST} is missing: run scripts/build.sh first")
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="rv-peer-loss-")
    with open(os.path.join(work, "s.toml"), "w") as f:
        f.write(SCENARIO.format(timeout=a.timeout))
    rows = []
    try:
        for i in range(a.runs):
            r = one_run(i, rng, a.timeout, work)
            rows.append(r)
            print(json.dumps(r), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"timeout_s": a.timeout, "runs": a.runs, "seed": a.seed, "summary": summary(rows), "rows": rows}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
