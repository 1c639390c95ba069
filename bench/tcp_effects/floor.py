#!/usr/bin/python3
"""The warm floor with several messages in flight (run.sh's `floor` grid): each pipeline cell's
measured steady micro-batches/s against three message-time models in the same event simulation
(analyze.py's pipeline):

  flow     the project's tcp model: L + S / min(0.962 r, W / RTT), a connection's messages in turn
  lone     the lone-message floor of analyze.py: L + max(S / rate, 0.357 RTT) per message
  former   the warm floor before STARTUP's rounds were modeled: a connection paces each busy
           period at g x its largest delivery-rate sample of the last 10 round trips (g = 2.885,
           bbr_high_gain), a sample being a busy period's bytes B over RTT + x, x the time its
           bytes took to leave; a busy period runs from a message handed to an idle connection
           until every message handed over has arrived; the first busy period unheld.
  pacing   core/network/tcp_pacing.h: STARTUP by rounds (class Pacing below): slow start on a
           fresh connection, the pace x g per round trip within a busy period, a sample the
           larger of B / (RTT + x) and the last full round's rate, a pacing rate that never falls.
  Both: a connection whose busy period took more than 4 RTT at its link rate has filled its path
  (BBR leaves STARTUP and paces at the link's rate): no floor from then on.

    /usr/bin/python3 bench/tcp_effects/floor.py [/tmp/tcpfx-floor]
"""
import math
import sys

import numpy as np

ARGS = list(sys.argv)
sys.argv = sys.argv[:1] + sys.argv[1:2]
import analyze as A  # noqa: E402  (reads OUT from argv)

G = 2.885  # bbr_high_gain
IW = 10 * 1448  # Linux's initial window
C_LONE = 0.357
WINDOW = float(ARGS[2]) if len(ARGS) > 2 else 10


class Conn:
    def __init__(self, L, r, window_cap=True):
        self.L, self.r = L, A.F * r
        rtt = 2 * L
        if window_cap:
            self.r = min(self.r, A.GAMMA_W / rtt)
        self.rtt = rtt
        self.last = None  # last arrival on the connection

    def flow(self, S, t):
        start = t + self.L if self.last is None else max(t + self.L, self.last)
        return start + (S + A.HDR) / self.r


class Flow(Conn):
    def arrive(self, S, t):
        self.last = self.flow(S, t)
        return self.last


class Lone(Conn):
    def arrive(self, S, t):
        a = max(self.flow(S, t), t + self.L + C_LONE * self.rtt)
        self.last = a
        return a


class Former(Conn):
    """The warm floor before STARTUP's rounds were modeled (at 4b14fab): a busy period at
    g x the largest sample of the last WINDOW round trips (by wall time), held for its whole
    length; the first busy period unheld."""

    def __init__(self, *a):
        super().__init__(*a)
        self.pace = math.inf  # bytes/s
        self.paced_until = -1e18  # when the bytes handed over so far have left at the pacing rate
        self.busy_start = None
        self.busy_bytes = 0
        self.full = False

    def arrive(self, S, t):
        if self.busy_start is not None and self.last is not None and t >= self.last:
            self.end_busy()
        if self.busy_start is None:
            self.busy_start, self.busy_bytes = t, 0
            self.last_round = 0
        self.busy_bytes += S + A.HDR
        leave = self.departure(max(t, self.paced_until), S + A.HDR)
        self.paced_until = leave
        a = self.flow(S, t)
        if not self.full:
            a = max(a, leave + self.L)
        self.last = a
        return a

    def departure(self, start, B):
        """When B bytes that begin to leave at `start` have left: at the pace throughout."""
        return start + B / self.pace

    def end_busy(self):
        x = self.last - self.L - self.busy_start
        if self.busy_bytes / self.r > 4 * self.rtt:
            self.full = True
        sample = self.busy_bytes / (self.rtt + x)
        end = self.last
        self.samples = [(t, v) for t, v in getattr(self, "samples", []) if t > end - WINDOW * self.rtt]
        self.samples.append((end, sample))
        self.pace = G * max(v for _, v in self.samples)
        self.busy_start = None


class Pacing(Former):
    """The warm floor as core/network/tcp_pacing.h models it: round k of a busy period sends at
    most IW x 2^k per round trip on a fresh connection (slow start), the pace x g^k after; a busy
    period's sample is the larger of B / (RTT + x) and its last full round's rate; the pace
    becomes g x the sample where that is higher (STARTUP's pacing rate never falls)."""

    def __init__(self, *a):
        super().__init__(*a)
        self.pace, self.fresh, self.last_round = 0.0, True, 0

    def round_rate(self, k):
        return IW / self.rtt * 2 ** k if self.fresh else self.pace * G ** k

    def departure(self, start, B):
        t = start
        k = max(0, math.floor((start - self.busy_start) / self.rtt))
        while True:
            rate = self.round_rate(k)
            end = self.busy_start + (k + 1) * self.rtt
            room = rate * max(0.0, end - t)
            if B <= room or rate >= self.r:
                self.last_round = max(self.last_round, k)
                return t + B / rate
            B -= room
            t = max(t, end)
            k += 1

    def end_busy(self):
        x = self.last - self.L - self.busy_start
        if self.busy_bytes / self.r > 4 * self.rtt:
            self.full = True
        sample = self.busy_bytes / (self.rtt + x)
        if self.last_round >= 1:
            sample = max(sample, self.round_rate(self.last_round - 1))
        self.pace = max(self.pace, G * sample)
        self.fresh = False
        self.busy_start = None


def pipeline(p, model):
    ab = model(p["La"], p["ra"])
    ba = model(p["Lb"], p["rb"])
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
            tb = max(tb, ab.arrive(p["act"], ta)) + p["fb"]
            grads.append(ba.arrive(p["grad"], tb))
            nxt += 1
            inflight += 1
        else:
            ta = max(ta, grads[gi])
    return done


def main():
    A.GAMMA_W = 2.79e6
    cells = A.load()
    print("| cell | measured mb/s | flow | lone floor | former pacing | pacing | dl p99 us |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    errs = {"flow": [], "lone": [], "former": [], "pacing": []}
    for name, c in sorted(cells.items()):
        d = c["data"]
        if d["pattern"] != "pipeline":
            continue
        La, ra, _ = A.route(c, "ab")
        Lb, rb, _ = A.route(c, "ba")
        p = dict(n=d["microbatches"], k=d["inflight"], fa=d["fa"], ba=d["ba"], fb=d["fb"],
                 act=d["act"], grad=d["grad"], La=La, ra=ra, Lb=Lb, rb=rb)
        meas = A.steady_rate([t / 1e9 for t in d["done"]])
        row = [name, f"{meas:.2f}"]
        for key, m in (("flow", Flow), ("lone", Lone), ("former", Former), ("pacing", Pacing)):
            v = A.steady_rate(pipeline(p, m))
            errs[key].append(abs(math.log(v / meas)))
            row.append(f"{v:.2f} ({100 * (v / meas - 1):+.1f}%)")
        row.append(str(c["dl_p99_max_us"]))
        print("| " + " | ".join(row) + " |")
    report(errs)


def report(errs):
    """Each model's median and worst error over the cells, from |log(model / measured)|."""
    for k, e in errs.items():
        if e:
            print(f"{k}: median error {100 * (math.exp(np.median(e)) - 1):.1f}%, "
                  f"worst {100 * (math.exp(max(e)) - 1):.1f}%")


if __name__ == "__main__":
    main()
