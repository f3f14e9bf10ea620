#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/state_file.py: what `state_file:` costs the requests of a daemon
holding KEYS keys (`backend: memory`), written every second.

Starts ./ratelimitd (RL_BIN=/path: another) twice on a free loopback port
in a temp dir, with and without state_file (state_interval: 1s, log_level
debug), fills the store with KEYS entries (requests of 64 checks of a
16-tier policy), then sends dry-run checks on one keep-alive connection
for SECONDS and prints their latency (p50, p99, p99.9, max); for the run
with state_file, the writes' `locked_us` (the store's lock held for the
snapshot: what a decision may wait) and `us` (the whole write, off the
request path), min / median / max, from the debug log.

Usage: bench/state_file.py [KEYS [SECONDS]]   (defaults 100000 and 8)
"""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("RL_BIN", "./ratelimitd")
TIERS = 16
CHECKS = 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tmp, keys, seconds, with_state):
    port = free_port()
    tiers = ", ".join("{name: t%d, algorithm: fixed_window, limit: 9, window: 1h}" % i
                      for i in range(TIERS))
    conf = os.path.join(tmp, "c.yaml")
    with open(conf, "w") as f:
        f.write("listen: 127.0.0.1:%d\nbackend: memory\nlog_level: debug\n"
                "local_max_keys: %d\nmax_body: 65536\n" % (port, keys + CHECKS * TIERS))
        if with_state:
            f.write("state_file: %s/state\nstate_interval: 1s\n" % tmp)
        f.write("policies:\n  wide: {deny_cache: false, tiers: [%s]}\n" % tiers)
    log = os.path.join(tmp, "log-%d" % with_state)
    with open(log, "wb") as out:
        proc = subprocess.Popen([BIN, "--config", conf], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", "/healthz")
                c.getresponse().read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        for r in range((keys + CHECKS * TIERS - 1) // (CHECKS * TIERS)):
            body = json.dumps({"checks": [{"policy": "wide", "key": "user-%05d-%02d" % (r, i)}
                                          for i in range(CHECKS)]})
            c.request("POST", "/check", body)
            c.getresponse().read()
        body = json.dumps({"policy": "wide", "key": "user-00000-00", "dry_run": True})
        lat = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.monotonic()
            c.request("POST", "/check", body)
            c.getresponse().read()
            lat.append(time.monotonic() - t)
    finally:
        proc.terminate()
        proc.wait(80)
    lat.sort()
    n = len(lat)
    print("%-7s state_file: %d checks, p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms, max %.2f ms"
          % ("with" if with_state else "without", n, lat[n // 2] * 1e3, lat[int(n * .99)] * 1e3,
             lat[int(n * .999)] * 1e3, lat[-1] * 1e3))
    if with_state:
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        writes = re.findall(r'"state file written".* keys=(\d+) us=(\d+) locked_us=(\d+) at=interval',
                            text)
        for name, col in (("locked_us", 2), ("us", 1)):
            v = sorted(int(w[col]) for w in writes)
            if v:
                print("  %d writes of %s keys: %-9s min %d, median %d, max %d"
                      % (len(v), writes[0][0], name, v[0], v[len(v) // 2], v[-1]))


def main():
    keys = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 8
    with open("/proc/loadavg") as f:
        print("load average: %s" % " ".join(f.read().split()[:3]))
    with tempfile.TemporaryDirectory(prefix="rl-bench-state-") as tmp:
        run(tmp, keys, seconds, True)
        run(tmp, keys, seconds, False)


if __name__ == "__main__":
    main()
