# SPDX-License-Identifier: Apache-2.0
"""test_memory.py: `backend: memory` behind the whole HTTP API, with no
Redis at all: ready at once, exact limits for every algorithm under
concurrent clients, atomic multi-check requests, dry runs, headers,
metrics counted as decisions (not as local fallbacks), and no Redis
warnings in the log."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import ALGORITHMS, Daemon, hammer  # noqa: E402

LIMIT = 100
POLICY = "policies:\n" + "".join(
    "  %s: {tiers: [{name: t, algorithm: %s, limit: %d, window: 1h%s}]}\n"
    % (a, a, LIMIT, extra) for a, extra in ALGORITHMS.items()) + """\
  five: {tiers: [{name: m, algorithm: fixed_window, limit: 5, window: 1h}]}
  one: {tiers: [{name: m, algorithm: fixed_window, limit: 1, window: 1h}]}
"""
# Nothing listens on port 1: a daemon that tried Redis would log about it.
NO_REDIS = "redis://127.0.0.1:1/0"


def main(extra=""):
    d = Daemon(NO_REDIS, POLICY, extra="backend: memory\n" + extra).start()
    ready = d.admin("/readyz")
    harness.eq((ready.status, ready.json), (200, {"status": "ready"}),
               "ready at once with no Redis")

    for i in range(5):
        r = d.check("five", "k")
        harness.eq((r.status, r.json["remaining"], r.headers.get("x-ratelimit-remaining")),
                   (200, 4 - i, str(4 - i)), "five: call %d allowed" % (i + 1))
    r = d.check("five", "k")
    harness.eq((r.status, r.json["allowed"], r.headers.get("x-ratelimit-limit")),
               (429, False, "5"), "five: the sixth is denied")
    harness.ok(int(r.headers.get("retry-after", "0")) >= 1 and r.json["retry_after_ms"] > 0,
               "a denial carries Retry-After")
    harness.ok("degraded" not in r.json and "local" not in r.json,
               "memory decisions are not marked degraded or local")

    r = d.check("five", "fresh", dry_run=True)
    harness.eq((r.status, r.json["remaining"], r.json.get("dry_run")), (200, 4, True),
               "a dry run reports what the real request would")
    r = d.check("five", "fresh")
    harness.eq(r.json["remaining"], 4, "the dry run consumed nothing")

    d.check("one", "m")
    r = d.check(checks=[{"policy": "five", "key": "multi"}, {"policy": "one", "key": "m"}])
    harness.eq(r.status, 429, "a request with one exhausted check is denied")
    r = d.check("five", "multi")
    harness.eq(r.json["remaining"], 4, "the denied request consumed nothing on its other check")

    for alg in ALGORITHMS:
        counts = hammer(d, alg)
        harness.eq((counts[200], counts["other"]), (LIMIT, 0),
                   "%s: exactly %d of 300 concurrent checks admitted" % (alg, LIMIT))

    m = promtext.parse(d.admin("/metrics").body.decode())
    v = lambda name, **l: promtext.value(m, name, **l)
    harness.eq((v("ratelimitd_checks_total", policy="fixed_window", decision="allowed"),
                v("ratelimitd_checks_total", policy="fixed_window", decision="denied"),
                v("ratelimitd_checks_total", policy="fixed_window", decision="local")),
               (LIMIT, 300 - LIMIT, 0), "metrics count decisions, not local fallbacks")
    harness.eq(d.stop(), 0, "exits 0")
    logs = d.logs()
    harness.ok("redis connect" not in logs and "redis connection" not in logs
               and "redis deadline" not in logs, "no Redis warnings in the log")
    harness.ok("backend=memory" in logs, "the start line names the memory backend")


harness.run(main)
