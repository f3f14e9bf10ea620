#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_report.py: POST /report, usage charged after the answer.

1. The decision code, in both its forms (the EVAL script the daemon carries,
   by EVALSHA; the Function library, by FCALL), called directly in report
   mode (ARGV[2] "3") at chosen timestamps, for every algorithm: a
   report past the limit makes the next check wait exactly the debt out
   (the retry time it answers, to the µs: denied 1 µs before, allowed at
   it); refunds give back exactly and never below nothing used; a refund
   an algorithm cannot give back exactly is refused before anything of the
   request is written.
2. The daemon, with Redis and with `backend: memory`: a report past the
   limit answers 200 with the figures that now apply and the next /check is
   denied with the same Retry-After; a refund restores; a multi-check
   report is atomic (refused whole); a refund drops this daemon's cached
   denial; ratelimitd_reports_total counts.
   The same on a Redis Cluster, where a report's checks in several slots
   are charged in one phase (each slot atomically).
3. Redis stopped: failure_mode open answers 200 `reported: false`, closed
   503 with Retry-After, local charges the memory store (later local
   checks see the debt).
(The memory store and the script agree report for report in
test_local_diff.py.)
"""
import json
import math
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
import redis_cluster  # noqa: E402
from daemon import ClusterDaemon, Daemon  # noqa: E402

SEC = 1_000_000
W = 10 * SEC
T0 = 1_700_000_000_000_000  # a multiple of W
# name -> (policy settings for the script, limit reported, retry after a
# report of 25 at T0 on a fresh key, refunds?)
ALGS = {
    "fixed_window": ("fixed_window 10 %d 0 0" % W, 10, W, True),
    "sliding_window_log": ("sliding_window_log 10 %d 0 0" % W, 10, W, False),
    # next window: 25 * (W - e) <= 9 * W from e = W - 9W/25
    "sliding_window_counter": ("sliding_window_counter 10 %d 0 0" % W, 10, 2 * W - 9 * W // 25,
                               False),
    "sliding_window_buckets": ("sliding_window_buckets 10 %d 0 %d" % (W, SEC), 10, W, False),
    # 25 taken from 10: 15 in debt, one more token: 16 tokens at 1/s
    "token_bucket": ("token_bucket 10 %d 0 0" % W, 10, 16 * SEC, True),
    "gcra": ("gcra 10 %d 0 0" % W, 10, 16 * SEC, True),
    # capacity 5 (burst 4 + 1): 25 short, fits at 4 short: 21 s
    "leaky_bucket": ("leaky_bucket 10 %d 4 0" % W, 5, 21 * SEC, True),
}


class Script:
    def __init__(self, r, sha, function=None):
        self.r, self.sha, self.function = r, sha, function

    def call(self, mode, now, checks):
        """checks: [(alg, key, cost)]; returns the reply or raises RedisError."""
        keys, argv = [], [str(now), mode]
        for alg, key, cost in checks:
            keys.append("rep:{%s:%s}:t" % (alg, key))
            if alg == "sliding_window_log":
                keys.append("rep:{%s:%s}:t:seq" % (alg, key))
            argv += [str(cost), "0 " + ALGS[alg][0]]
        if self.function:
            return self.r.command("FCALL", self.function, len(keys), *keys, *argv)
        return self.r.command("EVALSHA", self.sha, len(keys), *keys, *argv)

    def tier(self, mode, now, alg, key, cost):
        reply = self.call(mode, now, [(alg, key, cost)])
        return dict(zip(("allowed", "limit", "remaining", "reset_us", "retry_us", "delay_us",
                         "reason"), reply[2:9]))


def script_tests(exe, driver):
    script = subprocess.run([exe, "--print-script"], stdout=subprocess.PIPE, check=True).stdout
    library = subprocess.run([driver, "--print-library"], stdout=subprocess.PIPE,
                             check=True).stdout
    server = harness.RedisServer().start()
    r = server.client()
    function = r.command("FUNCTION", "LOAD", "REPLACE", library)
    for caller in ("evalsha", "fcall"):
        r.command("FLUSHDB")
        script_run(r, Script(r, r.command("SCRIPT", "LOAD", script),
                             function if caller == "fcall" else None), caller)
    server.stop()


def script_run(r, s, caller):
    for alg, (_, limit, retry, refunds) in ALGS.items():
        t = s.tier("3", T0, alg, "debt", 25)
        harness.eq((t["allowed"], t["limit"], t["remaining"], t["retry_us"]),
                   (0, limit, 0, retry),
                   "%s %s: a report of 25 over %d answers retry %d us" % (caller, alg, limit, retry))
        before = s.tier("1", T0 + retry - 1, alg, "debt", 1)
        at = s.tier("0", T0 + retry, alg, "debt", 1)
        harness.eq((before["allowed"], before["retry_us"], at["allowed"]), (0, 1, 1),
                   "%s %s: the debt is paid off exactly at its retry time" % (caller, alg))

        # A report with cost 0 charges nothing and reports a unit's figures.
        t = s.tier("3", T0, alg, "zero", 0)
        harness.eq((t["allowed"], t["remaining"], t["reset_us"]), (1, limit, 0),
                   "%s %s: a report of 0 writes nothing" % (caller, alg))
        harness.eq(r.command("EXISTS", "rep:{%s:zero}:t" % alg), 0,
                   "%s %s: no key for a report of 0" % (caller, alg))

        if refunds:
            s.tier("0", T0, alg, "refund", 3)
            t = s.tier("3", T0 + 5, alg, "refund", -3)
            harness.eq((t["remaining"], t["reset_us"]), (limit, 0),
                       "%s %s: a refund of the whole cost restores a fresh key" % (caller, alg))
            s.tier("0", T0, alg, "partial", 3)
            t = s.tier("3", T0, alg, "partial", -1)
            harness.eq(t["remaining"], limit - 2, "%s %s: a partial refund gives back 1" % (caller, alg))
            t = s.tier("3", T0, alg, "never", -50)
            harness.eq((t["remaining"], t["reset_us"]), (limit, 0),
                       "%s %s: a refund never goes below nothing used" % (caller, alg))
            s.tier("3", T0, alg, "over", 25)
            t = s.tier("3", T0, alg, "over", -25)
            harness.eq((t["allowed"], t["remaining"]), (1, limit),
                       "%s %s: a refund pays a debt back" % (caller, alg))
        else:
            try:
                s.call("3", T0, [("fixed_window", "atomic", 2), (alg, "atomic", -1)])
                harness.ok(False, "%s %s: a refund is refused" % (caller, alg))
            except harness.RedisError as e:
                harness.ok("cannot give back" in e.message, "%s %s: a refund is refused (%s)"
                           % (caller, alg, e.message[:60]))
            harness.eq(r.command("EXISTS", "rep:{fixed_window:atomic}:t"), 0,
                       "%s %s: the refused report wrote nothing of its other check" % (caller, alg))
    # The figures of a multi-check report: every check charged in one call.
    reply = s.call("3", T0, [("gcra", "m1", 4), ("fixed_window", "m2", 12)])
    harness.eq((reply[1], reply[2 + 2], reply[9 + 2]), (0, 6, 0),
               "%s: a report of two checks charges both in one call" % caller)


POLICY = """\
policies:
  fixed_window: {tiers: [{name: t, algorithm: fixed_window, limit: 10, window: 1h}]}
  sliding_window_log: {tiers: [{name: t, algorithm: sliding_window_log, limit: 10, window: 100s}]}
  sliding_window_counter: {tiers: [{name: t, algorithm: sliding_window_counter, limit: 10, window: 1h}]}
  sliding_window_buckets: {tiers: [{name: t, algorithm: sliding_window_buckets, limit: 10, window: 100s, precision: 1s}]}
  token_bucket: {tiers: [{name: t, algorithm: token_bucket, limit: 10, window: 100s}]}
  gcra: {tiers: [{name: t, algorithm: gcra, limit: 10, window: 100s}]}
  leaky_bucket: {tiers: [{name: t, algorithm: leaky_bucket, limit: 10, window: 100s, burst: 4}]}
  open: {failure_mode: open, tiers: [{name: t, algorithm: token_bucket, limit: 10, window: 100s}]}
  closed: {failure_mode: closed, tiers: [{name: t, algorithm: token_bucket, limit: 10, window: 100s}]}
  local: {failure_mode: local, tiers: [{name: t, algorithm: token_bucket, limit: 10, window: 100s}]}
  leases: {tiers: [{name: t, algorithm: concurrency, limit: 2, lease_timeout: 30s}]}
"""
# A debt of 25 over 10 per 100 s: 16 tokens at one per 10 s (leaky: 21).
BUCKET_WAIT_MS = {"token_bucket": 160000, "gcra": 160000, "leaky_bucket": 210000}


def report(d, policy=None, key=None, cost=None, checks=None):
    body = {"checks": checks} if checks is not None else {"policy": policy, "key": key,
                                                            "cost": cost}
    return d.request("POST", "/report", json.dumps(body))


def daemon_tests(d, name):
    for alg in ("fixed_window", "sliding_window_log", "sliding_window_counter",
                "sliding_window_buckets", "token_bucket", "gcra", "leaky_bucket"):
        key = "debt-" + name
        t0 = time.monotonic()
        r = report(d, alg, key, 25)
        harness.eq((r.status, r.json["allowed"], r.json["remaining"], r.json.get("reported")),
                   (200, False, 0, True), "%s %s: a report past the limit answers 200, "
                   "nothing remaining" % (name, alg))
        wait = r.json["retry_after_ms"]
        harness.eq(r.headers.get("retry-after"), str(math.ceil(wait / 1000)),
                   "%s %s: the report's answer says when a unit passes again" % (name, alg))
        if alg in BUCKET_WAIT_MS:
            harness.ok(BUCKET_WAIT_MS[alg] - 1000 <= wait <= BUCKET_WAIT_MS[alg],
                       "%s %s: the debt takes %d ms to pay off (%d)" % (name, alg,
                                                                          BUCKET_WAIT_MS[alg], wait))
        c = d.check(alg, key)
        spent = (time.monotonic() - t0) * 1000
        harness.ok(c.status == 429 and wait - spent - 1 <= c.json["retry_after_ms"] <= wait
                   and c.headers.get("retry-after") == str(math.ceil(c.json["retry_after_ms"] / 1000)),
                   "%s %s: the next check is denied with the debt's Retry-After (%s ms, %s)"
                   % (name, alg, c.json.get("retry_after_ms"), c.headers.get("retry-after")))

    for alg in ("fixed_window", "token_bucket", "gcra", "leaky_bucket"):
        key = "refund-" + name
        d.check(alg, key, cost=4)
        r = report(d, alg, key, -4)
        # A report's figures take nothing more: a fresh key's are its limit.
        fresh = d.check(alg, "fresh-" + name, dry_run=True).json["limit"]
        harness.eq((r.status, r.json["remaining"], r.json["reset_ms"]), (200, fresh, 0),
                   "%s %s: a refund of the whole estimate restores the key" % (name, alg))
        r = report(d, alg, key, -100)
        harness.eq(r.json["remaining"], fresh, "%s %s: never below nothing used" % (name, alg))

    for alg in ("sliding_window_log", "sliding_window_counter", "sliding_window_buckets"):
        r = report(d, checks=[{"policy": "fixed_window", "key": "atomic-" + name, "cost": 3},
                              {"policy": alg, "key": "atomic-" + name, "cost": -1}])
        harness.eq((r.status, r.json["error"]), (400, "refund_not_supported"),
                   "%s %s: a refund it cannot give back exactly is refused" % (name, alg))
    c = d.check("fixed_window", "atomic-" + name, dry_run=True)
    harness.eq(c.json["remaining"], 9,
               "%s: a refused report charges none of its checks (a dry run of 1: 9 left)" % name)

    r = report(d, checks=[{"policy": "gcra", "key": "multi-" + name, "cost": 4},
                          {"policy": "fixed_window", "key": "multi-" + name, "cost": 12}])
    harness.eq((r.status, [c["allowed"] for c in r.json["checks"]], r.json["allowed"]),
               (200, [True, False], False), "%s: a report of two checks charges both" % name)

    for body, code in (('{"policy":"gcra","key":"k","cost":1,"dry_run":true}', "unknown_field"),
                       ('{"policy":"gcra","key":"k","cost":-1000000001}', "invalid_cost"),
                       ('{"policy":"gcra","key":"k","cost":1.5}', "invalid_cost"),
                       ('{"policy":"nope","key":"k"}', "unknown_policy"),
                       ('{"policy":"leases","key":"k","cost":1}', "report_not_supported")):
        r = d.request("POST", "/report", body)
        harness.eq((r.status, r.json["error"]), (400, code), "%s: %s refused" % (name, body))
    r = d.request("GET", "/report")
    harness.eq((r.status, r.headers.get("allow")), (405, "POST"), "%s: GET /report is 405" % name)

    m = promtext.parse(d.admin("/metrics").body.decode())
    harness.ok(promtext.value(m, "ratelimitd_reports_total", policy="token_bucket",
                              result="recorded") >= 3,
               "%s: ratelimitd_reports_total counts reports by policy" % name)


def deny_cache_test(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="2s", admin=True).start()
    for _ in range(11):
        c = d.check("token_bucket", "cached")
    m = promtext.parse(d.admin("/metrics").body.decode())
    before = promtext.value(m, "ratelimitd_deny_cache_hits_total")
    c = d.check("token_bucket", "cached")
    m = promtext.parse(d.admin("/metrics").body.decode())
    harness.ok(c.status == 429 and promtext.value(m, "ratelimitd_deny_cache_hits_total") > before,
               "deny cache: an exhausted key is denied from the cache")
    r = report(d, "token_bucket", "cached", -5)
    c = d.check("token_bucket", "cached")
    harness.eq((r.status, c.status), (200, 200),
               "deny cache: a refund drops this daemon's cached denial")
    d.stop()


def slow_tests(redis):
    """Redis paused (SIGSTOP): the deadline answers per failure_mode; the
    charge sent before it may still land once Redis resumes, at most once."""
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="200ms", admin=True).start()
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = report(d, "closed", "slow", 5)
        waited = time.monotonic() - t0
        harness.ok(r.status == 503 and r.json.get("reported") is False and waited < 2,
                   "Redis paused, failure_mode closed: 503 reported false at the deadline "
                   "(%.2f s)" % waited)
        r = report(d, "open", "slow", 5)
        harness.eq((r.status, r.json.get("reported")), (200, False),
                   "Redis paused, failure_mode open: 200 reported false")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    harness.wait_until(lambda: d.admin("/readyz").status == 200, what="ready again")
    left = d.check("closed", "slow", dry_run=True).json["remaining"]
    harness.ok(left in (4, 9), "the late charge landed at most once (%d of 10 left after a "
               "dry run of 1)" % left)
    d.stop()


def failure_tests(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="200ms", admin=True).start()
    redis.stop()
    harness.wait_until(lambda: d.admin("/readyz").status == 503, what="not ready without Redis")
    r = report(d, "open", "k", 5)
    harness.eq((r.status, r.json.get("reported"), r.json.get("degraded")), (200, False, True),
               "Redis stopped, failure_mode open: 200, reported false (not charged)")
    r = report(d, "closed", "k", 5)
    harness.eq((r.status, r.json.get("reported"), r.json.get("error"), r.headers.get("retry-after")),
               (503, False, "backend_unavailable", "1"),
               "failure_mode closed: 503 with Retry-After, for the caller to send again")
    r = report(d, "local", "k", 25)
    harness.eq((r.status, r.json.get("reported"), r.json.get("local"), r.json["allowed"]),
               (200, True, True, False), "failure_mode local: charged in this daemon's memory")
    c = d.check("local", "k")
    harness.eq((c.status, c.json.get("local")), (429, True),
               "failure_mode local: the next local check waits the debt out")
    m = promtext.parse(d.admin("/metrics").body.decode())
    harness.eq([promtext.value(m, "ratelimitd_reports_total", policy=p, result=res)
                for p, res in (("open", "not_recorded"), ("closed", "unavailable"),
                               ("local", "local"))], [1, 1, 1],
               "ratelimitd_reports_total: not_recorded, unavailable, local")
    d.stop()


def main():
    if harness.find_program("REDIS_SERVER", "redis-server") is None:
        harness.skip_all("redis-server not found (Debian package redis-server)")
    exe = os.environ.get("RATELIMITD")
    if not exe:
        harness.bail_out("set RATELIMITD to the built daemon")
    driver = harness.find_program("LOCAL_DRIVER", os.path.join("tests", "unit", "local_driver"))
    if not driver:
        harness.bail_out("local_driver not found: build it (make check) or set LOCAL_DRIVER")
    script_tests(exe, os.path.abspath(driver))

    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="2s", admin=True).start()
    daemon_tests(d, "redis")
    d.stop()
    m = Daemon("redis://127.0.0.1:1/0", POLICY, extra="backend: memory\n", admin=True).start()
    daemon_tests(m, "memory")
    m.stop()
    deny_cache_test(redis)
    slow_tests(redis)
    failure_tests(redis)

    why = redis_cluster.why_unsupported()
    if why:
        harness.diag("no Redis Cluster test: " + why)
        return
    c = redis_cluster.RedisCluster(nmasters=3, replicas=0)
    c.start()
    d = ClusterDaemon(c.seeds(), POLICY, timeout="2s", admin=True).start()
    daemon_tests(d, "cluster")
    d.stop()


if __name__ == "__main__":
    harness.run(main)
