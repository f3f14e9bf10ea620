#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/overrides.py: Redis's CPU per check with 100 000 run-time overrides
stored (PUT /v1/overrides/) against none: the daemon holds the overrides
in memory and puts the limit in force in the call's arguments, so Redis
should do the same work either way (the target: within 5 %).

Starts a private redis-server (unix socket, temp dir) and ./ratelimitd
(RL_BIN=/path: another) with one fixed_window policy whose limit is never
reached. Runs CHECKS (default 20000) POST /check on one keep-alive
connection, each on a new key, ROUNDS times (default 2) for each side, in
turns: "none" on keys no override names, then "overridden" on keys each of
which has a run-time override (raising the limit). Before the overridden
rounds, OVERRIDES (default 100000) overrides are written straight into the
hash (HSET, pipelined) and the daemon's subscriber connection is cut
(CLIENT KILL TYPE pubsub): it re-reads them all on reconnecting, and the
run waits until ratelimitd_overrides says they are all in force. Redis's
CPU per check is read from INFO commandstats (the microseconds spent inside
commands: EVALSHA/FCALL, whichever the daemon uses) and INFO cpu (the main
thread's user + sys) before and after each round. Prints each round and the
medians, and the ratio overridden / none; and the daemon's RSS before and
after the overrides were loaded.

Usage: bench/overrides.py [CHECKS [OVERRIDES [ROUNDS]]]
"""
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("RL_BIN", "./ratelimitd")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A minimal RESP client on a unix socket (replies parsed, bounded)."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(30)
        self.s.connect(path)
        self.f = self.s.makefile("rb")

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def reply(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b"-"):
            return rest.decode()
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode()
        if t == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError("bad reply %r" % line)

    def command(self, *args):
        self.s.sendall(self.encode(args))
        return self.reply()

    def pipeline(self, commands, depth=1000):
        for i in range(0, len(commands), depth):
            chunk = commands[i:i + depth]
            self.s.sendall(b"".join(self.encode(c) for c in chunk))
            for _ in chunk:
                self.reply()


def redis_cpu(r):
    """(µs inside commands, main thread user+sys seconds)."""
    stats = r.command("INFO", "commandstats")
    usec = sum(int(m) for m in re.findall(r"usec=(\d+)", stats))
    cpu = r.command("INFO", "cpu")
    fields = dict(line.split(":", 1) for line in cpu.splitlines() if ":" in line)
    main = sum(float(fields.get(k, fields.get(k.replace("_main_thread", ""), 0)))
               for k in ("used_cpu_user_main_thread", "used_cpu_sys_main_thread"))
    return usec, main


def checks(port, prefix, n):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(n):
        c.request("POST", "/check", json.dumps({"policy": "api", "key": "%s%d" % (prefix, i)}))
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError("check answered %d" % r.status)
    c.close()


def gauge(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(r'^ratelimitd_overrides\{policy="api"\} (\d+)', text, re.M)
    return int(m.group(1)) if m else -1


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def store_overrides(r, port, prefixes, per_prefix):
    commands = []
    for p in prefixes:
        for i in range(per_prefix):
            key = "%s%d" % (p, i)
            o = {"policy": "api", "key": key, "tiers": {"t": {"limit": 2000000000}},
                 "expires_at": None, "note": "bench", "updated_at": "2026-01-01T00:00:00.000000Z",
                 "by": "bench"}
            commands.append(("HSET", "rl:{overrides}", "api:" + key, json.dumps(o)))
    r.pipeline(commands)
    r.command("CLIENT", "KILL", "TYPE", "pubsub")
    want = len(commands)
    deadline = time.monotonic() + 60
    while gauge(port) != want:
        if time.monotonic() > deadline:
            raise RuntimeError("the daemon did not re-read the overrides (%d)" % gauge(port))
        time.sleep(0.05)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    total = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    tmp = tempfile.mkdtemp(prefix="rl-bench-ovr-")
    sock = os.path.join(tmp, "redis.sock")
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--save", "",
                              "--appendonly", "no", "--dir", tmp],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = free_port()
    conf = os.path.join(tmp, "c.yaml")
    with open(conf, "w") as f:
        f.write("listen: 127.0.0.1:%d\nadmin_on_listen: true\nredis:\n  url: unix:%s\n"
                "  timeout: 2s\n  key_prefix: \"rl:\"\npolicies:\n  api: {tiers: [{name: t, "
                "algorithm: fixed_window, limit: 1000000000, window: 1h}]}\n" % (port, sock))
    daemon = None
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.02)
        with open(os.path.join(tmp, "log"), "wb") as out:
            daemon = subprocess.Popen([BIN, "--config", conf], stdout=out, stderr=out)
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the daemon is not ready")
            time.sleep(0.05)
        r = Redis(sock)
        per = -(-total // rounds)
        rss0 = rss_kib(daemon.pid)
        store_overrides(r, port, ["ov%d:" % k for k in range(rounds)], per)
        rss1 = rss_kib(daemon.pid)
        print("overrides stored and in force: %d; %d checks per round, each on a new key"
              % (gauge(port), n))
        print("daemon RSS: %d KiB before, %d KiB with them (%.0f bytes per override)"
              % (rss0, rss1, (rss1 - rss0) * 1024.0 / max(1, gauge(port))))
        result = {"none": [], "overridden": []}
        for k in range(rounds):
            for side, prefix in (("none", "plain%d:" % k), ("overridden", "ov%d:" % k)):
                u0, c0 = redis_cpu(r)
                t0 = time.monotonic()
                checks(port, prefix, min(n, per) if side == "overridden" else n)
                dt = time.monotonic() - t0
                u1, c1 = redis_cpu(r)
                m = min(n, per) if side == "overridden" else n
                result[side].append(((u1 - u0) / m, (c1 - c0) * 1e6 / m))
                print("round %d %-10s: %.2f us/check in commands, %.2f us/check main thread "
                      "CPU, %.0f checks/s" % (k, side, result[side][-1][0], result[side][-1][1],
                                              m / dt))
        med = {s: (statistics.median(v[0] for v in result[s]),
                   statistics.median(v[1] for v in result[s])) for s in result}
        for s in result:
            print("median %-10s: %.2f us/check in commands, %.2f us/check main thread CPU"
                  % (s, med[s][0], med[s][1]))
        print("overridden / none: commands %.3f, main thread CPU %.3f"
              % (med["overridden"][0] / med["none"][0], med["overridden"][1] / med["none"][1]))
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait(10)
        redis.terminate()
        redis.wait(10)


if __name__ == "__main__":
    main()
