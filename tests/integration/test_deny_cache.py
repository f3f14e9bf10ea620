# SPDX-License-Identifier: Apache-2.0
"""test_deny_cache.py: the deny cache never denies what Redis would allow.
Three daemons with the cache share one Redis. For every algorithm, a key is
exhausted, more calls are denied (from the caches: their hit counter grows,
and each answer has the shape Redis gives: fewer remaining than the cost, Retry-After), then
once the denial's own retry time has passed the next call must be allowed
by whichever daemon gets it: a cache holding a denial too long fails here.
A call of a smaller cost than the cached denial goes to Redis (and is
allowed when Redis allows it); a dry run never comes from the cache."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import Daemon  # noqa: E402

ALGORITHMS = {
    "fixed_window": "limit: 3, window: 1s",
    "sliding_window_log": "limit: 3, window: 1s",
    "sliding_window_counter": "limit: 3, window: 1s",
    "sliding_window_buckets": "limit: 3, window: 1s, precision: 100ms",
    "token_bucket": "limit: 3, window: 1s",
    "gcra": "limit: 3, window: 1s",
    "leaky_bucket": "limit: 3, window: 1s, burst: 2",
}
# hourly: a bucket that cannot refill while the last test counts on it.
POLICY = "policies:\n" + "".join(
    "  %s: {tiers: [{name: t, algorithm: %s, %s}]}\n" % (a, a, args)
    for a, args in ALGORITHMS.items()) + \
    "  hourly: {tiers: [{name: t, algorithm: token_bucket, limit: 3, window: 1h}]}\n"


def hits(daemons):
    total = 0
    for d in daemons:
        m = promtext.parse(d.admin("/metrics").body.decode())
        total += promtext.value(m, "ratelimitd_deny_cache_hits_total")
    return total


def exhaust(daemons, alg, key, cost):
    """Exhausts key until a denial with 150 ms or more to wait; returns it
    and the monotonic time it came, or (None, None) within 40 calls."""
    for i in range(40):
        r = daemons[i % 3].check(alg, key, cost=cost)
        if r.status != 429:
            continue
        # Too close to the end of its wait, the calls that follow could
        # legitimately be allowed: wait it out and exhaust the key again.
        if r.json["retry_after_ms"] < 150:
            time.sleep(r.json["retry_after_ms"] / 1000.0 + 0.02)
            continue
        return r, time.monotonic()
    return None, None


def cycle(daemons, alg, key, n):
    """Exhausts key, checks cached denials, waits out the retry time and
    returns whether the next call was allowed. An allowed call that came
    after the denial's own retry time (a slow box) proves nothing either
    way: the cycle starts again, 3 times at most."""
    cost = 2 if n % 2 else 1
    for attempt in range(3):
        denial, at = exhaust(daemons, alg, key, cost)
        if denial is None:
            harness.ok(False, "%s: a denial with 150 ms or more to wait within 40 calls" % alg)
            return
        before = hits(daemons)
        late = None
        for d in daemons:
            for _ in range(2):
                r = d.check(alg, key, cost=cost)
                if r.status == 429 and r.json["remaining"] < cost and "retry-after" in r.headers:
                    continue
                waited_ms = (time.monotonic() - at) * 1000.0
                if r.status == 200 and waited_ms >= denial.json["retry_after_ms"] - 20:
                    late = waited_ms
                    break
                harness.ok(False, "%s: a denial right after a denial (%.0f ms after it): %r"
                           % (alg, waited_ms, r))
                return
            if late is not None:
                break
        if late is None:
            break
        harness.diag("%s cycle %d: allowed %.0f ms after a denial that said %d ms: again"
                     % (alg, n, late, denial.json["retry_after_ms"]))
    else:
        harness.ok(False, "%s cycle %d: 3 attempts, each slower than the retry time" % (alg, n))
        return
    harness.ok(hits(daemons) > before, "%s cycle %d: later denials came from the caches"
               % (alg, n))
    time.sleep(denial.json["retry_after_ms"] / 1000.0 + 0.02)
    r = daemons[n % 3].check(alg, key, cost=cost)
    harness.eq(r.status, 200, "%s cycle %d: allowed once the denial's retry time has passed "
               "(retry_after_ms %d)" % (alg, n, denial.json["retry_after_ms"]))


def main():
    redis = harness.RedisServer().start()
    daemons = [Daemon("unix:" + redis.socket_path, POLICY, timeout="2s", admin=True).start()
               for _ in range(3)]
    for alg in ALGORITHMS:
        for n in range(3):
            cycle(daemons, alg, "k%d" % n, n)
    # A cost-2 denial does not deny a cost-1 call that Redis allows.
    d = daemons[0]
    got = [d.check("hourly", "small", cost=2).status for _ in range(2)]
    harness.eq(got, [200, 429], "3 tokens: cost 2 allowed, then denied")
    r = d.check("hourly", "small", cost=1)
    harness.eq(r.status, 200, "a smaller cost than the cached denial is asked of Redis")
    r = d.check("hourly", "small", cost=1, dry_run=True)
    harness.eq((r.status, r.json.get("dry_run")), (429, True), "dry runs are decided by Redis")
    for d in daemons:
        harness.eq(d.stop(), 0, "daemon exits 0")


harness.run(main)
