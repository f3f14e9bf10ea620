# SPDX-License-Identifier: Apache-2.0
"""test_concurrency.py: three daemons, one Redis, many concurrent clients on
one key: for every algorithm, never more admissions than the algorithm
allows (for the window algorithms with a 1 h window: exactly the limit)."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

LIMIT = 100
POLICY = """policies:
  fixed_window: {tiers: [{name: t, algorithm: fixed_window, limit: 100, window: 1h}]}
  sliding_window_log: {tiers: [{name: t, algorithm: sliding_window_log, limit: 100, window: 1h}]}
  sliding_window_counter: {tiers: [{name: t, algorithm: sliding_window_counter, limit: 100, window: 1h}]}
  sliding_window_buckets: {tiers: [{name: t, algorithm: sliding_window_buckets, limit: 100, window: 1h, precision: 1m}]}
  token_bucket: {tiers: [{name: t, algorithm: token_bucket, limit: 100, window: 1h}]}
  gcra: {tiers: [{name: t, algorithm: gcra, limit: 100, window: 1h}]}
  leaky_bucket: {tiers: [{name: t, algorithm: leaky_bucket, limit: 100, window: 1h, burst: 99}]}
"""
CLIENTS = 200
PER_CLIENT = 3


def hammer(daemons, policy):
    """CLIENTS threads, each sending PER_CLIENT checks round-robin over the
    daemons; returns (allowed, denied, other)."""
    counts = {"allowed": 0, "denied": 0, "other": 0}
    lock = threading.Lock()
    start = threading.Event()

    def client(i):
        start.wait()
        for j in range(PER_CLIENT):
            d = daemons[(i + j) % len(daemons)]
            try:
                res = d.check(policy, "hot")
                kind = {200: "allowed", 429: "denied"}.get(res.status, "other")
                if res.json and res.json.get("degraded"):
                    kind = "other"
            except OSError:
                kind = "other"
            with lock:
                counts[kind] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    start.set()
    for t in threads:
        t.join(60)
    return counts, time.monotonic() - t0


def main():
    redis = harness.RedisServer().start()
    daemons = [Daemon("unix:" + redis.socket_path, POLICY, timeout="2s").start() for _ in range(3)]
    for policy in ("fixed_window", "sliding_window_log", "sliding_window_counter",
                   "sliding_window_buckets", "token_bucket", "gcra", "leaky_bucket"):
        counts, took = hammer(daemons, policy)
        # The bucket algorithms refill at LIMIT per hour while the test runs.
        refill = int(took * LIMIT / 3600) + 1 if policy in ("token_bucket", "gcra",
                                                            "leaky_bucket") else 0
        harness.eq(counts["other"], 0, "%s: every request decided" % policy)
        harness.ok(LIMIT <= counts["allowed"] <= LIMIT + refill,
                   "%s: %d of %d admitted by 3 daemons, %d clients (limit %d, refill %d)"
                   % (policy, counts["allowed"], CLIENTS * PER_CLIENT, CLIENTS, LIMIT, refill))
    for d in daemons:
        harness.eq(d.stop(), 0, "daemon exits 0")


harness.run(main)
