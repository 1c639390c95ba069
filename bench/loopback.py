#!/usr/bin/env python3
"""This host's loopback, as a real run without network emulation has it between its ranks.

Prints `MBPS LATENCY_MS`: the throughput of one TCP connection on 127.0.0.1 (64 MiB sent in
chunks of 4 MiB, the median of 5 sends) in 1e6 bit/s, and half the median round trip of a
64-byte message (2,000 of them) in ms. bench/compute_model.sh gives them to the simulated
devices' links, so that the simulation's stages wait for their messages about as long as the
real run's do: a stage's idle waits decide what the compute model's cooling and wake-up terms
charge (core/compute/profile.h).
"""
import socket
import statistics
import threading
import time

CHUNK = 4 << 20
TOTAL = 64 << 20
TIMEOUT_S = 30  # a loopback that stalls this long ends the measurement with an error, not a hang


def receive(sock, into):
    """Fills `into` (a memoryview) from `sock`; an error if the other end closes first."""
    got = 0
    while got < len(into):
        n = sock.recv_into(into[got:])
        if n == 0:
            raise ConnectionError("loopback: the other end closed the connection")
        got += n


def serve(listener, rounds):
    conn, _ = listener.accept()
    conn.settimeout(TIMEOUT_S)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = memoryview(bytearray(CHUNK))
    for _ in range(rounds):  # bulk: read TOTAL bytes, answer one byte
        for _ in range(TOTAL // CHUNK):
            receive(conn, buf)
        conn.sendall(b"k")
    msg = memoryview(bytearray(64))
    while True:  # ping-pong, until the client closes
        n = conn.recv_into(msg)
        if n == 0:
            break
        conn.sendall(msg[:n])
    conn.close()


def main():
    rounds = 5
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    thread = threading.Thread(target=serve, args=(listener, rounds), daemon=True)
    thread.start()
    client = socket.create_connection(listener.getsockname(), timeout=TIMEOUT_S)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunk = bytes(CHUNK)
    bulk = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(TOTAL // CHUNK):
            client.sendall(chunk)
        receive(client, memoryview(bytearray(1)))
        bulk.append(time.perf_counter() - start)
    trips = []
    msg = bytes(64)
    echo = memoryview(bytearray(64))
    for _ in range(2000):
        start = time.perf_counter()
        client.sendall(msg)
        receive(client, echo)
        trips.append(time.perf_counter() - start)
    client.close()
    thread.join()
    mbps = TOTAL * 8 / statistics.median(bulk) / 1e6
    print(f"{mbps:.0f} {statistics.median(trips) / 2 * 1e3:.4f}")


if __name__ == "__main__":
    main()
