# SPDX-License-Identifier: Apache-2.0
"""test_admin.py: the admin API on keys, against real redis-server and
daemons.

- GET /v1/keys/<policy>/<key> shows every tier's figures and consumes
  nothing, for every algorithm: repeated GETs report the same remaining,
  and the next real check finds every unit the GETs left.
- DELETE resets every tier: after a denial the key is allowed again with the
  full limit, its Redis keys (both of sliding_window_log's) are gone, and
  the deny cache of a SECOND daemon sharing the Redis, which was answering
  denials for the key, is cleared at once (it allows on the next call).
- The bearer-token rule (401 + WWW-Authenticate), 404, 400, 405 + Allow,
  HEAD; percent-encoded keys holding ':', '/', '%' and spaces; the admin
  paths only on the admin listener; the metric; GETs not counted as checks.
- The memory backend: GET and DELETE.
- Redis down: GET answers 503 (or, for a failure_mode local policy, the
  local figures, degraded), DELETE answers 503.
"""
import os
import signal
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import Daemon  # noqa: E402

TOKEN = "s3cret-admin-token"
AUTH = {"Authorization": "Bearer " + TOKEN}

# Capacity 3 for every algorithm, over an hour: nothing refills during the
# test, so the figures are exact.
ALGORITHMS = {
    "fixed_window": "limit: 3, window: 1h",
    "sliding_window_log": "limit: 3, window: 1h",
    "sliding_window_counter": "limit: 3, window: 1h",
    "sliding_window_buckets": "limit: 3, window: 1h, precision: 1m",
    "token_bucket": "limit: 3, window: 1h",
    "gcra": "limit: 3, window: 1h",
    "leaky_bucket": "limit: 3, window: 1h, burst: 2",
}
POLICY = "policies:\n" + "".join(
    "  %s: {tiers: [{name: t, algorithm: %s, %s}]}\n" % (a, a, args)
    for a, args in ALGORITHMS.items()) + (
    "  two:\n"
    "    tiers:\n"
    "      - {name: minute, algorithm: fixed_window, limit: 2, window: 1h}\n"
    "      - {name: hour, algorithm: sliding_window_log, limit: 5, window: 1h}\n"
    "  loc:\n"
    "    failure_mode: local\n"
    "    tiers: [{name: t, algorithm: fixed_window, limit: 3, window: 1h}]\n")


def keys_url(policy, key):
    return "/v1/keys/%s/%s" % (policy, urllib.parse.quote(key, safe=""))


def get(d, policy, key, method="GET", headers=AUTH):
    return d.request(method, keys_url(policy, key), headers=headers, port=d.admin_port)


def delete(d, policy, key):
    return get(d, policy, key, method="DELETE")


def metric(d, name, **labels):
    m = promtext.parse(d.admin("/metrics").body.decode())
    try:
        return promtext.value(m, name, **labels)
    except KeyError:
        return 0


def inspect_consumes_nothing(d, alg, backend="redis"):
    key = "look:" + alg
    name = "%s (%s)" % (alg, backend)
    for _ in range(2):
        d.check(alg, key, headers=AUTH)
    seen = [get(d, alg, key) for _ in range(3)]
    ok = all(r.status == 200 for r in seen)
    harness.ok(ok, "%s: GET answers 200" % name)
    if not ok:
        harness.diag(repr(seen))
        return
    tiers = [r.json["tiers"][0] for r in seen]
    harness.eq([t["remaining"] for t in tiers], [1, 1, 1],
               "%s: three GETs report remaining 1 each (nothing consumed)" % name)
    t = tiers[0]
    harness.eq((seen[0].json["policy"], seen[0].json["key"], t["name"], t["algorithm"],
                t["limit"], t["allowed"], t["retry_after_ms"]),
               (alg, key, "t", alg, 3, True, 0),
               "%s: the figures of a key with one unit left" % name)
    harness.eq("delay_ms" in t, alg == "leaky_bucket",
               "%s: delay_ms only for leaky_bucket" % name)
    r = d.check(alg, key, headers=AUTH)
    harness.eq((r.status, r.json["remaining"]), (200, 0),
               "%s: the next check still finds the unit the GETs left" % name)
    r = get(d, alg, key)
    t = r.json["tiers"][0]
    harness.ok(r.status == 200 and not r.json["allowed"] and t["remaining"] == 0
               and not t["allowed"] and t["retry_after_ms"] > 0,
               "%s: an exhausted key: allowed false, remaining 0, a retry time (%r)" % (name, t))


def wait_subscribed(redis, n):
    with redis.client() as c:
        harness.wait_until(lambda: c.command("PUBSUB", "NUMSUB", "rl:reset")[1] == n,
                           what="%d reset listeners subscribed" % n)


def reset_clears_second_cache(a, b, redis, alg):
    key = "user:%s/1" % alg
    for _ in range(3):
        a.check(alg, key, headers=AUTH)
    denied = [d.check(alg, key, headers=AUTH).status for d in (a, b, a, b)]
    harness.eq(denied, [429] * 4, "%s: the key is denied on both daemons" % alg)
    hits = metric(b, "ratelimitd_deny_cache_hits_total")
    r = b.check(alg, key, headers=AUTH)
    harness.ok(r.status == 429 and metric(b, "ratelimitd_deny_cache_hits_total") > hits,
               "%s: the second daemon answers the denial from its deny cache" % alg)
    r = delete(a, alg, key)
    harness.ok(r.status == 200 and r.json["reset"] is True and r.json["key"] == key
               and r.json["deleted"] >= 1 and r.json["notified"] == 2,
               "%s: DELETE through the first daemon resets (%r)" % (alg, r.json))
    with redis.client() as c:
        left = c.command("KEYS", "rl:{%s:*" % alg)
    harness.eq([k for k in left if "%s/1" % alg in k], [],
               "%s: no Redis key of the reset key is left" % alg)
    r = b.check(alg, key, headers=AUTH)
    harness.eq((r.status, r.json and r.json["remaining"]), (200, 2),
               "%s: the second daemon allows at once, with the full limit" % alg)
    r = a.check(alg, key, headers=AUTH)
    harness.eq((r.status, r.json and r.json["remaining"]), (200, 1),
               "%s: and the first counts on from there" % alg)


def errors(d):
    r = get(d, "two", "k", headers={})
    harness.eq((r.status, r.headers.get("www-authenticate")), (401, "Bearer"),
               "no token: 401 with WWW-Authenticate: Bearer")
    r = delete_with(d, "two", "k", {"Authorization": "Bearer wrong"})
    harness.eq(r.status, 401, "a wrong token: 401 (DELETE)")
    r = get(d, "nope", "k")
    harness.eq((r.status, r.json["error"]), (404, "unknown_policy"), "unknown policy: 404")
    r = d.request("GET", "/v1/keys/two/a%zzb", headers=AUTH, port=d.admin_port)
    harness.eq((r.status, r.json["error"]), (400, "invalid_path"), "a bad escape: 400")
    r = d.request("GET", "/v1/keys/two/a%00b", headers=AUTH, port=d.admin_port)
    harness.eq((r.status, r.json["error"]), (400, "invalid_key"), "an escaped NUL: 400")
    r = get(d, "two", "x" * 1025)
    harness.eq((r.status, r.json["error"]), (400, "invalid_key"), "a key over 1024 bytes: 400")
    r = get(d, "two", "x" * 1024)
    harness.eq(r.status, 200, "a key of 1024 bytes: 200")
    r = d.request("GET", "/v1/keys/two", headers=AUTH, port=d.admin_port)
    harness.eq((r.status, r.json["error"]), (400, "invalid_path"), "no key segment: 400")
    r = get(d, "two", "k", method="POST")
    harness.eq((r.status, r.headers.get("allow")), (405, "GET, HEAD, DELETE"),
               "POST: 405 with Allow")
    r = get(d, "two", "k", method="HEAD")
    harness.eq((r.status, r.body), (200, b""), "HEAD: 200 without a body")
    r = d.request("GET", keys_url("two", "k"), headers=AUTH)
    harness.eq(r.status, 404, "not on the check listener when admin_listen is set")


def delete_with(d, policy, key, headers):
    return d.request("DELETE", keys_url(policy, key), headers=headers, port=d.admin_port)


def encoded_keys(d, redis):
    key = "tenant:a/b 100%"
    for _ in range(2):
        d.check("two", key, headers=AUTH)
    r = d.request("GET", "/v1/keys/two/tenant%3Aa%2Fb%20100%25", headers=AUTH,
                  port=d.admin_port)
    harness.eq((r.status, r.json and r.json["key"],
                r.json and [t["remaining"] for t in r.json["tiers"]]),
               (200, key, [0, 3]),
               "a key with ':', '/', ' ' and '%', percent-encoded: every tier's figures")
    # A raw '/' after the policy is part of the key, as %2F is.
    r = d.request("GET", "/v1/keys/two/tenant%3Aa/b%20100%25", headers=AUTH, port=d.admin_port)
    harness.eq((r.status, r.json and r.json["key"]), (200, key), "a raw '/' in the key")
    r = delete(d, "two", key)
    # fixed_window: one key; sliding_window_log: the set and its counter.
    harness.eq((r.status, r.json["deleted"]), (200, 3),
               "DELETE removes every Redis key of every tier (3 here)")
    r = get(d, "two", key)
    harness.eq([t["remaining"] for t in r.json["tiers"]], [2, 5], "every tier is full again")


def memory_backend():
    d = Daemon("unix:/nonexistent", POLICY, admin=True,
               extra="backend: memory\nauth_token_file: %s\n" % harness.token_file(TOKEN)).start()
    for alg in ALGORITHMS:
        inspect_consumes_nothing(d, alg, "memory")
    for _ in range(3):
        d.check("gcra", "m", headers=AUTH)
    r = get(d, "gcra", "m")
    harness.eq((r.status, r.json["tiers"][0]["remaining"], r.json["allowed"]), (200, 0, False),
               "memory: GET shows the exhausted key")
    r = delete(d, "gcra", "m")
    harness.eq((r.status, r.json.get("deleted"), "notified" in r.json), (200, 1, False),
               "memory: DELETE resets (one entry, no listeners to notify)")
    r = d.check("gcra", "m", headers=AUTH)
    harness.eq((r.status, r.json["remaining"]), (200, 2), "memory: allowed with the full limit")
    log = d.logs()
    harness.ok('msg="key reset" policy=gcra key=m deleted=1 peer=127.0.0.1' in log,
               "the reset is logged with policy, key and peer")
    d.stop()


def redis_down(d, redis):
    d.check("loc", "k", headers=AUTH)
    redis.stop()
    harness.wait_until(lambda: d.admin("/readyz").status == 503, what="the daemon sees Redis gone")
    r = get(d, "two", "k")
    harness.eq((r.status, r.json["error"], r.headers.get("retry-after")),
               (503, "backend_unavailable", "1"), "Redis down: GET answers 503")
    r = delete(d, "two", "k")
    harness.eq((r.status, r.json["error"]), (503, "backend_unavailable"),
               "Redis down: DELETE answers 503")
    r = get(d, "loc", "k")
    harness.ok(r.status == 200 and r.json.get("degraded") is True and r.json.get("local") is True,
               "Redis down, failure_mode local: GET shows this daemon's local figures (%r)"
               % (r.json,))


def listener_follows(b, redis, extra):
    """The reset listener follows a reload that changes key_prefix, and
    comes back after Redis restarts."""
    b.write_config(POLICY, timeout="2s", extra=extra, prefix="rl2:")
    b.send_signal(signal.SIGHUP)
    with redis.client() as c:
        harness.wait_until(lambda: c.command("PUBSUB", "NUMSUB", "rl2:reset")[1] == 1,
                           what="the listener on the new prefix's channel")
        harness.eq(c.command("PUBSUB", "NUMSUB", "rl:reset")[1], 1,
                   "after a reload to key_prefix rl2:, the daemon listens on rl2:reset only")
    redis.restart()

    def both():
        with redis.client() as c:
            return [c.command("PUBSUB", "NUMSUB", ch)[1] for ch in ("rl:reset", "rl2:reset")]
    try:
        harness.wait_until(lambda: both() == [1, 1], what="both listeners back")
    except TimeoutError:
        pass
    harness.eq(both(), [1, 1], "both listeners subscribe again after Redis restarts")


def main():
    redis = harness.RedisServer().start()
    url = "unix:" + redis.socket_path
    extra = "auth_token_file: %s\n" % harness.token_file(TOKEN)
    a = Daemon(url, POLICY, timeout="2s", admin=True, extra=extra).start()
    b = Daemon(url, POLICY, timeout="2s", admin=True, extra=extra).start()
    wait_subscribed(redis, 2)

    checks_before = metric(a, "ratelimitd_checks_total", policy="two", decision="allowed")
    for alg in ALGORITHMS:
        inspect_consumes_nothing(a, alg)
    harness.eq(metric(a, "ratelimitd_checks_total", policy="two", decision="allowed"),
               checks_before, "GETs are not counted as checks")
    for alg in ALGORITHMS:
        reset_clears_second_cache(a, b, redis, alg)
    harness.eq(metric(a, "ratelimitd_key_resets_total"), len(ALGORITHMS),
               "ratelimitd_key_resets_total counts the resets")
    errors(a)
    encoded_keys(a, redis)
    memory_backend()
    listener_follows(b, redis, extra)
    harness.wait_until(lambda: a.admin("/readyz").status == 200, what="the daemon ready again")
    redis_down(a, redis)
    b.stop()
    harness.eq(a.stop(), 0, "the daemon exits cleanly")
    harness.done()


if __name__ == "__main__":
    harness.run(main)
