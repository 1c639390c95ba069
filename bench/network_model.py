"""The network model against real TCP: figures for docs/network-model.md (bench/network_model.sh).

    network_model.py probe RUN...      per-message transfer times of probe runs (one message at a
                                        time): the effective bandwidth factor of each
    network_model.py compare OUT       steady samples/s of each scenario's real runs (kernel and
                                        user-space shaper) against its simulations (one per model)

A message's transfer time is its receiver's recv event minus its sender's send event (one
micro-batch in flight: the receiver is waiting for it). Its effective bandwidth factor is
bytes / ((transfer - route latency) * slower link), where the route latency is the two links'
one-way latencies as the scenario gives them and the slower link the sender's uplink or the
receiver's downlink, both after the run's dilation.
"""
import csv
import json
import math
import os
import statistics
import sys
import tomllib

MBIT = 1e6 / 8  # bytes per second


def links(run):
    """Per node (up bytes/s, down bytes/s, latency s), as the run's resolved scenario.toml gives them."""
    with open(os.path.join(run, "scenario.toml"), "rb") as f:
        s = tomllib.load(f)
    k = s.get("dilation", 1.0)
    out = []
    for d in s["devices"]:
        for _ in range(d["count"]):
            out.append((d["up_mbps"] * MBIT / k, d["down_mbps"] * MBIT / k, d["latency_ms"] * 1e-3 * k))
    return out, s


def transfers(run):
    """[(src, dst, bytes, seconds)] of the training messages in metrics.csv: each pair's k-th send
    with its k-th recv (one connection delivers in order), sent before the sender's last backward
    ended (what follows is the end of the run, not training)."""
    sends, recvs, last_backward = {}, {}, {}
    with open(os.path.join(run, "metrics.csv")) as f:
        for row in csv.DictReader(f):
            node = int(row["node"])
            if row["kind"] == "backward" and int(row["micro_batch"]) >= 0:
                last_backward[node] = max(last_backward.get(node, 0.0), float(row["end_s"]))
            if row["kind"] not in ("send", "recv"):
                continue
            peer, t, b = int(row["peer"]), float(row["start_s"]), int(row["bytes"])
            if row["kind"] == "send":
                sends.setdefault((node, peer), []).append((t, b))
            else:
                recvs.setdefault((peer, node), []).append(t)
    out = []
    for pair, ss in sends.items():
        ss.sort()
        rr = sorted(recvs.get(pair, []))
        for (t, b), r in zip(ss, rr):
            if t <= last_backward.get(pair[0], math.inf):
                out.append((pair[0], pair[1], b, r - t))
    return out


def probe(runs):
    rows = []
    for run in runs:
        net, s = links(run)
        factors = []
        for src, dst, b, t in transfers(run):
            rate = min(net[src][0], net[dst][1])
            latency = net[src][2] + net[dst][2]
            if t > latency:
                factors.append(b / ((t - latency) * rate))
        shaper = s.get("real", {}).get("shaper", "?")
        d = s["devices"][0]
        row = {"run": os.path.basename(run), "shaper": shaper, "mbps": d["up_mbps"], "latency_ms": d["latency_ms"],
               "dilation": s.get("dilation", 1.0), "messages": len(factors),
               "factor_median": statistics.median(factors) if factors else math.nan,
               "factor_p10": sorted(factors)[len(factors) // 10] if factors else math.nan,
               "factor_p90": sorted(factors)[len(factors) * 9 // 10] if factors else math.nan}
        rows.append(row)
        print(f"{row['run']:<28} {shaper:<7} {row['mbps']:>7g} Mbit/s {row['latency_ms']:>5g} ms  k={row['dilation']:<5g}"
              f" {row['messages']:>4} messages  factor median {row['factor_median']:.4f}"
              f" (p10 {row['factor_p10']:.4f}, p90 {row['factor_p90']:.4f})")
    kernel = [r["factor_median"] for r in rows if r["shaper"] == "kernel"]
    if kernel:
        print(f"measured bandwidth factor (kernel shaper, median over the probe runs): {statistics.median(kernel):.3f}")
    return rows


def steady(run):
    with open(os.path.join(run, "summary.json")) as f:
        return json.load(f)["steady_samples_per_s"]


def error(a, b):
    return math.exp(abs(math.log(a / b))) - 1 if a > 0 and b > 0 else math.nan


def compare(out):
    """OUT/<case>/{real-kernel,real-user,sim-<model>}: each sim model's error against each real run."""
    cases = sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d, "real-kernel")))
    models = sorted({d[len("sim-"):] for c in cases for d in os.listdir(os.path.join(out, c)) if d.startswith("sim-")})
    table = []
    print(f"{'case':<24} {'real kernel':>12} {'real user':>10} " + " ".join(f"{m:>18}" for m in models))
    for c in cases:
        base = os.path.join(out, c)
        rk = steady(os.path.join(base, "real-kernel"))
        ru = steady(os.path.join(base, "real-user")) if os.path.isdir(os.path.join(base, "real-user")) else math.nan
        row = {"case": c, "real_kernel": rk, "real_user": ru, "sim": {}}
        cells = []
        for m in models:
            sm = steady(os.path.join(base, "sim-" + m))
            row["sim"][m] = {"samples_per_s": sm, "error_kernel": error(sm, rk), "error_user": error(sm, ru)}
            cells.append(f"{sm:8.1f} ({100 * error(sm, rk):5.1f}%)")
        table.append(row)
        print(f"{c:<24} {rk:>12.1f} {ru:>10.1f} " + " ".join(f"{x:>18}" for x in cells))
    for m in models:
        errs = [r["sim"][m]["error_kernel"] for r in table if not math.isnan(r["sim"][m]["error_kernel"])]
        if errs:
            g = math.exp(statistics.mean(math.log1p(e) for e in errs)) - 1
            print(f"  {m}: against the kernel shaper, geometric mean error {100 * g:.1f}%, worst {100 * max(errs):.1f}%")
    return table


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("probe", "compare"):
        sys.exit(__doc__)
    if sys.argv[1] == "probe":
        probe(sys.argv[2:])
    else:
        compare(sys.argv[2])
