#!/usr/bin/python3
"""One connection carrying messages of different sizes (run.sh's `mixed` grid: 1 MB, ten 1 kB
messages 50 ms apart, then 1 MB): each cell's last message, from its hand-over to its arrival,
measured against three models of the same connection, each given the measured hand-over times:

  flow     the project's tcp model: L + S / min(0.962 r, W / RTT)
  former   floor.py's former warm floor: the pace held for a whole busy period, from the samples
           of the last 10 round trips: the 1 MB message leaves at 2.885 x the small ones' samples
  pacing   core/network/tcp_pacing.h (floor.py's Pacing): STARTUP by rounds, a pace that never
           falls, slow start on the fresh connection

    /usr/bin/python3 bench/tcp_effects/mixed.py [/tmp/tcpfx-mixed]
"""
import math

import floor as P  # reads OUT from argv (analyze.py)

A = P.A


def main():
    A.GAMMA_W = 2.79e6
    cells = A.load()
    print("| cell | RTT ms | rate Mbit/s | message | measured s | flow | former | pacing | dl p99 us |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    errs = {"flow": [], "former": [], "pacing": []}
    for name, c in sorted(cells.items()):
        d = c["data"]
        if not name.startswith("mixed") or d["pattern"] != "oneway":
            continue
        L, r, _ = A.route(c, "ab")
        msgs = sorted((m for m in d["messages"] if m["dir"] == "ab"), key=lambda m: m["id"])
        got = {}
        for key, model in (("flow", P.Flow), ("former", P.Former), ("pacing", P.Pacing)):
            conn = model(L, r)
            got[key] = [conn.arrive(m["bytes"], m["enqueue"] / 1e9) - m["enqueue"] / 1e9
                        for m in msgs]
        for i, what in ((0, "first 1 MB (fresh)"), (len(msgs) - 1, "last 1 MB")):
            meas = (msgs[i]["arrive"] - msgs[i]["enqueue"]) / 1e9
            row = [name, f"{2000 * L:.0f}", f"{8 * r / 1e6:.0f}", what, f"{meas:.3f}"]
            for key in errs:
                v = got[key][i]
                errs[key].append(abs(math.log(v / meas)))
                row.append(f"{v:.3f} ({100 * (v / meas - 1):+.0f}%)")
            row.append(str(c["dl_p99_max_us"]))
            print("| " + " | ".join(row) + " |")
    P.report(errs)


if __name__ == "__main__":
    main()
