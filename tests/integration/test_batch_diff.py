#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_batch_diff.py: redis.batch changes no answer. The same seeded
stream of POST /check requests (every algorithm, multi-tier policies,
multi-check requests, dry runs, shadow policies, costs 0..limit+1) is sent
by 16 concurrent clients, so that the daemon's batches really form (the
ratelimitd_redis_batch_size histogram must show calls carrying more than
one request), to one daemon with redis.batch: 1, one with redis.batch: 64,
and three daemons sharing one Redis with each setting (the clients spread
over them). Every run must give the same answers.

What is compared, per request (by client and place in its sequence): the
HTTP status and the whole JSON body except reset_ms, retry_after_ms and
delay_ms (top level and per tier) and each concurrency lease's id (random) and
expires_ms, byte for byte after removing those. They are the only fields
that depend on when a request runs (or on chance): every policy is
made time-independent otherwise (windows of 1000 h or a calendar year, so
that no window ends and no bucket refills a whole unit during the test;
the test gives up if it would run across the year's end UTC). The order
of requests per key is fixed: each client owns its keys and sends one
request at a time, so concurrency changes only which requests share a
call, never the order in which one key sees them. Then the Redis state of
the fixed_window tiers (window end and count) must be the same.

Then FUNCTION FLUSH (FCALL) and SCRIPT FLUSH (EVALSHA, on a Redis
without FUNCTION) issued repeatedly while batched load runs: every request
answered exactly once with a decision (none degraded or lost), and the
count in Redis equals the number of allowed answers.
"""

import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import Daemon  # noqa: E402

CLIENTS = 16
PER_CLIENT = 120

POLICY = """policies:
  fw: {tiers: [{name: t, algorithm: fixed_window, limit: 5, window: 1000h}]}
  swl: {tiers: [{name: t, algorithm: sliding_window_log, limit: 4, window: 1000h}]}
  swc: {tiers: [{name: t, algorithm: sliding_window_counter, limit: 6, window: 1000h}]}
  swb: {tiers: [{name: t, algorithm: sliding_window_buckets, limit: 5, window: 1000h,
                 precision: 100h}]}
  tb: {tiers: [{name: t, algorithm: token_bucket, limit: 5, window: 1000h, burst: 7}]}
  gcra: {tiers: [{name: t, algorithm: gcra, limit: 4, window: 1000h}]}
  lb: {tiers: [{name: t, algorithm: leaky_bucket, limit: 3, window: 1000h, burst: 2}]}
  cal: {tiers: [{name: t, algorithm: fixed_window, limit: 6, calendar: year}]}
  conc: {tiers: [{name: t, algorithm: concurrency, limit: 3, lease_timeout: 1h}]}
  multi:
    tiers:
      - {name: a, algorithm: fixed_window, limit: 8, window: 1000h}
      - {name: b, algorithm: token_bucket, limit: 5, window: 1000h}
      - {name: c, algorithm: sliding_window_log, limit: 6, window: 1000h}
  shadowed:
    shadow: true
    tiers: [{name: t, algorithm: fixed_window, limit: 2, window: 1000h}]
"""
LIMITS = {"fw": 5, "swl": 4, "swc": 6, "swb": 5, "tb": 7, "gcra": 4, "lb": 3, "cal": 6,
          "conc": 3, "multi": 5, "shadowed": 2}
NOT_DRY = {"conc"}  # a lease is taken by a real check; a dry run of one is refused


def stream(seed):
    """Per client, its requests: /check bodies over keys of its own."""
    rng = random.Random(seed)
    names = sorted(LIMITS)
    out = []
    for c in range(CLIENTS):
        reqs = []
        for _ in range(PER_CLIENT):
            checks = []
            for p in rng.sample(names, rng.choice([1, 1, 2])):
                checks.append({"policy": p, "key": "c%d-k%d" % (c, rng.randrange(4)),
                               "cost": rng.randint(0, LIMITS[p] + 1)})
            body = {"checks": checks}
            if rng.random() < 0.2 and not any(ch["policy"] in NOT_DRY for ch in checks):
                body["dry_run"] = True
            reqs.append(json.dumps(body))
        out.append(reqs)
    return out


def strip(body):
    """The answer without its time-dependent fields, and a lease's id
    (random) and expiry (a time) without theirs."""
    doc = json.loads(body)
    for obj in [doc] + [t for ch in doc.get("checks", []) for t in ch.get("tiers", [])]:
        obj.pop("reset_ms", None)
        obj.pop("retry_after_ms", None)
        obj.pop("delay_ms", None)
    for lease in doc.get("leases", []):
        lease.pop("id", None)
        lease.pop("expires_ms", None)
    return json.dumps(doc, sort_keys=True)


def run(daemons, reqs):
    """Sends every client's requests in order, client i to daemon i % n,
    all clients at once. Returns answers[client][i] = (status, stripped)."""
    answers = [[None] * len(r) for r in reqs]
    errors = []
    go = threading.Event()

    def client(i):
        d = daemons[i % len(daemons)]
        conn = d.connection()
        go.wait()
        try:
            for j, body in enumerate(reqs[i]):
                conn.request("POST", "/check", body=body)
                r = conn.getresponse()
                answers[i][j] = (r.status, strip(r.read()))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(120)
    harness.eq(errors[:3], [], "every client got all its answers")
    return answers


def batch_histogram(d):
    fams = promtext.parse(d.admin("/metrics").body.decode())
    total = promtext.value(fams, "ratelimitd_redis_batch_size_count")
    alone = promtext.value(fams, "ratelimitd_redis_batch_size_bucket", le="1")
    checks = promtext.value(fams, "ratelimitd_redis_batch_size_sum")
    return total, alone, checks


def fixed_counts(redis):
    c = redis.client()
    out = {}
    for k in c.command("KEYS", "rl:{fw:*") + c.command("KEYS", "rl:{cal:*") + \
            c.command("KEYS", "rl:{multi:*:a"):
        out[k] = c.command("GET", k)
    return out


def first_difference(a, b, reqs):
    for i in range(len(a)):
        for j in range(len(a[i])):
            if a[i][j] != b[i][j]:
                return "client %d request %d %s: %r vs %r" % (i, j, reqs[i][j], a[i][j], b[i][j])
    return None


def differential(redis):
    year = time.gmtime()
    if year.tm_yday == 365 + (year.tm_year % 4 == 0) and year.tm_hour == 23 \
            and year.tm_min >= 55:
        harness.skip("the year ends within minutes: calendar: year would start afresh")
        return
    reqs = stream(2026)
    results = {}
    for name, ndaemons, batch in (("1 daemon, batch 1", 1, 1), ("1 daemon, batch 64", 1, 64),
                                  ("3 daemons, batch 64", 3, 64), ("3 daemons, batch 1", 3, 1)):
        redis.client().command("FLUSHALL")
        daemons = [Daemon("unix:" + redis.socket_path, POLICY, timeout="5s", batch=batch).start()
                   for _ in range(ndaemons)]
        answers = run(daemons, reqs)
        counts = fixed_counts(redis)
        hist = [batch_histogram(d) for d in daemons]
        for d in daemons:
            harness.eq(d.stop(), 0, "%s: exits 0" % name)
        total = sum(h[0] for h in hist)
        alone = sum(h[1] for h in hist)
        checks = sum(h[2] for h in hist)
        if batch == 1:
            harness.eq(alone, total, "%s: every call carries one request (%d calls)"
                       % (name, total))
        else:
            harness.ok(alone < total and checks > total,
                       "%s: batches formed: %d calls for %d requests, %d alone"
                       % (name, total, checks, alone))
        results[name] = (answers, counts)
    base_answers, base_counts = results["1 daemon, batch 1"]
    statuses = {}
    for a in base_answers:
        for s, _ in a:
            statuses[s] = statuses.get(s, 0) + 1
    harness.ok(statuses.get(200, 0) > 100 and statuses.get(429, 0) > 100,
               "the stream both allows and denies (%r)" % statuses)
    harness.ok(len(base_counts) > 20, "the stream wrote fixed_window state (%d keys)"
               % len(base_counts))
    for name, (answers, counts) in results.items():
        if name == "1 daemon, batch 1":
            continue
        diff = first_difference(base_answers, answers, reqs)
        harness.ok(diff is None, "%s: every answer as 1 daemon with batch 1%s"
                   % (name, "" if diff is None else " (" + diff + ")"))
        harness.eq(counts, base_counts, "%s: the same fixed_window counts in Redis" % name)


FLUSH_POLICY = """policies:
  api: {tiers: [{name: t, algorithm: fixed_window, limit: 1000000, window: 1000h}]}
"""


def flush_under_load(redis, flush, what):
    """Batched load from 16 clients while flush runs 20 times 50 ms apart:
    every request answered once with a decision, and Redis's count equals
    the allowed answers."""
    redis.client().command("FLUSHALL")
    d = Daemon("unix:" + redis.socket_path, FLUSH_POLICY, timeout="5s", batch=64).start()
    answered = [0] * CLIENTS
    bad = []
    stop = threading.Event()

    def client(i):
        conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        n = 0
        try:
            while not stop.is_set() and n < 5000:
                conn.request("POST", "/check", body='{"policy":"api","key":"k%d"}' % i)
                r = conn.getresponse()
                body = r.read()
                if r.status != 200 or b"degraded" in body:
                    bad.append((r.status, body[:200]))
                answered[i] += 1
                n += 1
        except OSError as e:
            bad.append(repr(e))
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    c = redis.client()
    harness.flush_repeatedly(c, flush)
    stop.set()
    for t in threads:
        t.join(60)
    harness.eq(bad[:3], [], "%s: 20 flushes under batched load, every answer a decision" % what)
    total, alone, checks = batch_histogram(d)
    fams = promtext.parse(d.admin("/metrics").body.decode())
    reloads = promtext.value(fams, "ratelimitd_redis_noscript_reloads_total")
    # Through the module (test_with_module) no call runs the Functions, so
    # a flush is never met: no reload.
    by_module = bool(harness.module_args())
    harness.ok(alone < total and (reloads == 0 if by_module else reloads > 0),
               "%s: batches formed (%d calls for %d requests) and %s (%d reloads)"
               % (what, total, checks, "never needed the Functions" if by_module
                  else "met the flushes", reloads))
    counted = 0
    for i in range(CLIENTS):
        v = c.command("GET", "rl:{api:k%d}:t" % i)
        counted += int(v.split(":")[2]) if v else 0
    harness.eq(counted, sum(answered),
               "%s: Redis counted every allowed answer exactly once (%d)" % (what, sum(answered)))
    harness.eq(checks, sum(answered), "%s: every request was one call's member once" % what)
    harness.eq(d.stop(), 0, "%s: exits 0" % what)


def main():
    if harness.find_program("REDIS_SERVER", "redis-server") is None:
        harness.skip_all("redis-server not found (Debian package redis-server)")
    redis = harness.RedisServer().start()
    differential(redis)
    flush_under_load(redis, ("FUNCTION", "FLUSH"), "FCALL")
    redis.stop()
    old = harness.RedisServer(extra_args=("--rename-command", "FUNCTION", "")).start()
    flush_under_load(old, ("SCRIPT", "FLUSH"), "EVALSHA")
    old.stop()


harness.run(main)
