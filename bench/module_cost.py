#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""module_cost.py [SIZES...]: Redis's own CPU per check decided by the
Functions (FCALL) and by the module (ratelimitd.check), with the
daemon's exact framing (src/backend/redis/redis_node.c: one request
alone, or argv[1] "B" and a batch), on one Redis, with no daemon in the
way: the decision's cost alone. bench/run.sh's `redis` and `rlmod`
targets measure both paths through the daemon (its parsing, batching and
connection included); this says what is left of a check's Redis CPU
once they are taken away.

Starts a private redis-server (loopback TCP, as the pair's and the
daemon's calls, on a free port; temp dir) with MODULE
(default ./ratelimitd.so) loaded and the Function library of
$LOCAL_DRIVER --print-library (default tests/unit/local_driver), then
per size (default 32, redis.batch's default, and 1) and per round (RUNS,
default 3): after a FLUSHALL each, both paths in rotated order send
REQUESTS (default 32000) fixed_window checks on 100 000 spread keys,
every one made by that path before the round (bench/batch_redis_cpu.py's
run: rounds of DEPTH, default 64, requests written at once; `clock:
redis`). Prints one tab-separated row per size
and path: the median over rounds of Redis's main thread CPU (INFO cpu)
per check, of the time inside the command (INFO commandstats), and
every round's CPU figure. Bounded: every read has a timeout.
"""
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

from batch_redis_cpu import Conn, median, resp, run, stop_redis

# Never reached by the keys' counts; within the module's limit x window
# bound (2^53 µs), which batch_redis_cpu.py's limit of 10^9 is not.
POLICY = "0 fixed_window 1000000 3600000000 0 0"


KEYS = 100000


def preload(c, head):
    """Every key the round draws from, made through head's path first, as
    bench/run.sh's pair target loads its keys before it measures: the
    rounds then update keys that exist, a limiter's steady state, and no
    path pays for growing the keyspace."""
    for first in range(0, KEYS, 32 * 64):
        cmds = []
        for b in range(first, min(first + 32 * 64, KEYS), 32):
            keys = ["rl:{b:%d}:t" % i for i in range(b, min(b + 32, KEYS))]
            n = len(keys)
            cmds.append(resp(head + [n] + keys + ["B", n] + ["1", "4"] * n
                             + ["", "0", "1", POLICY] * n))
        c.s.sendall(b"".join(cmds))
        for _ in cmds:
            c.reply()


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [32, 1]
    total = int(os.environ.get("REQUESTS", "32000"))
    depth = int(os.environ.get("DEPTH", "64"))
    runs = int(os.environ.get("RUNS", "3"))
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    driver = os.environ.get("LOCAL_DRIVER", os.path.join(top, "tests", "unit", "local_driver"))
    module = os.path.abspath(os.environ.get("MODULE", os.path.join(top, "ratelimitd.so")))
    lib = subprocess.run([driver, "--print-library"], stdout=subprocess.PIPE, check=True).stdout
    d = tempfile.mkdtemp()
    with socket.socket() as s:  # a free port, as the pair's redis-server has
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                              "--dir", d, "--save", "", "--appendonly", "no",
                              "--loadmodule", module], stdout=subprocess.DEVNULL)
    try:
        c = None
        for _ in range(200):
            if redis.poll() is not None:
                sys.exit("module_cost.py: redis-server exited")
            try:
                c = Conn(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.05)
        if c is None:
            sys.exit("module_cost.py: redis-server did not listen")
        fn = c.command("FUNCTION", "LOAD", "REPLACE", lib)
        paths = [("functions", ["FCALL", fn], "cmdstat_fcall"),
                 ("module", ["ratelimitd.check"], "cmdstat_ratelimitd.check")]
        rng = random.Random(1)
        print("batch\tpath\tredis_us\tin_command_us\trounds_us")
        for size in sizes:
            if size > depth:
                continue
            res = [[] for _ in paths]
            for r in range(runs):
                for j in range(len(paths)):
                    i = (r + j) % len(paths)
                    c.command("FLUSHALL")
                    preload(c, paths[i][1])
                    res[i].append(run(c, None, size, depth, total, rng, paths[i][1],
                                      paths[i][2], POLICY))
            for i, p in enumerate(paths):
                print("%d\t%s\t%.3f\t%.3f\t%s" % (size, p[0], median([x[0] for x in res[i]]),
                                                  median([x[1] for x in res[i]]),
                                                  ",".join("%.3f" % x[0] for x in res[i])))
            sys.stdout.flush()
    finally:
        stop_redis(redis, d)


if __name__ == "__main__":
    main()
