#!/usr/bin/python3
"""ctest: rv-ns3-ref and rv-flow-ref on tiny patterns (2-3 nodes).

Usage: test_tiny.py RV_NS3_REF RV_FLOW_REF [--wrong-rate]

Checks, each able to fail:
 1. bulk: one 10 MB message over an idle 20 Mbit/s uplink (a 100 Mbit/s downlink, 15 ms of route
    latency). ns-3's transfer time must lie within [1.00, 1.10] x (size / rate + latency): TCP's
    and PPP's headers alone cost 1500 + 2 wire bytes per 1448 payload bytes (x 1.037), slow start
    from an initial window of 10 a few round trips more. rv-flow-ref --model tcp must give
    latency + size / (0.962 rate) to 1e-6 s, and --model ideal latency + size / rate.
    --wrong-rate (the negative control) runs ns-3 with the uplink at 40 Mbit/s while the check
    still expects 20: the check must then fail (exit 1).
 2. every message arrives: a 3-stage pipeline of 6 micro-batches and a 3-member ring of 2 rounds
    (the counts the patterns imply: 2 (k - 1) M and 2 (C - 1) C R), under ns-3 and every flow
    model.
 3. bad input exits 2 with a message.
"""
import json
import os
import subprocess
import sys
import tempfile

ns3, flow = sys.argv[1], sys.argv[2]
wrong = "--wrong-rate" in sys.argv[3:]
tmp = tempfile.mkdtemp(prefix="netref-test-")
failed = []


def write(name, obj):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip().startswith("{") else None), p.stderr


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)


size, up, lat = 10_000_000, 20.0, 0.010 + 0.005
nodes = [{"up_mbps": up * (2 if wrong else 1), "down_mbps": 100, "latency_ms": 10},
         {"up_mbps": 50, "down_mbps": 100, "latency_ms": 5}]
bulk = write("bulk.json", {"nodes": nodes, "pattern": {
    "kind": "pipeline", "clusters": [[0, 1]], "fwd_s": [0, 0], "bwd_s": [0, 0],
    "activation_bytes": size, "gradient_bytes": 1, "micro_batches": 1}})
ideal_t = size / (up * 125000) + lat
rc, out, err = run([ns3, bulk])
check(rc == 0 and out is not None, f"ns-3 bulk runs (exit {rc}) {err.strip()}")
if out:
    m = out["messages"][0]
    t = m[4] - m[3]
    ratio = t / ideal_t
    check(1.00 <= ratio <= 1.10,
          f"ns-3 bulk: {t:.4f} s = {ratio:.4f} x (size/rate + latency = {ideal_t:.4f} s), band [1.00, 1.10]")
if not wrong:
    for model, factor in (("tcp", 0.962), ("ideal", 1.0)):
        rc, out, err = run([flow, bulk, "--model", model])
        want = size / (up * 125000 * factor) + lat
        got = out["messages"][0][4] - out["messages"][0][3] if out else -1
        check(rc == 0 and abs(got - want) < 1e-6, f"flow {model} bulk: {got:.6f} s, expected {want:.6f} s")

three = [{"up_mbps": 20, "down_mbps": 100, "latency_ms": 30},
         {"up_mbps": 50, "down_mbps": 300, "latency_ms": 15},
         {"up_mbps": 30, "down_mbps": 200, "latency_ms": 5}]
pipe = write("pipe.json", {"nodes": three, "pattern": {
    "kind": "pipeline", "clusters": [[0, 1, 2]], "fwd_s": [0.01, 0.02, 0.01], "bwd_s": [0.02, 0.04, 0.02],
    "activation_bytes": 300_000, "gradient_bytes": 200_000, "micro_batches": 6}})
ring = write("ring.json", {"nodes": three, "pattern": {"kind": "ring", "rings": [[0, 1, 2]],
                                                       "bytes": 3_000_001, "rounds": 2}})
for path, count in ((pipe, 2 * 2 * 6), (ring, 2 * 2 * 3 * 2)):
    for cmd in ([ns3, path], [flow, path, "--model", "tcp"], [flow, path, "--model", "lv08"],
                [flow, path, "--model", "ideal"]):
        rc, out, err = run(cmd)
        ok = (rc == 0 and out is not None and out["message_count"] == count and out["undelivered"] == 0
              and all(m[4] >= m[3] >= 0 for m in out["messages"]))
        check(ok, f"{os.path.basename(cmd[0])} {' '.join(cmd[2:])} {os.path.basename(path)}: "
                  f"{count} messages, all arrived (exit {rc})")

bad = write("bad.json", {"nodes": three, "pattern": {"kind": "ring", "rings": [[0, 1, 7]], "bytes": 10}})
for tool in (ns3, flow):
    rc, out, err = run([tool, bad])
    check(rc == 2 and "pattern.rings" in err, f"{os.path.basename(tool)} bad input: exit {rc}, {err.strip()}")

print("FAILED: %d check(s)" % len(failed) if failed else "all checks passed")
sys.exit(1 if failed else 0)
