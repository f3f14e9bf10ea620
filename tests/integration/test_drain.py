# SPDX-License-Identifier: Apache-2.0
"""test_drain.py: the drain's backstop, the worker's rule for every front
(worker.c): after SIGTERM the loop ends once idle, or at redis.timeout +
WORKER_DRAIN_MAX_S (5 s) at the latest. A client that pipelines requests
and never reads its answers keeps the HTTP front from ever being idle, with
idle_timeout and request_timeout at an hour: the daemon still exits 0, and
not before the backstop (the connection really held the drain).

Needs no Redis (backend: memory, so redis.timeout is its default)."""
import os
import select
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

POLICY = "policies:\n  p: {tiers: [{name: t, algorithm: fixed_window, limit: 5, window: 1h}]}\n"
NO_REDIS = "redis://127.0.0.1:1/0"  # never used: backend: memory
BACKSTOP_S = 5  # WORKER_DRAIN_MAX_S; redis.timeout's default (50 ms) rounds down to 0 s
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def stuck_client(port):
    """A connection whose answers back up: requests are sent, nothing is
    read, until the daemon stops reading too (send would block). Returns
    the socket and whether that point was reached within 64 MiB."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    chunk = REQUEST * 256
    sent = 0
    while sent < 64 << 20:
        try:
            sent += s.send(chunk)
        except BlockingIOError:
            # Full for a moment may be the daemon still reading; full for
            # two seconds, the daemon has stopped reading. (A slower daemon
            # only has more of the bytes queued behind it to back up on.)
            if not select.select([], [s], [], 2)[1]:
                return s, True
    return s, False


def main():
    d = Daemon(NO_REDIS, POLICY,
               extra="backend: memory\nidle_timeout: 1h\nrequest_timeout: 1h\n").start()
    s, backed_up = stuck_client(d.port)
    harness.ok(backed_up, "a client that never reads backs its answers up")
    start = time.monotonic()
    d.send_signal(signal.SIGTERM)
    try:
        rc = d.proc.wait(60)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        rc = d.proc.wait()
        harness.diag("no exit within 60 s; the log:\n" + d.logs())
        rc = None
    took = time.monotonic() - start
    s.close()
    harness.eq(rc, 0, "the daemon exits 0 at the drain's backstop (%.1f s)" % took)
    harness.ok(took >= BACKSTOP_S - 0.5,
               "not before the backstop: the connection held the drain (%.1f s)" % took)


harness.run(main)
