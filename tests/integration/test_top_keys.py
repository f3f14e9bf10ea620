# SPDX-License-Identifier: Apache-2.0
"""test_top_keys.py: GET /v1/top/<policy>, the heaviest keys of the fleet,
against real redis-server and daemons.

- Accuracy (issue 32): a Zipf (s = 1.1) load over 100 000 keys sent through
  3 daemons sharing one Redis, in batches of checks on many keep-alive
  connections; the test counts, from the answers, every key's denied
  checks and admitted cost. GET /v1/top/<policy>?by=denied (and by=used)
  &window=1m&n=20 on one daemon: the window's total is exactly what was
  sent, daemons is 3, at least 18 of the true top 20 are listed, each count
  within 1 % of the total of its true count and never below it, and never
  more than its error above it. The figures are printed.
- Windows: a sketch of another daemon written into Redis 11 minutes back is
  outside window=10m and one 10 minutes back inside it (1m sees neither).
- The memory backend (two workers): exact counts and errors 0 while the
  keys are fewer than the sketch's counters, by=used counts admitted cost
  only (a denied request's checks took nothing), n caps the list, HEAD,
  daemons 1.
- Redis Cluster (3 masters, 2 daemons): the sketches merged, exact, the
  minute's hash on the master of the policy's slot.
- Errors: 404 unknown_policy, 400 invalid_query for by, window and n, 400
  invalid_path, 405 with Allow, 401 without the bearer token; 503
  backend_unavailable with Retry-After: 1 once Redis is stopped. Every answer
  is held against docs/openapi.yaml (daemon.py).
"""
import bisect
import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import redis_cluster  # noqa: E402
from daemon import ClusterDaemon, Daemon  # noqa: E402
from test_admin import AUTH, TOKEN  # noqa: E402
POLICY = (
    "policies:\n"
    "  strict: {tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1h}]}\n"
    "  open: {tiers: [{name: t, algorithm: fixed_window, limit: 1000000000, window: 1h}]}\n")
KEYS = 100000
BATCH = 50  # checks per request of policy open (REQUEST_MAX_CHECKS is 64)
STRICT_CHECKS = 12000
OPEN_BATCHES = 600


def top(d, policy, query="", method="GET", headers=AUTH):
    return d.request(method, "/v1/top/%s%s" % (policy, query), headers=headers, port=d.admin_port)


class Zipf:
    """Draws key ranks 1 .. n with P(r) proportional to r^-s."""

    def __init__(self, n, s, seed):
        acc, self.cdf = 0.0, []
        for r in range(1, n + 1):
            acc += r ** -s
            self.cdf.append(acc)
        self.rng = random.Random(seed)

    def draw(self):
        return bisect.bisect_left(self.cdf, self.rng.random() * self.cdf[-1]) + 1


def send_batches(daemons, batches, threads=12):
    """Sends every batch (a list of (policy, key, cost)) as one /check on
    keep-alive connections spread over the daemons; returns the answers'
    JSON, in batches' order."""
    answers = [None] * len(batches)
    errors = []

    def worker(t):
        d = daemons[t % len(daemons)]
        conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        try:
            for i in range(t, len(batches), threads):
                b = batches[i]
                body = json.dumps({"policy": b[0][0], "key": b[0][1], "cost": b[0][2]}
                                  if len(b) == 1 else
                                  {"checks": [{"policy": p, "key": k, "cost": c}
                                              for p, k, c in b]})
                conn.request("POST", "/check", body=body, headers=AUTH)
                r = conn.getresponse()
                data = r.read()
                if r.status not in (200, 429):
                    errors.append((r.status, data[:200]))
                    return
                answers[i] = json.loads(data)
        except OSError as e:
            errors.append(repr(e))
        finally:
            conn.close()

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise harness.Fatal("the load failed: %r" % errors[:3])
    return answers


def truth_of(batches, answers):
    """From the answers: per (policy, key), denied checks and admitted cost
    (the cost of every check of an allowed request). A batch naming a key
    twice is one check of the summed cost (the daemon adds duplicates):
    the answer's checks are each (policy, key) once."""
    denied, used = {}, {}
    for batch, a in zip(batches, answers):
        cost = {}
        for p, k, c in batch:
            cost[(p, k)] = cost.get((p, k), 0) + c
        checks = a.get("checks") or [dict(a, policy=batch[0][0], key=batch[0][1])]
        for ch in checks:
            pk = (ch["policy"], ch["key"])
            if not ch["allowed"]:
                denied[pk] = denied.get(pk, 0) + 1
            elif a["allowed"]:
                used[pk] = used.get(pk, 0) + cost[pk]
    return denied, used


def wait_total(d, policy, by, want):
    """The top answer once its total reaches want (every daemon has handed
    its sketches over: once a second each)."""
    got = []

    def reached():
        r = top(d, policy, "?by=%s&window=1m&n=20" % by)
        got[:] = [r]
        return r.status == 200 and r.json["total"] >= want

    try:
        harness.wait_until(reached, timeout=60, interval=0.1,
                           what="%s by=%s total %d" % (policy, by, want))
    except TimeoutError:
        pass  # the caller's test point says what was found instead
    return got[0]


def accuracy(policy, by, truth, d, n_daemons):
    true = sorted(((v, k) for (p, k), v in truth.items() if p == policy), reverse=True)
    total = sum(v for v, _ in true)
    started = time.monotonic()
    r = wait_total(d, policy, by, total)
    harness.diag("%s by=%s: merged answer after %.2f s" % (policy, by, time.monotonic() - started))
    if not harness.eq((r.status, r.json and r.json["total"]), (200, total),
                      "%s by=%s: the window's total is what was sent (%d)" % (policy, by, total)):
        return
    j = r.json
    harness.eq((j["policy"], j["by"], j["window"], j["daemons"], len(j["keys"])),
               (policy, by, "1m", n_daemons, 20),
               "%s by=%s: policy, by, window, %d daemons, 20 keys" % (policy, by, n_daemons))
    exact = dict((k, v) for v, k in true)
    # Keys tied with the 20th are as much the top 20 as it is.
    top20 = set(k for v, k in true if v >= true[19][0])
    listed = [e["key"] for e in j["keys"]]
    hits = len(top20 & set(listed))
    worst = max(abs(e["count"] - exact.get(e["key"], 0)) for e in j["keys"])
    harness.diag("%s by=%s: total %d, %d of the true top 20 listed, worst |count - true| %d "
                 "(%.3f %% of the total; bound 1 %%), largest error bound %d"
                 % (policy, by, total, hits, worst, 100.0 * worst / total,
                    max(e["error"] for e in j["keys"])))
    for rank, e in enumerate(j["keys"][:5]):
        harness.diag("  #%d %s: count %d error %d true %d (true rank %d: %d)"
                     % (rank + 1, e["key"], e["count"], e["error"], exact.get(e["key"], 0),
                        rank + 1, true[rank][0]))
    harness.ok(hits >= 18, "%s by=%s: %d >= 18 of the true top 20 listed" % (policy, by, hits))
    harness.ok(worst <= total / 100.0,
               "%s by=%s: every count within 1 %% of the total of its true count" % (policy, by))
    harness.ok(all(exact.get(e["key"], 0) <= e["count"] <= exact.get(e["key"], 0) + e["error"]
                   for e in j["keys"]),
               "%s by=%s: true <= count <= true + error, for every key listed" % (policy, by))
    harness.eq([e["count"] for e in j["keys"]],
               sorted((e["count"] for e in j["keys"]), reverse=True),
               "%s by=%s: sorted by count, heaviest first" % (policy, by))


def fleet(redis, extra):
    url = "unix:" + redis.socket_path
    daemons = [Daemon(url, POLICY, timeout="2s", admin=True, extra=extra).start()
               for _ in range(3)]
    zipf = Zipf(KEYS, 1.1, 3211)
    rng = random.Random(77)
    # Denials one check a request, so that a key's denial does not hang on
    # the other keys of its request; admitted cost in batches, never denied.
    batches = [[("strict", "u%d" % zipf.draw(), 1)] for _ in range(STRICT_CHECKS)]
    batches += [[("open", "u%d" % zipf.draw(), rng.randint(1, 3)) for _ in range(BATCH)]
                for _ in range(OPEN_BATCHES)]
    started = time.monotonic()
    answers = send_batches(daemons, batches)
    took = time.monotonic() - started
    harness.diag("sent %d checks in %d requests through 3 daemons in %.1f s"
                 % (sum(len(b) for b in batches), len(batches), took))
    denied, used = truth_of(batches, answers)
    accuracy("strict", "denied", denied, daemons[1], 3)
    accuracy("open", "used", used, daemons[2], 3)
    with redis.client() as c:
        for policy in ("strict", "open"):
            sizes = []
            for key in c.command("KEYS", "rl:top:{%s}:*" % policy):
                fields = c.command("HKEYS", key)
                sizes += [c.command("HSTRLEN", key, f) for f in fields]
            harness.diag("%s: %d sketches in Redis, %s bytes each (both measures, 256 counters)"
                         % (policy, len(sizes), sorted(sizes)))
    return daemons


def windows(d, redis):
    """Sketches of a daemon that is not running, written where daemons write
    them, 10 and 11 minutes back."""
    now_min = int(time.time()) // 60
    sketch = "7 0 1\n7 0 4 %s\n0 0 0\n"  # denied: one key counted 7 times; used: none
    with redis.client() as c:
        for back, key in ((10, "warm"), (11, "cold")):
            c.command("HSET", "rl:top:{strict}:%d" % (now_min - back), "old:1:ab/0",
                      sketch % key)
            c.command("EXPIRE", "rl:top:{strict}:%d" % (now_min - back), 120)
    r = top(d, "strict", "?window=10m&n=100")
    keys = [e["key"] for e in r.json["keys"]] if r.status == 200 else []
    # The minute may have turned between writing and asking: "warm" is
    # then 11 minutes back; "cold" can only be further.
    turned = int(time.time()) // 60 != now_min
    harness.ok(("warm" in keys or turned) and "cold" not in keys,
               "window=10m: a key counted 10 minutes back is in, 11 minutes back is out (%s)"
               % [k for k in keys if k in ("warm", "cold")])
    harness.ok(r.json["daemons"] == 4 or turned,
               "window=10m: the old daemon's sketch counted among the daemons (%d)"
               % r.json["daemons"])
    r = top(d, "strict", "?window=1m&n=100")
    harness.ok(r.status == 200 and not {"warm", "cold"} & {e["key"] for e in r.json["keys"]},
               "window=1m: neither")


def cluster(extra):
    """Two daemons on a Redis Cluster of 3 masters: the sketches of a
    policy are on the master of its hash tag's slot, and merged."""
    if not redis_cluster.supported():
        harness.skip(redis_cluster.why_unsupported())
        return
    c = redis_cluster.RedisCluster(nmasters=3, replicas=0)
    c.start()
    ds = [ClusterDaemon(c.seeds(), POLICY, timeout="2s", admin=True, extra=extra).start()
          for _ in range(2)]
    for i, d in enumerate(ds):
        conn = d.connection()
        for _ in range(4 + 3 * i):  # limit 1: 3 and 6 denied
            conn.request("POST", "/check", headers=AUTH,
                         body=json.dumps({"policy": "strict", "key": "k%d" % i}))
            conn.getresponse().read()
        conn.close()
    r = wait_total(ds[0], "strict", "denied", 9)
    harness.eq((r.status, r.json["daemons"],
                [(e["key"], e["count"], e["error"]) for e in r.json["keys"]]),
               (200, 2, [("k1", 6, 0), ("k0", 3, 0)]),
               "cluster: both daemons' sketches merged, exact")
    key = "rl:top:{strict}:%d" % (int(time.time()) // 60)
    with c.client(c.node_for_key(key)) as cl:
        fields = cl.command("HKEYS", key)
    harness.ok(len(fields) == 2 or int(time.time()) // 60 != int(key.rsplit(":", 1)[1]),
               "cluster: the minute's hash, one field per daemon, on its slot's master (%d)"
               % len(fields))
    for d in ds:
        d.stop()
    c.stop()


def memory(extra):
    d = Daemon(None, POLICY, admin=True,
               extra="backend: memory\nworkers: 2\n" + extra).start()
    conns = [d.connection() for _ in range(4)]
    sent = {"a": 9, "b": 5, "c": 3}
    i = 0
    for key, n in sent.items():
        for _ in range(n):
            conns[i % 4].request("POST", "/check", headers=AUTH,
                                 body=json.dumps({"policy": "strict", "key": key}))
            conns[i % 4].getresponse().read()
            i += 1
    # A denied request's allowed check ("fresh") takes nothing: not used.
    conns[0].request("POST", "/check", headers=AUTH, body=json.dumps(
        {"checks": [{"policy": "strict", "key": "fresh", "cost": 1},
                    {"policy": "strict", "key": "a", "cost": 1}]}))
    conns[0].getresponse().read()
    for c in conns:
        c.close()
    # Limit 1: all but the first of each key denied, and "a" once more.
    want_denied = [{"key": "a", "count": 9, "error": 0}, {"key": "b", "count": 4, "error": 0},
                   {"key": "c", "count": 2, "error": 0}]
    r = wait_total(d, "strict", "denied", 15)
    harness.eq((r.status, r.json["total"], r.json["daemons"], r.json["keys"]),
               (200, 15, 1, want_denied),
               "memory, two workers: exact counts, errors 0, one daemon")
    r = top(d, "strict", "?by=used&window=10m&n=2")
    harness.eq((r.status, r.json["by"], r.json["window"], r.json["total"],
                [(e["key"], e["count"]) for e in r.json["keys"]]),
               (200, "used", "10m", 3, [("a", 1), ("b", 1)]),
               "memory: by=used counts admitted cost only; n=2 lists two")
    r = top(d, "strict", method="HEAD")
    harness.eq((r.status, r.body), (200, b""), "HEAD: 200, no body")
    errors(d)
    harness.eq(d.stop(), 0, "the memory daemon exits cleanly")


def errors(d):
    for query, what in (("?by=allowed", "by"), ("?window=5m", "window"), ("?n=0", "n 0"),
                        ("?n=101", "n 101"), ("?n=x", "n x"), ("?n=", "n empty")):
        r = top(d, "strict", query)
        harness.eq((r.status, r.json and r.json["error"]), (400, "invalid_query"),
                   "%s: 400 invalid_query" % what)
    r = top(d, "nosuch")
    harness.eq((r.status, r.json and r.json["error"]), (404, "unknown_policy"),
               "an unknown policy: 404 unknown_policy")
    r = top(d, "strict/more")
    harness.eq((r.status, r.json and r.json["error"]), (400, "invalid_path"),
               "a segment after the policy: 400 invalid_path")
    r = top(d, "strict", method="DELETE")
    harness.eq((r.status, r.headers.get("allow")), (405, "GET, HEAD"), "DELETE: 405, Allow")
    r = top(d, "strict", headers={})
    harness.eq(r.status, 401, "no bearer token: 401")


def main():
    extra = "auth_token_file: %s\n" % harness.token_file(TOKEN)
    memory(extra)
    redis = harness.RedisServer().start()
    daemons = fleet(redis, extra)
    windows(daemons[0], redis)
    redis.stop()
    r = top(daemons[0], "strict")
    harness.eq((r.status, r.json and r.json["error"], r.headers.get("retry-after")),
               (503, "backend_unavailable", "1"), "Redis stopped: 503 backend_unavailable")
    cluster(extra)
    for d in daemons:
        harness.eq(d.stop(), 0, "a fleet daemon exits cleanly")
    harness.done()


if __name__ == "__main__":
    harness.run(main)
