# SPDX-License-Identifier: Apache-2.0
"""test_functions.py: the decision code as a Redis Function (FCALL) and, on
a server without the FUNCTION command, as a script (EVALSHA); flushing the
code under load (FUNCTION FLUSH, SCRIPT FLUSH) never shows callers an
error: every answer is a decision, none degraded."""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

POLICY = """policies:
  api: {tiers: [{name: t, algorithm: token_bucket, limit: 1000000, window: 1s}]}
"""


def flush_under_load(d, redis, flush, what):
    bad = []
    stop = threading.Event()

    def client(i):
        conn = d.connection()
        n = 0
        while not stop.is_set() and n < 2000:
            conn.request("POST", "/check", body='{"policy":"api","key":"k%d"}' % i)
            r = conn.getresponse()
            body = r.read()
            if r.status != 200 or b"degraded" in body:
                bad.append((r.status, body[:200]))
            n += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    harness.flush_repeatedly(redis.client(), flush)
    stop.set()
    for t in threads:
        t.join(30)
    harness.eq(bad[:3], [], "%s: 20 flushes 50 ms apart under load, every answer a decision" % what)


def main():
    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="2s").start()
    c = redis.client()
    libs = c.command("FUNCTION", "LIST")
    harness.ok(any("ratelimitd_" in str(x) for x in libs), "the library is loaded (FUNCTION LIST)")
    harness.eq(d.check("api", "a").status, 200, "decided through FCALL")
    flush_under_load(d, redis, ("FUNCTION", "FLUSH"), "FCALL")
    harness.eq(d.stop(), 0, "exits 0")
    redis.stop()

    # No FUNCTION command: the same code by EVALSHA.
    old = harness.RedisServer(extra_args=("--rename-command", "FUNCTION", "")).start()
    d = Daemon("unix:" + old.socket_path, POLICY, timeout="2s").start()
    harness.ok("redis has no Functions, using EVALSHA" in d.logs(), "falls back to EVALSHA")
    harness.eq(d.check("api", "a").status, 200, "decided through EVALSHA")
    flush_under_load(d, old, ("SCRIPT", "FLUSH"), "EVALSHA")
    harness.eq(d.stop(), 0, "exits 0")


harness.run(main)
