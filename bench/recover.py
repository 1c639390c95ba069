#!/usr/bin/env python3
"""A real run that loses a rank against the same run without the loss (issue 17, item 4).

For each seed, runs scenarios/real-recover.toml (real.on_peer_loss = "recover") with `ravnest
real` twice: once untouched, once with one rank (chosen at random, never rank 0, which gathers the
run) killed by SIGKILL at a random moment while it trains (after the first updates reach the live
metrics.csv). Reports each run's final test accuracy, the range of the untouched runs widened by
one point on either side, and whether every run with a lost rank lies inside it; also the churn
figures of each faulted run (micro-batches dropped, rounds sat out, state transferred). A
benchmark, not a test: its figures come from wall-clock runs.

Usage: bench/recover.py [--seeds 1,2,3] [--rng 1] [--out FILE]
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAVNEST = os.path.join(ROOT, "build", "ravnest")
SCENARIO = os.path.join(ROOT, "scenarios", "real-recover.toml")


def rank_pid(launcher, rank):
    """The `ravnest node` child of `launcher` that runs `rank`, or None."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rfind(")") + 2:].split()[1])
            if ppid != launcher:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"node" in args and b"--rank" in args and args[args.index(b"--rank") + 1] == str(rank).encode():
            return int(name)
    return None


def updates(path):
    """The update rows of a metrics.csv so far, found by its header's kind column."""
    try:
        with open(path) as f:
            header = f.readline().strip().split(",")
            if "kind" not in header:
                return 0
            k = header.index("kind")
            return sum(1 for line in f if line.split(",", k + 1)[k] == "update")
    except OSError:
        return 0


def run(work, name, seed, kill=None):
    """Runs the scenario; with kill = (rank, delay), kills that rank `delay` s into training."""
    folder = os.path.join(work, name)
    cmd = [RAVNEST, "real", SCENARIO, "--set", f"seed={seed}", "--run-dir", folder, "--progress", "off"]
    with open(os.path.join(work, name + ".log"), "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        if kill:
            rank, delay = kill
            deadline = time.time() + 300
            while updates(os.path.join(folder, "metrics.csv")) < 10 and p.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(delay)
            pid = rank_pid(p.pid, rank)
            if pid is None:
                p.kill()
                sys.exit(f"{name}: rank {rank} not found to kill")
            os.kill(pid, signal.SIGKILL)
        status = p.wait()
    if status != 0:
        sys.exit(f"{name}: ravnest real exited with {status} (see {os.path.join(work, name + '.log')})")
    with open(os.path.join(folder, "summary.json")) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--rng", type=int, default=1, help="seed of the victims and moments")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    a = ap.parse_args()
    rng = random.Random(a.rng)
    seeds = [int(s) for s in a.seeds.split(",")]
    work = tempfile.mkdtemp(prefix="rv-recover-bench-")
    clean, faulted = [], []
    for seed in seeds:
        clean.append(run(work, f"clean-{seed}", seed)["final"]["test_accuracy"])
        victim, delay = rng.randint(1, 5), rng.uniform(0.0, 15.0)
        s = run(work, f"killed-{seed}", seed, (victim, delay))
        faulted.append({"seed": seed, "victim": victim, "after_s": round(delay, 2),
                        "accuracy": s["final"]["test_accuracy"], "churn": s.get("churn", {})})
        print(f"seed {seed}: untouched {clean[-1]:.4f}; rank {victim} killed {delay:.1f} s into training: "
              f"{faulted[-1]['accuracy']:.4f}", flush=True)
    lo, hi = min(clean) - 0.01, max(clean) + 0.01
    inside = all(lo <= f["accuracy"] <= hi for f in faulted)
    print(f"untouched runs: {min(clean):.4f} .. {max(clean):.4f}; widened by a point: {lo:.4f} .. {hi:.4f}")
    for f in faulted:
        c = f["churn"]
        print(f"  seed {f['seed']}: rank {f['victim']} lost, accuracy {f['accuracy']:.4f} "
              f"({'inside' if lo <= f['accuracy'] <= hi else 'OUTSIDE'}); dropped micro-batches "
              f"{c.get('dropped_micro_batches')}, rounds sat out {c.get('rounds_sat_out')}, state "
              f"transfers {c.get('state_transfers')} ({c.get('state_transfer_bytes')} bytes)")
    print("every run with a lost rank inside the range:", inside)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"untouched": clean, "range": [lo, hi], "faulted": faulted, "inside": inside}, f, indent=1)


if __name__ == "__main__":
    main()
