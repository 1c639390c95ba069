#!/usr/bin/python3
"""Analyze run.sh's results (README.md): each message's measured time against the flow model,
which effects move a pipeline's or an averaging round's steady rate by more than 5%, and candidate
models for those effects with their errors.

    /usr/bin/python3 bench/tcp_effects/analyze.py [/tmp/tcpfx-results]

Writes OUT/summary.md and OUT/summary.json and prints the summary.

The flow model (the project's `tcp` model, CM02): a message of S bytes from a to b takes
L + S / (0.962 * r), L = latency(a) + latency(b) = RTT / 2, r = min(up(a), down(b)); one
connection per ordered pair, a pair's messages one after the other (a message starts its bytes at
max(send + L, end of the pair's previous message)). The two directions of an exchange use
different links (a's up and b's down; b's up and a's down), so the model shares nothing between
them.
"""
import glob
import json
import math
import os
import sys

import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tcpfx-results"
F = 0.962          # the tcp model's bandwidth factor
MSS = 1448         # payload bytes per segment (TCP timestamps on)
W0 = 10 * MSS      # Linux's initial window
GAMMA = 4194304    # SimGrid lv08's window (bytes); also this host's tcp_wmem max
HDR = 16           # rv-msg-pattern's header per message
FLAG = 0.05


def load():
    cells = {}
    for meta_path in sorted(glob.glob(os.path.join(OUT, "cells", "*.meta.json"))):
        try:
            meta = json.load(open(meta_path))
        except json.JSONDecodeError as e:
            print(f"skip {meta_path}: {e}", file=sys.stderr)
            continue
        data_path = meta_path.replace(".meta.json", ".json")
        if meta["rc"] != 0 or not os.path.exists(data_path):
            print(f"skip {meta['name']}: rc={meta['rc']}", file=sys.stderr)
            continue
        meta["data"] = json.load(open(data_path))
        base = meta["base"]
        # the last try counts (a repeat replaces a try whose delay line was late)
        if base not in cells or meta["try"] > cells[base]["try"]:
            cells[base] = meta
    return cells


def bps(mbit):
    return mbit * 1e6 / 8


def route(cell, d):
    """(one-way latency s, bottleneck bytes/s, rtt s) of direction d ('ab' or 'ba')."""
    rtt = cell["rtt_ms"] / 1000
    if d == "ab":
        r = min(cell["up_a"], cell["down_b"])
    else:
        r = min(cell["up_b"], cell["down_a"])
    return rtt / 2, bps(r), rtt


def model_time(S, L, r):
    return L + (S + HDR) / (F * r)


def msg_time(m):
    return (m["arrive"] - m["enqueue"]) / 1e9


# --- candidate models --------------------------------------------------------------------------
def cand_slowstart(S, L, r, rtt, w0=W0, wmax=None):
    """Window starts at w0 and doubles each round trip until it covers the BDP (or S is sent);
    the rest goes at the rate (capped at wmax/rtt when wmax is given). Last byte + L."""
    rate = F * r
    if wmax:
        rate = min(rate, wmax / rtt)
    bdp = rate * rtt
    S = S + HDR
    sent, t, w = 0.0, 0.0, float(w0)
    while w < bdp and sent + w < S:
        sent += w
        t += rtt
        w *= 2
    return t + (S - sent) / rate + L


def cand_rounds(S, L, r, rtt):
    """The brief's closed form: model + rtt * log2(BDP / w0) extra rounds, capped by message size
    (no more rounds than needed to send S in a doubling window)."""
    bdp = F * r * rtt
    if bdp <= W0:
        return model_time(S, L, r)
    rounds_bdp = math.log2(bdp / W0)
    rounds_size = math.log2(max(1.0, (S + HDR) / W0 + 1))
    return model_time(S, L, r) + rtt * min(rounds_bdp, rounds_size)


def cand_window(S, L, r, rtt, wmax=GAMMA):
    """SimGrid lv08's cap: rate <= gamma / rtt (gamma / (2 * one-way latency))."""
    return L + (S + HDR) / min(F * r, wmax / rtt)


PARAMS = {"W": GAMMA, "c": 0.0}  # fitted in fit(): effective window (bytes), BBR floor (RTTs)


def cap_rate(r, rtt):
    return min(F * r, PARAMS["W"] / rtt)


def cand_cap(S, L, r, rtt):
    """Window cap with the fitted effective window W: rate <= W / rtt."""
    return L + (S + HDR) / cap_rate(r, rtt)


def cand_warm(S, L, r, rtt):
    """Warm connection: window cap, and no message faster than c round trips (BBR's pacing of
    an application-limited connection)."""
    return L + max((S + HDR) / cap_rate(r, rtt), PARAMS["c"] * rtt)


def cand_fresh(S, L, r, rtt):
    """Fresh connection: the warm time plus rtt * log2 rounds for the window to grow from
    10 MSS to the (capped) BDP, no more rounds than S needs."""
    bdp = cap_rate(r, rtt) * rtt
    extra = 0.0
    if bdp > W0:
        extra = rtt * min(math.log2(bdp / W0), math.log2(max(1.0, (S + HDR) / W0 + 1)))
    return cand_warm(S, L, r, rtt) + extra


def fit(rows):
    """W and c from one-way messages after idle (0.1 and 1 s) at RTT 100 and 250 ms only, so
    that RTT 10 and 50 ms test them out of sample."""
    ws, cs = [], []
    for r in rows:
        if r["cls"] not in ("gap0.1", "gap1") or r["rtt_ms"] < 100 or r["leaf"] != "default":
            continue
        if F * r["r"] * r["rtt"] > 2 * GAMMA and r["size"] >= 10e6:
            ws.append(r["size"] / (r["T"] - r["L"]) * r["rtt"])
        if r["size"] / (F * r["r"]) < 0.2 * r["rtt"]:
            cs.append((r["T"] - r["L"]) / r["rtt"])
    if ws:
        PARAMS["W"] = float(np.median(ws))
    if cs:
        PARAMS["c"] = float(np.median(cs))
    return ws, cs


def cand_restart(S, L, r, rtt, idle, cwnd_before=None):
    """Slow start after idle (Linux tcp_cwnd_restart, loss-based congestion control): the window
    is halved for every RTO of idle (RTO ~ RTT + 0.2 s), not below 10 MSS, then grows as in slow
    start. cwnd_before: the window before the idle (bytes); None: the capped BDP."""
    bdp = cap_rate(r, rtt) * rtt
    before = cwnd_before if cwnd_before else bdp
    w0 = max(W0, before / 2 ** int(idle / (rtt + 0.2)))
    return cand_slowstart(S, L, r, rtt, w0=w0, wmax=PARAMS["W"])


def cand_ack(S, L, r):
    """Two-way: the uplink also carries ACKs of the other direction, ~66 wire bytes per 2
    full 1514-byte segments."""
    return L + (S + HDR) / (F * r * (1 - 66 / (2 * 1514)))


# --- pipeline model ----------------------------------------------------------------------------
def sim_pipeline(n, k, fa, ba, fb, act, grad, Lab, rab, Lba, rba, ab_time=None, ba_time=None):
    """The same logic as rv-msg-pattern's pipeline, message times from the flow model (per
    connection FIFO). Returns a's backward completion times."""
    ab_time = ab_time or (lambda S, i: (S + HDR) / (F * rab))
    ba_time = ba_time or (lambda S, i: (S + HDR) / (F * rba))
    end_ab = end_ba = -1e18
    tb = 0.0
    grads = []  # arrival times at a, in order
    ta, nxt, inflight, done, gi = 0.0, 0, 0, [], 0
    while len(done) < n:
        if gi < len(grads) and grads[gi] <= ta:
            ta += ba
            done.append(ta)
            gi += 1
            inflight -= 1
        elif inflight < k and nxt < n:
            ta += fa
            st = max(ta + Lab, end_ab)
            end_ab = st + ab_time(act, nxt)
            tb = max(tb, end_ab) + fb
            st2 = max(tb + Lba, end_ba)
            end_ba = st2 + ba_time(grad, nxt)
            grads.append(end_ba)
            nxt += 1
            inflight += 1
        else:
            ta = max(ta, grads[gi])
    return done


def steady_rate(times):
    """Completions per second over the second half."""
    t = np.array(times, dtype=float)
    h = len(t) // 2
    if len(t) - h < 3:
        return float("nan")
    return (len(t) - 1 - h) / (t[-1] - t[h])


def pct(x):
    return f"{100 * x:+.1f}%"


def main():
    cells = load()
    if not cells:
        print(f"no results under {OUT}")
        return 1
    rows = []  # one per message class per cell
    loads, lates = [], []
    for name, c in sorted(cells.items()):
        d = c["data"]
        loads.append(float(c["load_before"].split()[0]))
        if c["dl_p99_max_us"] is not None:
            lates.append((name, c["dl_p99_max_us"], c["try"]))
        drops = 0
        for q in ("qdisc_a_up", "qdisc_b_up", "qdisc_a_down", "qdisc_b_down"):
            for qd in c[q]:
                if qd.get("kind") in ("pfifo", "bfifo") or (qd.get("kind") == "htb"):
                    drops += qd.get("drops", 0)
        c["drops"] = drops
        base = dict(cell=name, rtt_ms=c["rtt_ms"], rate=f'{c["up_a"]}/{c["down_a"]}'
                    if c["up_a"] != c["down_a"] else str(c["up_a"]), leaf=c["leaf"],
                    pattern=d["pattern"], drops=drops, retrans=d["tcp_end_ab"]["total_retrans"]
                    + d["tcp_end_ba"]["total_retrans"], load=c["load_before"].split()[0],
                    dl_p99_us=c["dl_p99_max_us"], cc=c.get("cc", "bbr"))
        if d["pattern"] in ("oneway", "exchange"):
            for m in d["messages"]:
                if m["bytes"] == 0:
                    continue
                L, r, rtt = route(c, m["dir"])
                S = m["bytes"]
                T = msg_time(m)
                if d["pattern"] == "oneway":
                    # id 0: the fresh connection's first message; gap 0: the 2nd and 3rd, sent as
                    # the one before arrives (the window still growing after the first)
                    cls = "fresh" if m["id"] == 0 else ("gap0" if m["gap_s"] < 0.05 else
                                                        ("gap0.1" if m["gap_s"] < 0.5 else "gap1"))
                else:
                    cls = "ex_fresh" if m["id"] == 0 else "ex_steady"
                rows.append(dict(base, dir=m["dir"], size=S, cls=cls, T=T, model=model_time(S, L, r),
                                 L=L, r=r, rtt=rtt, cwnd=m["cwnd"]))
        else:
            n = d["microbatches"]
            La, ra, _ = route(c, "ab")
            Lb, rb, _ = route(c, "ba")
            sim = sim_pipeline(n, d["inflight"], d["fa"], d["ba"], d["fb"], d["act"], d["grad"],
                               La, ra, Lb, rb)
            meas = steady_rate([t / 1e9 for t in d["done"]])
            mod = steady_rate(sim)
            # the same pipeline with each message's measured time (the network alone)
            msgs = {(m["dir"], m["id"]): msg_time(m) for m in d["messages"]}
            # ideal network (messages take 0): what compute alone allows
            sim0 = sim_pipeline(n, d["inflight"], d["fa"], d["ba"], d["fb"], d["act"], d["grad"],
                                0, 1e18, 0, 1e18)
            ratios = [msgs[("ab", i)] / model_time(d["act"], La, ra) for i in range(n)
                      if ("ab", i) in msgs] + [msgs[("ba", i)] / model_time(d["grad"], Lb, rb)
                                               for i in range(n) if ("ba", i) in msgs]
            stalls, stall_extra = 0, []
            for dd, Ld, rd, Sd in (("ab", La, ra, d["act"]), ("ba", Lb, rb, d["grad"])):
                prev_arr = None
                for i in range(n):
                    m = [x for x in d["messages"] if x["dir"] == dd and x["id"] == i]
                    if not m:
                        continue
                    m = m[0]
                    if prev_arr is not None and m["enqueue"] >= prev_arr:
                        if msg_time(m) > model_time(Sd, Ld, rd) + 0.15 + 0.36 * 2 * Ld:
                            stalls += 1
                            stall_extra.append(msg_time(m) - model_time(Sd, Ld, rd))
                    prev_arr = m["arrive"]
            rows.append(dict(base, dir="both", size=d["act"], cls="pipeline", T=1 / meas, stalls=stalls,
                             stall_extra=float(np.median(stall_extra)) if stall_extra else float("nan"),
                             model=1 / mod, L=La, r=ra, rtt=2 * La, cwnd=0,
                             sps_meas=meas, sps_model=mod, sps_compute=steady_rate(sim0),
                             msg_ratio_median=float(np.median(ratios)),
                             msg_ratio_p90=float(np.percentile(ratios, 90)),
                             inflight=d["inflight"], fa=d["fa"], fb=d["fb"],
                             pp=dict(n=n, k=d["inflight"], fa=d["fa"], ba=d["ba"], fb=d["fb"],
                                     act=d["act"], grad=d["grad"], La=La, ra=ra, Lb=Lb, rb=rb)))
    for r in rows:
        r["ratio"] = r["T"] / r["model"]

    lines = []
    P = lines.append
    P("# TCP effects against the flow model: summary\n")
    P(f"Results: `{OUT}`; {len(cells)} cells. Host load (1-min load average at each cell's start): "
      f"median {np.median(loads):.2f}, max {max(loads):.2f} on {os.cpu_count()} CPUs.")
    late = [x for x in lates if x[1] > 1000]
    P(f"Delay-line lateness p99 (max of the 4 lines): median {np.median([x[1] for x in lates]):.0f} us; "
      f"cells still over 1 ms after their repeat: {', '.join(f'{n} ({v:.0f} us)' for n, v, _ in late) or 'none'}; "
      f"repeated: {sum(1 for x in lates if x[2] == 2)}.\n")
    settings = os.path.join(OUT, "settings.json")
    if os.path.exists(settings):
        s = json.load(open(settings))["node"]
        P("Node namespaces' TCP: " + ", ".join(f"{k} = {v}" for k, v in s.items()) + "\n")

    def table(sel, title, cands=(), group_by_size=True):
        P(f"## {title}\n")
        hdr = "| RTT ms | rate Mbit/s | buffer | MB | n | measured s | model s | measured/model |"
        sep = "|---:|---|---|---:|---:|---:|---:|---:|"
        for cn, _ in cands:
            hdr += f" {cn} err |"
            sep += "---:|"
        hdr += " cwnd at start | retrans | drops | delay-line p99 ms |"
        sep += "---:|---:|---:|---:|"
        P(hdr)
        P(sep)
        groups = {}
        for r in sel:
            key = (r["rtt_ms"], r["rate"], r["leaf"], r["size"])
            groups.setdefault(key, []).append(r)

        def rate_key(x):
            return float(x.split("/")[0])
        # where a cell was run again (a repeat, or retry_ cells) and some of its runs kept time
        # (delay-line p99 <= 1 ms), only those count
        for key, g in list(groups.items()):
            ok = [r for r in g if (r["dl_p99_us"] or 0) <= 1000]
            if ok and len(ok) < len(g):
                groups[key] = ok
        errs = {cn: [] for cn, _ in cands}
        errs_out = {cn: [] for cn, _ in cands}
        for key in sorted(groups, key=lambda k: (k[0], rate_key(k[1]), k[2], k[3])):
            g = groups[key]
            T = np.median([r["T"] for r in g])
            M = np.median([r["model"] for r in g])
            line = (f"| {key[0]} | {key[1]} | {key[2]} | {key[3] / 1e6:g} | {len(g)} | {T:.3f} | {M:.3f} |"
                    f" {T / M:.3f} |")
            for cn, f in cands:
                pred = np.median([f(r) for r in g])
                e = pred / T - 1
                errs[cn].append(abs(e))
                if key[0] <= 50:
                    errs_out[cn].append(abs(e))
                line += f" {pct(e)} |"
            line += (f" {int(np.median([r['cwnd'] for r in g]))} | {max(r['retrans'] for r in g)} |"
                     f" {max(r['drops'] for r in g)} | {max(r['dl_p99_us'] or 0 for r in g) / 1000:.1f}"
                     f"{' (late)' if max(r['dl_p99_us'] or 0 for r in g) > 1000 else ''} |")
            P(line)
        P("")
        for cn in errs:
            if errs[cn]:
                P(f"- {cn}: |error| median {100 * np.median(errs[cn]):.1f}%, max {100 * max(errs[cn]):.1f}% "
                  f"over {len(errs[cn])} rows (model alone: median "
                  f"{100 * np.median([abs(np.median([r['model'] for r in groups[k]]) / np.median([r['T'] for r in groups[k]]) - 1) for k in groups]):.1f}%)"
                  + (f"; RTT <= 50 ms rows (out of sample): median {100 * np.median(errs_out[cn]):.1f}%, "
                     f"max {100 * max(errs_out[cn]):.1f}%" if errs_out[cn] else ""))
        P("")
        return groups

    host_cc = rows[0]["cc"] if rows else "bbr"
    settings = os.path.join(OUT, "settings.json")
    if os.path.exists(settings):
        host_cc = json.load(open(settings))["node"]["tcp_congestion_control"]
    all_rows = rows
    for cc in sorted({r["cc"] for r in all_rows}, key=lambda c: c != host_cc):
        rows = [r for r in all_rows if r["cc"] == cc]
        P(f"# Congestion control: {cc}{' (this host default)' if cc == host_cc else ' (cross-check; not the host default)'}\n")
        section(rows, table, P, refit=(cc == host_cc))
    rows = all_rows
    text = "\n".join(lines)
    open(os.path.join(OUT, "summary.md"), "w").write(text + "\n")
    json.dump(rows, open(os.path.join(OUT, "summary.json"), "w"), indent=1, default=float)
    print(text)
    return 0


PROBE_EVERY, PROBE_S = 10.0, 0.2  # BBR's min_rtt window and PROBE_RTT's minimum length


def sim_pipeline_cand(p, probe=False):
    """The pipeline with the candidate message times: a connection's first message as fresh,
    the others warm; a message starts no earlier than the end of the one before on its
    connection. probe: BBR's PROBE_RTT, every 10 s of a connection (from its first send), stalls
    the message in flight by 0.2 s + RTT; when the connection is idle at that moment the probe is
    skipped (BBR's idle restart) and the next one is due 10 s after the next send."""
    out = {}
    for d, L, r in (("ab", p["La"], p["ra"]), ("ba", p["Lb"], p["rb"])):
        out[d] = (L, r)
    state = {"ab": None, "ba": None}
    next_probe = {"ab": PROBE_EVERY, "ba": PROBE_EVERY}

    def arrive(d, S, t_send):
        L, r = out[d]
        rtt = 2 * L
        prev = state[d]
        T = cand_fresh(S, L, r, rtt) if prev is None else cand_warm(S, L, r, rtt)
        a = t_send + T
        if prev is not None:
            a = max(a, prev + (S + HDR) / cap_rate(r, rtt))
        start = max(t_send, prev if prev is not None else t_send)
        if probe and next_probe[d] <= a:
            if next_probe[d] >= start:
                a += PROBE_S + rtt
                next_probe[d] = a + PROBE_EVERY
            else:
                next_probe[d] = start + rtt + PROBE_EVERY
        state[d] = a
        return a
    n, k = p["n"], p["k"]
    tb, grads, ta, nxt, inflight, done, gi = 0.0, [], 0.0, 0, 0, [], 0
    while len(done) < n:
        if gi < len(grads) and grads[gi] <= ta:
            ta += p["ba"]
            done.append(ta)
            gi += 1
            inflight -= 1
        elif inflight < k and nxt < n:
            ta += p["fa"]
            tb = max(tb, arrive("ab", p["act"], ta)) + p["fb"]
            grads.append(arrive("ba", p["grad"], tb))
            nxt += 1
            inflight += 1
        else:
            ta = max(ta, grads[gi])
    return done


def section(rows, table, P, refit=True):
    if not refit:
        P(f"W and c as fitted for the host default: W = {PARAMS['W'] / 1e6:.2f} MB, c = {PARAMS['c']:.3f} RTT.\n")
    ws, cs = fit(rows) if refit else ([], [])
    if refit:
      P(f"Fitted on one-way messages after idle at RTT 100 and 250 ms only: effective window W = "
      f"{PARAMS['W'] / 1e6:.2f} MB (from {len(ws)} messages, range "
      f"{(min(ws) if ws else 0) / 1e6:.2f}-{(max(ws) if ws else 0) / 1e6:.2f}); warm floor c = {PARAMS['c']:.3f} RTT "
      f"(from {len(cs)} messages, range {min(cs) if cs else 0:.3f}-{max(cs) if cs else 0:.3f}). "
      "Errors below: candidate / measured - 1; the RTT 10 and 50 ms rows are out of sample.\n")
    win = lambda r: cand_window(r["size"], r["L"], r["r"], r["rtt"])
    cap = lambda r: cand_cap(r["size"], r["L"], r["r"], r["rtt"])
    warm = lambda r: cand_warm(r["size"], r["L"], r["r"], r["rtt"])
    fresh = lambda r: cand_fresh(r["size"], r["L"], r["r"], r["rtt"])
    ssw = lambda r: cand_slowstart(r["size"], r["L"], r["r"], r["rtt"], wmax=PARAMS["W"])
    rnd = lambda r: cand_rounds(r["size"], r["L"], r["r"], r["rtt"])
    ack = lambda r: cand_ack(r["size"], r["L"], r["r"])

    def ackw(r):
        return r["L"] + max((r["size"] + HDR) / min(F * r["r"] * (1 - 66 / (2 * 1514)), PARAMS["W"] / r["rtt"]),
                            PARAMS["c"] * r["rtt"])

    long_rows = [r for r in rows if r["cell"].startswith("long_")]
    rows = [r for r in rows if not r["cell"].startswith("long_")]
    dflt = [r for r in rows if r["leaf"] == "default"]
    idle = [r for r in dflt if r["cls"] in ("gap0.1", "gap1")]
    g_idle01 = table([r for r in dflt if r["cls"] == "gap0.1"],
                     "Warm connection, 0.1 s idle before each message (below the RTO), default buffer",
                     [("cap 4 MiB/RTT", win), ("cap W/RTT", cap), ("warm: cap + floor", warm)])
    g_idle = table([r for r in dflt if r["cls"] == "gap1"],
                   "(1) Warm connection, 1 s idle before each message (above the RTO: slow start after idle applies)",
                   [("cap W/RTT", cap), ("warm: cap + floor", warm), ("restart = fresh formula", fresh),
                    ("restart: slow start sim + cap", ssw),
                    ("restart halved per RTO, from BDP", lambda r: cand_restart(r["size"], r["L"], r["r"], r["rtt"], 1.0)),
                    ("restart halved per RTO, from measured cwnd",
                     lambda r: cand_restart(r["size"], r["L"], r["r"], r["rtt"], 1.0, r["cwnd"] * MSS))])
    g_warmup = table([r for r in dflt if r["cls"] == "gap0"],
                     "(2) The 2nd and 3rd messages, each sent as the one before arrives (window still growing)",
                     [("warm: cap + floor", warm), ("fresh formula", fresh)])
    g_fresh = table([r for r in dflt if r["cls"] == "fresh"],
                    "(2) First message on a fresh connection",
                    [("slow start sim (4 MiB cap)", lambda r: cand_slowstart(r["size"], r["L"], r["r"], r["rtt"], wmax=GAMMA)),
                     ("log2 rounds, no cap", rnd), ("fresh: warm + log2 rounds", fresh)])
    g_ex = table([r for r in dflt if r["cls"] == "ex_steady"],
                 "(3) Exchange: both ends send at once (rounds 2-5), default buffer (pfifo 1000 packets)",
                 [("warm: cap + floor", warm), ("ACK bytes", ack), ("ACK bytes + cap + floor", ackw)])
    g_exf = table([r for r in dflt if r["cls"] == "ex_fresh"], "(3) Exchange, first round (fresh connections)",
                  [("fresh: warm + log2 rounds", fresh)])
    g_bufow = table([r for r in rows if r["leaf"] != "default" and r["pattern"] == "oneway" and r["cls"] != "fresh"],
                    "(4) Buffers, one direction, warm messages (gap 0 and 1 s pooled)",
                    [("warm: cap + floor", warm)])
    table([r for r in rows if r["leaf"] != "default" and r["pattern"] == "oneway" and r["cls"] == "fresh"],
          "(4) Buffers, one direction, first message", [("fresh: warm + log2 rounds", fresh)])
    same = {(r["rtt_ms"], r["rate"]) for r in rows if r["leaf"] != "default"}
    g_bufex = table([r for r in rows if r["cls"] == "ex_steady" and (r["rtt_ms"], r["rate"]) in same],
                    "(4) Buffers, exchange, rounds 2-5 (default = htb's pfifo, 1000 packets)",
                    [("warm: cap + floor", warm), ("ACK bytes + cap + floor", ackw)])

    P("## Pipelines: steady micro-batches/s (second half of the run), measured against the flow model and the candidate\n")
    P("| cell | RTT ms | rate | buffer | in flight | compute-only /s | model /s | candidate /s | candidate + PROBE_RTT /s | measured /s | model error | candidate error | + PROBE_RTT error | msg time/model median (p90) | stalls > 0.15 s |")
    P("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    pp_err = {"model": [], "cand": [], "probe": []}
    for r in sorted((r for r in rows if r["cls"] == "pipeline"), key=lambda r: r["cell"]):
        cand = steady_rate(sim_pipeline_cand(r["pp"]))
        candp = steady_rate(sim_pipeline_cand(r["pp"], probe=True))
        em, ec, ep = r["sps_model"] / r["sps_meas"] - 1, cand / r["sps_meas"] - 1, candp / r["sps_meas"] - 1
        pp_err["model"].append(abs(em))
        pp_err["cand"].append(abs(ec))
        pp_err["probe"].append(abs(ep))
        P(f"| {r['cell']} | {r['rtt_ms']} | {r['rate']} | {r['leaf']} | {r['inflight']} | {r['sps_compute']:.2f} |"
          f" {r['sps_model']:.2f} | {cand:.2f} | {candp:.2f} | {r['sps_meas']:.2f} | {pct(em)} | {pct(ec)} | {pct(ep)} |"
          f" {r['msg_ratio_median']:.3f} ({r['msg_ratio_p90']:.3f}) | {r['stalls']} |")
    if pp_err["model"]:
        P(f"\n- |error| median: model {100 * np.median(pp_err['model']):.1f}%, candidate {100 * np.median(pp_err['cand']):.1f}%, "
          f"candidate + PROBE_RTT {100 * np.median(pp_err['probe']):.1f}%; max: model {100 * max(pp_err['model']):.1f}%, "
          f"candidate {100 * max(pp_err['cand']):.1f}%, + PROBE_RTT {100 * max(pp_err['probe']):.1f}%")
        P("- stalls: messages (after each connection's first) that took over 0.15 s more than the warm candidate "
          "and did not wait behind an earlier message on their connection")
    P("")

    if long_rows:
        P("## Long runs (45-60 s): BBR's PROBE_RTT every 10 s\n")
        P("Each connection's BBR drops its window to 4 packets for at least 0.2 s and a round trip every "
          "10 s (when its min_rtt has not fallen for 10 s, always so behind a fixed delay). A message in "
          "flight then stalls. Candidate: each busy connection loses (0.2 s + RTT) per 10 s; for a "
          "pipeline, the event simulation above with probes.\n")
        P("| cell | RTT ms | rate | measured /s | model /s | model error | candidate /s | candidate error | stalls > 0.15 s | stall extra s (median) |")
        P("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in long_rows:
            if r["cls"] == "pipeline":
                candp = steady_rate(sim_pipeline_cand(r["pp"], probe=True))
                P(f"| {r['cell']} (micro-batches) | {r['rtt_ms']} | {r['rate']} | {r['sps_meas']:.3f} | {r['sps_model']:.3f} |"
                  f" {pct(r['sps_model'] / r['sps_meas'] - 1)} | {candp:.3f} | {pct(candp / r['sps_meas'] - 1)} | {r['stalls']} | "
                  f"{r.get('stall_extra', float('nan')):.3f} |")
        ex = [r for r in long_rows if r["cls"] == "ex_steady"]
        if ex:
            r0 = ex[0]
            T = np.array([r["T"] for r in ex])
            M = r0["model"]
            extra = T - M
            st = extra[extra > 0.15]
            meas = 1 / T.mean()
            mod = 1 / M
            # both connections busy all the time: each stalls (0.2 + RTT) per 10 s
            cand = mod * (1 - 2 * (PROBE_S + r0["rtt"]) / PROBE_EVERY)
            P(f"| {r0['cell']} (rounds) | {r0['rtt_ms']} | {r0['rate']} | {meas:.3f} | {mod:.3f} | {pct(mod / meas - 1)} |"
              f" {cand:.3f} | {pct(cand / meas - 1)} | {len(st)} of {len(T)} messages | "
              f"{(np.median(st) if len(st) else float('nan')):.3f} |")
        P("")

    # --- the decision: which effects move a communication-bound round by > 5%
    P("## Decision: effects over 5% (a communication-bound round's rate changes by model/measured - 1)\n")

    def flagged(groups, what):
        out = []
        for k, g in groups.items():
            T = np.median([r["T"] for r in g])
            M = np.median([r["model"] for r in g])
            x = M / T - 1  # change of a round's rate if every message took T instead of M
            if abs(x) > FLAG:
                late = max(r["dl_p99_us"] or 0 for r in g) > 1000
                out.append((k, x, late))
        out.sort(key=lambda z: (z[0][0], float(z[0][1].split('/')[0]), z[0][3]))
        if out:
            P(f"- **{what}**: {len(out)} of {len(groups)} cells over 5%: " + "; ".join(
                f"RTT {k[0]} ms, {k[1]} Mbit/s, {k[2] + ', ' if k[2] != 'default' else ''}{k[3] / 1e6:g} MB: "
                f"{pct(x)}{' (delay line late)' if late else ''}" for k, x, late in out))
        else:
            P(f"- **{what}**: none of {len(groups)} cells over 5%.")
    flagged(g_idle01, "warm connection, 0.1 s idle (window cap; small-message floor)")
    flagged(g_idle, "(1) warm connection after 1 s idle (slow start after idle)")
    flagged(g_warmup, "(2) 2nd-3rd message of a connection (window still growing)")
    flagged(g_fresh, "(2) first message on a fresh connection (slow start)")
    flagged(g_ex, "(3) two-way exchange, steady rounds")
    flagged(g_exf, "(3) two-way exchange, first round")
    flagged(g_bufow, "(4) non-default buffers, one direction")
    flagged(g_bufex, "(4) buffers (all, incl. default), exchange")
    P("")


if __name__ == "__main__":
    sys.exit(main())
