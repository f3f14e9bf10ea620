# SPDX-License-Identifier: Apache-2.0
"""test_concurrency_limit.py: the `concurrency` algorithm (leases) end to
end: what /check hands out (body and X-RateLimit-Lease), /release and
/renew (twice, unknown, forged, expired ids), expiry at lease_timeout (a
crashed client), atomicity with rate tiers in the same request, no deny
cache for a concurrency denial, metrics; 3 daemons x many client threads
holding leases of random length never hold more than `limit` at once
(checked from the clients' own records); a Redis restart; failure_mode
local (leases in the daemon's memory); the memory backend; a Redis
Cluster. (test_concurrency.py is about something else: many workers.)"""
import itertools
import json
import os
import random
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import redis_cluster  # noqa: E402
from daemon import Daemon  # noqa: E402

LIMIT = 3
POLICY = """policies:
  conc:
    tiers:
      - {name: inflight, algorithm: concurrency, limit: %d, lease_timeout: 10s}
  short:
    tiers:
      - {name: inflight, algorithm: concurrency, limit: 1, lease_timeout: 400ms}
  both:
    tiers:
      - {name: rate, algorithm: fixed_window, limit: 3, window: 1h}
      - {name: inflight, algorithm: concurrency, limit: 1, lease_timeout: 10s}
  crashy:
    tiers:
      - {name: inflight, algorithm: concurrency, limit: %d, lease_timeout: 150ms}
  local:
    failure_mode: local
    tiers:
      - {name: inflight, algorithm: concurrency, limit: 2, lease_timeout: 10s}
""" % (LIMIT, LIMIT)

ID_RE = re.compile(r"^[A-Za-z0-9._-]+$")


def release(d, ids, path="/release"):
    r = d.request("POST", path, json.dumps({"leases": ids}))
    harness.eq(r.status, 200, "%s answers 200" % path)
    return r.json


def lease_ids(r):
    return [x["id"] for x in r.json.get("leases", [])]


def test_basics(d, redis):
    a = d.check("conc", "u1")
    harness.eq(a.status, 200, "a check with a concurrency tier is allowed")
    leases = a.json.get("leases")
    harness.ok(isinstance(leases, list) and len(leases) == 1, "it answers one lease")
    lease = leases[0]
    harness.eq((lease["policy"], lease["key"], lease["tier"]), ("conc", "u1", "inflight"),
               "the lease names policy, key and tier")
    harness.ok(ID_RE.match(lease["id"]) is not None, "the id is URL-safe")
    harness.eq(a.headers.get("x-ratelimit-lease"), lease["id"], "X-RateLimit-Lease carries it")
    now_ms = int(time.time() * 1000)
    harness.ok(abs(lease["expires_ms"] - (now_ms + 10000)) < 2000,
               "expires_ms is now + lease_timeout (%d vs %d)" % (lease["expires_ms"], now_ms))
    held = [a] + [d.check("conc", "u1") for _ in range(LIMIT - 1)]
    harness.eq([r.status for r in held], [200] * LIMIT, "limit leases are granted")
    harness.eq(held[-1].json["remaining"], 0, "remaining counts the units held")
    denied = d.check("conc", "u1")
    harness.eq(denied.status, 429, "the lease past the limit is denied")
    harness.ok("leases" not in denied.json and "x-ratelimit-lease" not in denied.headers,
               "a denial hands out no lease")
    retry = denied.json["retry_after_ms"]
    harness.ok(0 < retry <= 10000, "Retry-After of a denial: the earliest expiry (%d ms)" % retry)
    harness.ok(int(denied.headers.get("retry-after", "0")) >= 1, "Retry-After header present")
    other = d.check("conc", "u2")
    harness.eq(other.status, 200, "another key has its own leases")

    # Release: then once more (no double free), and an unknown id.
    j = release(d, [lease["id"]])
    harness.eq((j["released"], j["unknown"]), (1, 0), "release frees the lease")
    harness.eq(d.check("conc", "u1").status, 200, "its unit is free again at once "
               "(no deny cache holds the denial)")
    j = release(d, [lease["id"], lease["id"]])
    harness.eq((j["released"], j["unknown"]), (0, 2), "releasing twice frees nothing")
    harness.eq(d.check("conc", "u1").status, 429, "still exactly limit held")

    # Forged ids: another nonce, another key, another cost: unknown.
    own = lease_ids(held[1])[0]
    parts = own.split(".")
    forged_nonce = ".".join(parts[:5] + ["A" * len(parts[5])])
    forged_key = ".".join(parts[:3] + ["dTI"] + parts[4:])  # base64url("u2")
    forged_cost = ".".join(parts[:4] + ["2", parts[5]])
    j = release(d, [forged_nonce, forged_key, forged_cost, "junk", "b.x.y.z.1.short"])
    harness.eq((j["released"], j["unknown"]), (0, 5), "forged and malformed ids free nothing")
    harness.eq(d.check("conc", "u1").status, 429, "and no unit was freed by them")
    bad = d.request("POST", "/release", json.dumps({"leases": []}))
    harness.eq((bad.status, bad.json.get("error")), (400, "invalid_leases"), "empty list: 400")
    bad = d.request("POST", "/release", json.dumps({"ids": [own]}))
    harness.eq((bad.status, bad.json.get("error")), (400, "unknown_field"), "unknown field: 400")

    # Renew: a later expiry; unknown ids are told apart.
    before = held[1].json["leases"][0]["expires_ms"]
    time.sleep(0.05)
    j = release(d, [own, forged_nonce], path="/renew")
    harness.eq((j["renewed"], j["unknown"]), (1, 1), "renew: one renewed, one unknown")
    harness.ok(j["leases"][0]["expires_ms"] > before, "the renewed lease expires later")
    score = redis.client().command("ZSCORE", "rl:{conc:u1}:inflight", "1:" + parts[5])
    harness.eq(int(score) // 1000, j["leases"][0]["expires_ms"], "Redis holds the new expiry")

    # Cost > 1 holds that many units.
    for r in held[1:]:
        release(d, lease_ids(r))
    two = d.check("conc", "u1", cost=LIMIT - 1)
    harness.eq((two.status, two.json["remaining"]), (200, 0),
               "a cost of %d holds %d units (one lease held before)" % (LIMIT - 1, LIMIT - 1))
    harness.eq(d.check("conc", "u1").status, 429, "none left")
    harness.eq(release(d, lease_ids(two))["released"], 1, "one release frees the whole cost")
    harness.eq(d.check("conc", "u1", cost=2).status, 200, "and its units are free again")

    # A dry run takes no lease.
    dry = d.check("conc", "u3", dry_run=True)
    harness.ok(dry.status == 200 and "leases" not in dry.json, "a dry run takes no lease")
    harness.eq(redis.client().command("EXISTS", "rl:{conc:u3}:inflight"), 0, "and writes nothing")


def test_expiry(d):
    a = d.check("short", "crash")
    harness.eq(a.status, 200, "a lease that nobody will release")
    harness.eq(d.check("short", "crash").status, 429, "holds the only unit")
    time.sleep(0.6)
    # Before any other acquire on the key, which trims a lease expired a
    # lease timeout ago (then it is unknown).
    j = release(d, lease_ids(a), path="/renew")
    harness.eq((j["renewed"], j["expired"]), (0, 1), "an expired lease is not renewed")
    j = release(d, lease_ids(a))
    harness.eq((j["released"], j["unknown"], j["expired"]), (0, 1, 1),
               "releasing the expired lease: nothing freed, told expired")
    b = d.check("short", "crash")
    harness.eq(b.status, 200, "after lease_timeout it has freed itself (a crashed client)")
    harness.eq(d.check("short", "crash").status, 429, "the new holder still holds its unit")
    j = release(d, lease_ids(b), path="/renew")
    harness.eq(j["renewed"], 1, "a live lease renews")
    time.sleep(0.3)
    harness.eq(d.check("short", "crash").status, 429, "a renewed lease outlives its first timeout")


def test_atomic(d, redis):
    c = redis.client()
    a = d.check("both", "k")
    harness.eq(a.status, 200, "rate and concurrency tiers together: allowed")
    denied = d.check("both", "k")
    harness.eq(denied.status, 429, "denied by the concurrency tier")
    rate = denied.json["checks"][0]["tiers"][0]
    harness.eq(rate["remaining"], 2, "a concurrency denial consumes no rate")
    harness.eq(int(harness.fixed_window_count(c, "rl:{both:k}:rate")), 1, "Redis agrees: one taken")
    release(d, lease_ids(a))
    b = d.check("both", "k")
    release(d, lease_ids(b))
    c3 = d.check("both", "k")
    release(d, lease_ids(c3))
    harness.eq(int(harness.fixed_window_count(c, "rl:{both:k}:rate")), 3, "three taken, three released")
    live = c.command("ZCOUNT", "rl:{both:k}:inflight", "(%d" % (time.time() * 1e6), "+inf")
    harness.eq(live, 0, "no lease held")
    over = d.check("both", "k")
    harness.eq(over.status, 429, "denied by the rate tier")
    harness.ok("leases" not in over.json, "no lease in the answer")
    live = c.command("ZCOUNT", "rl:{both:k}:inflight", "(%d" % (time.time() * 1e6), "+inf")
    harness.eq(live, 0, "a rate denial takes no lease")
    # Two checks in one request: the second denies, the first takes nothing.
    x = d.check("conc", "atom-a")
    r = d.check(checks=[{"policy": "conc", "key": "atom-b"}, {"policy": "short", "key": "atom-c"},
                        {"policy": "short", "key": "atom-c"}])
    harness.eq(r.status, 429, "a request whose other check denies (cost 2 > 1)")
    harness.eq(c.command("EXISTS", "rl:{conc:atom-b}:inflight"), 0,
               "its concurrency check took no lease")
    release(d, lease_ids(x))


def test_metrics(d):
    text = d.admin("/metrics").body.decode()
    for name in ("acquired", "released", "renewed", "expired"):
        m = re.search(r"^ratelimitd_leases_%s_total (\d+)" % name, text, re.M)
        harness.ok(m is not None and int(m.group(1)) > 0,
                   "ratelimitd_leases_%s_total counts (%s)" % (name, m and m.group(1)))


def stress(daemons, policy, limit, nclients=24, rounds=12, max_hold=0.04, crash=0.0, min_crashed=0):
    """Clients acquire, hold for a random time, release, each on a random
    daemon; with probability `crash` a client never releases (its lease
    must expire). Each client makes `rounds` requests, and goes on until
    `min_crashed` leases were left to expire (a slow machine grants fewer
    in the same rounds), for 60 s at most. Returns (records, counts). A record is (granted, end):
    the wall-clock time of the answer that granted the lease, and the
    sending of its release or (never released) just before the expiry the
    answer gave; both lie within the time the backend held the lease."""
    records, counts = [], {"granted": 0, "denied": 0, "other": 0, "unreleased": 0,
                           "crashed": 0}
    lock = threading.Lock()
    go = threading.Event()

    def client(seed):
        rnd = random.Random(seed)
        conns = [d.connection() for d in daemons]
        go.wait()
        deadline = time.monotonic() + 60
        for i in itertools.count():
            if i >= rounds and (counts["crashed"] >= min_crashed or time.monotonic() > deadline):
                break
            conn = rnd.choice(conns)
            try:
                conn.request("POST", "/check", body=json.dumps({"policy": policy, "key": "hot"}))
                r = conn.getresponse()
                body = json.loads(r.read())
                granted = time.time()
            except OSError:
                with lock:
                    counts["other"] += 1
                continue
            if r.status == 429:
                with lock:
                    counts["denied"] += 1
                time.sleep(rnd.uniform(0, max_hold / 2))
                continue
            if r.status != 200 or len(body.get("leases", [])) != 1:
                with lock:
                    counts["other"] += 1
                continue
            if rnd.random() < crash:
                with lock:
                    counts["crashed"] += 1
                    records.append((granted, body["leases"][0]["expires_ms"] / 1000 - 0.001))
                continue
            time.sleep(rnd.uniform(0, max_hold))
            ids = [x["id"] for x in body["leases"]]
            releasing = time.time()
            conn = rnd.choice(conns)
            conn.request("POST", "/release", body=json.dumps({"leases": ids}))
            rr = conn.getresponse()
            released = json.loads(rr.read())
            with lock:
                counts["granted"] += 1
                if rr.status != 200 or released.get("released") != 1:
                    counts["unreleased"] += 1
                records.append((granted, releasing))
        for c in conns:
            c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(nclients)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(120)
    return records, counts


def most_held(records):
    events = sorted([(g, 1) for g, _ in records] + [(r, -1) for _, r in records],
                    key=lambda e: (e[0], e[1]))
    held = peak = 0
    for _, delta in events:
        held += delta
        peak = max(peak, held)
    return peak


def test_three_daemons(redis):
    ds = [Daemon("unix:" + redis.socket_path, POLICY, timeout="2s").start() for _ in range(3)]
    records, counts = stress(ds, "conc", LIMIT, rounds=30, max_hold=0.02)
    harness.diag("3 daemons: %r, %d leases" % (counts, len(records)))
    harness.ok(counts["granted"] > 50 and counts["denied"] > 0,
               "contention: leases granted and denied")
    harness.eq((counts["other"], counts["unreleased"]), (0, 0), "every answer 200/429, every "
               "release freed its lease (on whichever daemon)")
    peak = most_held(records)
    harness.ok(peak <= LIMIT, "never more than %d held at once by the clients' records (%d)"
               % (LIMIT, peak))
    harness.ok(peak == LIMIT, "and the limit was reached (%d)" % peak)
    # Crashing clients: a fifth never release; their leases expire after
    # 150 ms, and the limit holds through the expiries.
    records, counts = stress(ds, "crashy", LIMIT, rounds=30, max_hold=0.02, crash=0.2,
                             min_crashed=6)
    harness.diag("3 daemons, crashing clients: %r" % counts)
    peak = most_held(records)
    harness.ok(counts["crashed"] > 5 and counts["granted"] > counts["crashed"],
               "leases granted after crashed clients' leases expired")
    harness.ok(peak <= LIMIT and counts["other"] == 0,
               "never more than %d held at once, expiries included (%d)" % (LIMIT, peak))
    for d in ds:
        harness.eq(d.stop(), 0, "exits 0")


def test_redis_restart(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="500ms").start()
    a = d.check("conc", "restart")
    harness.eq(a.status, 200, "a lease before the restart")
    redis.restart()
    harness.wait_until(lambda: "degraded" not in d.check("conc", "restart2").json, 10,
                       what="checks decided by Redis again")
    j = release(d, lease_ids(a))
    harness.eq((j["released"], j["unknown"]), (0, 1),
               "a lease Redis lost in the restart is unknown, not an error")
    held = [d.check("conc", "restart") for _ in range(LIMIT)]
    harness.eq([r.status for r in held], [200] * LIMIT, "the key's units are all free again")
    harness.eq(d.check("conc", "restart").status, 429, "and the limit holds")
    harness.eq(d.stop(), 0, "exits 0")


def test_failure_local(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="200ms").start()
    d2 = Daemon("unix:" + redis.socket_path, POLICY, timeout="200ms").start()
    redis.stop()
    try:
        a = d.check("local", "fl")
        harness.eq((a.status, a.json.get("local")), (200, True),
                   "Redis down: failure_mode local decides in memory")
        ids = lease_ids(a)
        harness.ok(len(ids) == 1 and ids[0].startswith("l."), "a local lease id (l.)")
        b = d.check("local", "fl")
        harness.eq(d.check("local", "fl").status, 429, "the memory store holds the limit")
        j = release(d2, ids)
        harness.eq((j["released"], j["unknown"]), (0, 1),
                   "another daemon does not know this daemon's local lease")
        j = release(d, ids)
        harness.eq(j["released"], 1, "the daemon that took it releases it")
        harness.eq(d.check("local", "fl").status, 200, "and its unit is free")
        r = d.request("POST", "/release", json.dumps({"leases": lease_ids(b) + ["b.x"]}))
        harness.eq(r.status, 200, "a local id is released even while Redis is down "
                   "(only unknown ids are not sent)")
        o = d.check("conc", "fo")
        harness.eq((o.status, o.json.get("degraded")), (200, True),
                   "failure_mode open: allowed, degraded")
        harness.ok("leases" not in o.json, "and no lease is handed out (nothing to release)")
        r = d.request("POST", "/release", json.dumps({"leases": ["b.Y29uYw.aW5mbGlnaHQ.dTE.1."
                                                                 + "A" * 22]}))
        harness.eq((r.status, r.json.get("error")), (503, "backend_unavailable"),
                   "releasing a Redis lease while Redis is down: 503")
    finally:
        redis.start()
    harness.eq(d.stop(), 0, "exits 0")
    harness.eq(d2.stop(), 0, "exits 0")


def test_memory_backend():
    d = Daemon(None, POLICY, extra="backend: memory\n").start()
    a = d.check("conc", "m")
    ids = lease_ids(a)
    harness.ok(a.status == 200 and ids and ids[0].startswith("b."), "memory: a lease")
    held = [d.check("conc", "m") for _ in range(LIMIT - 1)]
    harness.eq(d.check("conc", "m").status, 429, "memory: the limit holds")
    j = release(d, ids + ids)
    harness.eq((j["released"], j["unknown"]), (1, 1), "memory: released once, then unknown")
    harness.eq(d.check("conc", "m").status, 200, "memory: the unit is free")
    j = release(d, lease_ids(held[0]), path="/renew")
    harness.eq(j["renewed"], 1, "memory: renew")
    s = d.check("short", "m")
    time.sleep(0.6)
    j = release(d, lease_ids(s))
    harness.eq(j["expired"], 1, "memory: the expired lease is told expired")
    harness.eq(d.check("short", "m").status, 200, "memory: a lease expires at lease_timeout")
    both = d.check("both", "m")
    harness.eq(d.check("both", "m").status, 429, "memory: concurrency denial")
    harness.eq(d.check("both", "m", dry_run=True).json["checks"][0]["tiers"][0]["remaining"], 2,
               "memory: it consumed no rate")
    release(d, lease_ids(both))
    records, counts = stress([d], "conc", LIMIT, nclients=12, rounds=8)
    harness.ok(most_held(records) <= LIMIT and counts["unreleased"] == 0,
               "memory: many clients never hold more than the limit (%d)" % most_held(records))
    harness.eq(d.stop(), 0, "exits 0")


def test_auth(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY).start()
    r = d.request("GET", "/auth/conc")
    harness.eq((r.status, r.json.get("error")), (400, "no_release_path"),
               "forward-auth refuses a policy with a concurrency tier")
    harness.eq(d.stop(), 0, "exits 0")


class ClusterDaemon(Daemon):
    def __init__(self, seeds, policy, **kw):
        self.seeds = seeds
        super().__init__(None, policy, **kw)

    def redis_where(self):
        return "  cluster:\n" + "".join("    - %s\n" % s for s in self.seeds)


def test_cluster():
    why = redis_cluster.why_unsupported()
    if why:
        harness.skip("cluster: " + why)
        return
    c = redis_cluster.RedisCluster(nmasters=3, replicas=0)
    c.start()
    seeds = ["redis://127.0.0.1:%d" % p for p in c.ports[:2]]
    ds = [ClusterDaemon(seeds, POLICY, timeout="2s").start() for _ in range(2)]
    a = ds[0].check("conc", "cl")
    harness.eq(a.status, 200, "cluster: a lease")
    j = release(ds[1], lease_ids(a))
    harness.eq(j["released"], 1, "cluster: released through another daemon")
    # Leases of keys on several slots in one release call.
    many = [ds[0].check("conc", "cl-%d" % i) for i in range(6)]
    ids = [i for r in many for i in lease_ids(r)]
    j = release(ds[1], ids, path="/renew")
    harness.eq(j["renewed"], 6, "cluster: a renew spanning slots")
    j = release(ds[0], ids)
    harness.eq(j["released"], 6, "cluster: a release spanning slots")
    records, counts = stress(ds, "conc", LIMIT, nclients=16, rounds=8)
    harness.ok(most_held(records) <= LIMIT and counts["unreleased"] == 0 and counts["other"] == 0,
               "cluster: never more than the limit held (%d), every release frees"
               % most_held(records))
    for d in ds:
        harness.eq(d.stop(), 0, "exits 0")
    c.stop()


def main():
    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True).start()
    test_basics(d, redis)
    test_expiry(d)
    test_atomic(d, redis)
    test_metrics(d)
    harness.eq(d.stop(), 0, "exits 0")
    test_auth(redis)
    test_three_daemons(redis)
    test_redis_restart(redis)
    test_failure_local(redis)
    test_memory_backend()
    test_cluster()


harness.run(main)
