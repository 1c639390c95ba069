#!/usr/bin/env python3
"""What a stray process on this machine gets from a running `ravnest real`.

Starts a real run of a 3-node scenario with its rendezvous store on a known port, then, while the
ranks train, plays the attacker of issue 15 against the store:
  1. c10d TCPStore's 17-byte request that made TCPStore allocate 1 GiB;
  2. a well-formed handshake with a made-up proof (a process without the run's secret);
  3. a connection that says nothing (it must be dropped, not kept forever);
  4. a frame announcing 2^30 bytes.
It records what each gets back, checks with `ss` which address the store listens on, and checks
that the run still finishes (exit 0) with the launcher having printed one refusal per attack.
Writes JSON (--out) and prints it. A benchmark-style demonstration, not a test (tests/test_auth_store.cc
and tests/test_gloo_transport.cc hold the assertions).

Usage: bench/attacks.py [--port 29631] [--out FILE]
"""
import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAVNEST = os.path.join(ROOT, "build", "ravnest")

# The 3-node scenario of peer_loss.py, shorter, with its store on a known port (--set below).
from peer_loss import SCENARIO  # noqa: E402  (bench/ is this script's folder)


def attack(port, payload, wait_s=12.0):
    """Sends `payload` (or nothing) and returns what comes back before the store closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait_s)
    t0 = time.monotonic()
    got = b""
    try:
        if payload:
            s.sendall(payload)
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        got += b"<still open>"
    except ConnectionResetError:
        pass  # closed with bytes unread: the answer came before
    finally:
        s.close()
    # Skip the store's hello frame (4-byte length + "RVS1" + nonce), keep the answer's text.
    text = got[4 + 20:] if got[4:8] == b"RVS1" else got
    return {"answer": text[6:].decode("latin-1") if text[4:6] == b"NO" else text.decode("latin-1"),
            "closed_after_s": round(time.monotonic() - t0, 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=29631)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "attacks.json"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="rv-attacks-")
    try:
        with open(os.path.join(work, "s.toml"), "w") as f:
            f.write(SCENARIO.format(timeout=20))
        err = open(os.path.join(work, "err.txt"), "w")
        overrides = ["--set", "name=attacks", "--set", "training.steps=3000", "--set", f"real.master_port={a.port}"]
        p = subprocess.Popen([RAVNEST, "real", "s.toml", "--progress", "off"] + overrides, cwd=work,
                             stdout=subprocess.DEVNULL, stderr=err)
        for _ in range(300):  # until the store listens
            try:
                socket.create_connection(("127.0.0.1", a.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        listening = subprocess.run(["ss", "-ltn", f"sport = :{a.port}"], capture_output=True, text=True).stdout
        results = {
            "listens_on": [l.split()[3] for l in listening.splitlines()[1:] if l.strip()],
            "tcpstore_1gib_request": attack(a.port, bytes([0, 0, 0, 0, 0x40, 0, 0, 0, 0]) + b"key" + bytes(5)),
            "made_up_proof": attack(a.port, struct.pack(">I", 52) + b"RVC1" + b"n" * 16 + b"p" * 32),
            "silent_connection": attack(a.port, b""),
            "frame_of_2^30_bytes": attack(a.port, struct.pack(">I", 1 << 30)),
        }
        status = p.wait(timeout=600)
        err.close()
        with open(os.path.join(work, "err.txt")) as f:
            lines = f.read().splitlines()
        results["run_exit_status"] = status
        results["launcher_refusal_lines"] = [l for l in lines if "refused a connection" in l]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
