#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/instructions.py: instructions the daemon executes per POST /check,
counted by valgrind's callgrind, for one or more ratelimitd binaries.

    bench/instructions.py ./ratelimitd /path/to/older/ratelimitd

Wall-clock figures on this shared 2-core box move by 10-20 % from one run to
the next; instruction counts do not (same binary, same inputs: the same
count), so this is how two builds of the hot path are compared. Each binary
runs twice under callgrind against its own redis-server (unix socket, temp
dir): SMALL then LARGE checks of a fixed_window policy, each with a new key
(the "spread" case of bench/run.sh). The difference of the two totals
divided by LARGE - SMALL is the cost of one check, without startup and
shutdown. Prints one line per binary and the ratio to the first. Needs
valgrind and redis-server.

Environment:

    BACKEND=memory   the same checks decided by `backend: memory` (no Redis)
    FRONT=auth       GET /auth/api with the key in X-Key (bench/run.sh's `mem`
                     target's request) instead of POST /check
    ALGORITHM=NAME   the policy's algorithm (default fixed_window; the `mem`
                     target uses token_bucket)
    KEYS=hot         one key for every check, limit 100: all but the first
                     100 are denied (the `hot` rows: the deny cache's path)
    KEYSPACE=N       keys user:0 .. user:N-1 in turn instead of a new key each
                     time: past the first N checks every key exists, as in
                     bench/run.sh's spread rows once its warmup has run
    CONNS=64         the checks over 64 keep-alive connections at once, one
                     request in flight on each (as wrk -c64 sends them), so
                     that the daemon's batches form (redis.batch); default 1:
                     one connection, one check after the other (batches of 1)
    BATCH=N          redis.batch: N (default: the daemon's own default)
    KEEP=DIR         keeps each run's callgrind output in DIR (for
                     callgrind_annotate --tree=caller, kcachegrind)
    SYMBOLS=N        also the N functions with the most instructions of their
                     own per check (callgrind_annotate of both runs, the
                     difference per function divided as above)

With CONNS > 1 the line also gives the mean requests per Redis call
(ratelimitd_redis_batch_size over the run). The daemon under callgrind is
far slower than the client, so the batches it sees are near full and the
counts move by about 1 % from run to run (with CONNS=1: a few instructions).
"""
import asyncio
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SMALL, LARGE = 500, 2500
CONNS = int(os.environ.get("CONNS", "1"))
SYMBOLS = int(os.environ.get("SYMBOLS", "0"))
if CONNS > 1:
    SMALL, LARGE = 1000, 5000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, what, tries=600):
    for _ in range(tries):
        if pred():
            return
        time.sleep(0.1)
    sys.exit("instructions.py: %s did not happen within %d s" % (what, tries // 10))


def ready(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/readyz")
        return c.getresponse().status == 200
    except OSError:
        return False


FRONT = os.environ.get("FRONT", "check")
HOT = os.environ.get("KEYS", "spread") == "hot"
ALGORITHM = os.environ.get("ALGORITHM", "fixed_window")
KEYSPACE = int(os.environ.get("KEYSPACE", "0"))


def limit():
    """Never reached on spread keys; the buckets refuse 10^9 per 60 s (not
    exact in 2^53 microseconds), so they get 10^6."""
    if HOT:
        return 100
    return 1000000000 if ALGORITHM == "fixed_window" else 1000000


def request(i):
    key = "user:hot" if HOT else "user:%d" % (i % KEYSPACE if KEYSPACE else i)
    if FRONT == "auth":
        return b"GET /auth/api HTTP/1.1\r\nHost: bench\r\nX-Key: %s\r\n\r\n" % key.encode()
    body = json.dumps({"policy": "api", "key": key}).encode()
    return (b"POST /check HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


async def one_conn(port, todo):
    """Sends the checks of todo one after the other on one connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in todo:
            writer.write(request(i))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
            status = int(head.split(b" ", 2)[1])
            m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            body = await reader.readexactly(int(m.group(1)) if m else 0)
            if status != 200 and not (HOT and status == 429):
                sys.exit("instructions.py: check %d answered %d %r" % (i, status, body))
    finally:
        writer.close()


async def drive(port, checks):
    await asyncio.gather(*(one_conn(port, range(c, checks, CONNS)) for c in range(CONNS)))


def batch_mean(port):
    """Requests per Redis call over the daemon's life, from /metrics."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    tot = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        m = re.match(r"ratelimitd_redis_batch_size_(sum|count)(\{[^}]*\})? (\S+)", line)
        if m:
            tot[m.group(1)] += float(m.group(3))
    return tot["sum"] / tot["count"] if tot["count"] else 0.0


def self_costs(out):
    """Per function, the instructions of its own (callgrind_annotate)."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no",
                           "--show-percs=no", out], capture_output=True, text=True).stdout
    costs = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\(.*?\)\s+)?(\S.*)$", line)
        if m and ":" in m.group(2) and not m.group(2).startswith("PROGRAM TOTALS"):
            name = re.sub(r"^.*?:", "", m.group(2), count=1)
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def run(binary, checks):
    """callgrind's total (and self costs, and batch mean) for a daemon that
    answered `checks` checks."""
    d = tempfile.mkdtemp(prefix="rl-instr-")
    sock = os.path.join(d, "redis.sock")
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock,
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    daemon = None
    try:
        wait_for(lambda: os.path.exists(sock), "redis-server's socket")
        port = free_port()
        cfg = os.path.join(d, "rl.yaml")
        with open(cfg, "w") as f:
            backend = os.environ.get("BACKEND", "redis")
            batch = os.environ.get("BATCH")
            # backend: memory refuses a redis: section it would not use.
            redis_line = ("" if backend == "memory"
                          else "redis: {url: \"unix:%s\", timeout: 5s%s}\n"
                          % (sock, ", batch: %s" % batch if batch else ""))
            f.write("listen: 127.0.0.1:%d\n%sbackend: %s\nlog_level: warn\n"
                    "policies:\n  api:\n%s    tiers: [{name: t, algorithm: %s, "
                    "limit: %d, window: 60s}]\n"
                    % (port, redis_line, backend,
                       "    key: \"${header:X-Key}\"\n" if FRONT == "auth" else "",
                       ALGORITHM, limit()))
        out = os.path.join(d, "callgrind.out")
        daemon = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                   binary, "-c", cfg],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: ready(port), "the daemon's /readyz 200")
        asyncio.run(drive(port, checks))
        mean = batch_mean(port) if CONNS > 1 and backend != "memory" else 0.0
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
        total = None
        with open(out) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    total = int(line.split()[1])
        if total is None:
            sys.exit("instructions.py: no total in callgrind's output")
        if os.environ.get("KEEP"):
            shutil.copy(out, os.path.join(os.environ["KEEP"], "callgrind.%s.%d.out"
                                          % (os.path.basename(binary), checks)))
        return total, (self_costs(out) if SYMBOLS else {}), mean
    finally:
        if daemon and daemon.poll() is None:
            daemon.kill()
        redis.terminate()
        redis.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    first = None
    for binary in sys.argv[1:]:
        big, small = run(binary, LARGE), run(binary, SMALL)
        n = LARGE - SMALL
        per = (big[0] - small[0]) / n
        first = first or per
        extra = "  %.1f requests per Redis call" % big[2] if big[2] else ""
        print("%-40s %8.0f instructions per check  %.3fx%s" % (binary, per, per / first, extra))
        if SYMBOLS:
            diff = {k: (v - small[1].get(k, 0)) / n for k, v in big[1].items()}
            for name, v in sorted(diff.items(), key=lambda kv: -kv[1])[:SYMBOLS]:
                print("    %8.0f  %s" % (v, name))


if __name__ == "__main__":
    main()
