# SPDX-License-Identifier: Apache-2.0
"""test_http.py: the daemon end to end over HTTP against a real Redis:
decisions, headers, multi-tier and multi-check atomicity, dry_run, cost,
shadow, every request error, key isolation, expiry of every key, NOSCRIPT."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

POLICY = """max_body: 2048
policies:
  login:
    failure_mode: closed
    # A token each 720 s: the 11 calls below cannot see one refill, however
    # slowly the daemon (valgrind) answers them.
    tiers:
      - {name: burst, algorithm: token_bucket, limit: 5, window: 1h, burst: 10}
      - {name: hourly, algorithm: sliding_window_log, limit: 100, window: 1h}
  two:
    tiers:
      - {name: wide, algorithm: fixed_window, limit: 100, window: 1h}
      - {name: narrow, algorithm: fixed_window, limit: 2, window: 1h}
  global:
    tiers:
      - {name: all, algorithm: fixed_window, limit: 100, window: 1h}
  user:
    tiers:
      - {name: one, algorithm: fixed_window, limit: 1, window: 1h}
  iso:
    tiers:
      - {name: one, algorithm: fixed_window, limit: 1, window: 1h}
  shadowed:
    shadow: true
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1, window: 1h}
  shaped:
    tiers:
      # One request drains per hour: the 4 calls below cannot see a drain.
      - {name: q, algorithm: leaky_bucket, limit: 1, window: 1h, burst: 2}
  every:
    tiers:
      - {name: fw, algorithm: fixed_window, limit: 50, window: 1m}
      - {name: swl, algorithm: sliding_window_log, limit: 50, window: 1m}
      - {name: swc, algorithm: sliding_window_counter, limit: 50, window: 1m}
      - {name: swb, algorithm: sliding_window_buckets, limit: 50, window: 1m, precision: 1s}
      - {name: tb, algorithm: token_bucket, limit: 50, window: 1m}
      - {name: gcra, algorithm: gcra, limit: 50, window: 1m}
      - {name: lb, algorithm: leaky_bucket, limit: 50, window: 1m, burst: 50}
"""


def all_keys(r):
    return sorted(r.command("KEYS", "*"))


def test_login_example(d):
    first = d.check("login", "ip:1.2.3.4")
    harness.eq(first.status, 200, "first call allowed")
    j = first.json
    harness.eq(sorted(j), ["allowed", "checks", "limit", "remaining", "reset_ms",
                           "retry_after_ms"], "top-level fields")
    harness.eq((j["allowed"], j["limit"], j["remaining"], j["retry_after_ms"]),
               (True, 10, 9, 0), "figures of the binding tier (burst)")
    harness.eq(j["reset_ms"], 720000, "reset_ms: one token refills in 720 s")
    t = j["checks"][0]["tiers"]
    harness.eq([x["name"] for x in t], ["burst", "hourly"], "every tier reported, in order")
    harness.eq((t[1]["algorithm"], t[1]["limit"], t[1]["remaining"]),
               ("sliding_window_log", 100, 99), "the hourly tier's figures")
    harness.eq((first.headers.get("x-ratelimit-limit"), first.headers.get("x-ratelimit-remaining"),
                first.headers.get("x-ratelimit-reset")), ("10", "9", "720"), "X-RateLimit-* headers")
    harness.eq(first.headers.get("content-type"), "application/json", "JSON content type")
    statuses = [first.status] + [d.check("login", "ip:1.2.3.4").status for _ in range(10)]
    harness.eq(statuses, [200] * 10 + [429], "of 11 calls back to back the 11th is a 429")
    last = d.check("login", "ip:1.2.3.4")
    harness.eq(last.json["allowed"], False, "allowed:false")
    harness.ok(0 < last.json["retry_after_ms"] <= 720000, "retry_after_ms within one token (%r)"
               % last.json["retry_after_ms"])
    harness.eq(last.headers.get("retry-after"), str(-(-last.json["retry_after_ms"] // 1000)),
               "429 carries Retry-After: retry_after_ms in seconds, rounded up")
    harness.eq(last.json["checks"][0]["tiers"][1]["remaining"], 90,
               "denied calls consumed nothing in the other tier")


def test_atomicity(d, r):
    d.check("two", "a")
    d.check("two", "a")
    third = d.check("two", "a")
    harness.eq(third.status, 429, "the narrow tier denies the third call")
    harness.eq([t["allowed"] for t in third.json["checks"][0]["tiers"]], [True, False],
               "the wide tier alone would allow it")
    wide = [k for k in all_keys(r) if k.startswith("rl:{two:a}:wide")]
    harness.eq(harness.fixed_window_count(r, wide[0]) if wide else None, "2",
               "multi-tier: the denied call consumed nothing in the wide tier")

    checks = [{"policy": "global", "key": "all"}, {"policy": "user", "key": "u42"}]
    harness.eq(d.check(checks=checks).status, 200, "multi-check: first allowed")
    denied = d.check(checks=checks)
    harness.eq(denied.status, 429, "multi-check: user denies the second")
    harness.eq([c["allowed"] for c in denied.json["checks"]], [True, False],
               "the global check allowed on its own, the user check denied")
    harness.eq(harness.fixed_window_count(r, "rl:{global:all}:all"), "1",
               "multi-check: nothing consumed in global by the denied request")
    harness.eq(denied.json["checks"][0]["tiers"][0]["remaining"], 99,
               "global's figures show nothing taken")
    dup = d.check(checks=[{"policy": "global", "key": "dup", "cost": 2},
                          {"policy": "global", "key": "dup", "cost": 3}])
    harness.eq((len(dup.json["checks"]), dup.json["remaining"]), (1, 95),
               "the same policy and key twice count as one check with the costs added")


def test_dry_run_and_cost(d, r):
    before = all_keys(r)
    dry = d.check("global", "dry", cost=7, dry_run=True)
    harness.eq((dry.status, dry.json["remaining"], dry.json.get("dry_run")), (200, 93, True),
               "dry_run reports what the request would leave")
    harness.eq(all_keys(r), before, "dry_run writes nothing")
    d.check("global", "dry", cost=7)
    harness.eq(harness.fixed_window_count(r, "rl:{global:dry}:all"), "7", "cost 7 consumes 7")
    zero = d.check("global", "dry", cost=0)
    harness.eq((zero.status, zero.json["remaining"]), (200, 93), "cost 0 consumes nothing")
    big = d.check("global", "dry", cost=101)
    harness.eq(big.status, 429, "a cost above the capacity is denied")
    harness.eq((big.json["retry_after_ms"], big.json["checks"][0]["tiers"][0].get("reason")),
               (None, "cost_exceeds_limit"), "with retry_after_ms null and its reason")
    harness.ok("retry-after" not in big.headers, "and no Retry-After header")
    harness.eq(harness.fixed_window_count(r, "rl:{global:dry}:all"), "7", "and consumes nothing")
    dry_denied = d.check(checks=[{"policy": "user", "key": "dd"}], dry_run=True)
    harness.eq(dry_denied.status, 200, "dry_run of an allowed request answers 200")
    harness.eq(d.check("user", "dd").status, 200, "and really took nothing")


def test_shadow_and_leaky(d):
    d.check("shadowed", "s")
    s = d.check("shadowed", "s")
    harness.eq((s.status, s.json["allowed"], s.json.get("shadow_denied")), (200, True, True),
               "a shadow policy that would deny answers allowed with shadow_denied")
    harness.eq(s.json["checks"][0]["tiers"][0]["allowed"], False, "its tier shows the denial")
    delays = [d.check("shaped", "q").json for _ in range(4)]
    # Wall-clock time passes between the calls: allow 10 s of it.
    got = [x.get("delay_ms") for x in delays[:3]]
    hour = 3600000
    harness.ok(got[0] == 0 and hour - 10000 < got[1] <= hour
               and 2 * hour - 10000 < got[2] <= 2 * hour,
               "leaky_bucket: delay_ms grows one interval per queued request: %r" % got)
    harness.eq((delays[3]["allowed"], delays[3]["limit"]), (False, 3),
               "past the queue: denied; capacity burst + 1")
    harness.ok(hour - 10000 < delays[3]["retry_after_ms"] <= hour,
               "retry when the next slot frees: %r" % delays[3]["retry_after_ms"])


def test_errors(d):
    cases = [
        ("{", 400, "invalid_json"),
        ("[]", 400, "invalid_request"),
        ('{"key":"a"}', 400, "missing_field"),
        ('{"policy":"login","key":1}', 400, "invalid_type"),
        ('{"policy":"login","key":"a","colour":1}', 400, "unknown_field"),
        ('{"policy":"nope","key":"a"}', 400, "unknown_policy"),
        ('{"policy":"login","key":""}', 400, "invalid_key"),
        ('{"policy":"login","key":"%s"}' % ("k" * 1025), 400, "invalid_key"),
        ('{"policy":"login","key":"a\\u0000"}', 400, "invalid_key"),
        ('{"policy":"login","key":"a","cost":-1}', 400, "invalid_cost"),
        ('{"policy":"login","key":"a","cost":0.5}', 400, "invalid_cost"),
        ('{"policy":"login","key":"a","cost":1000000001}', 400, "invalid_cost"),
        ('{"checks":[]}', 400, "invalid_request"),
        ('{"checks":[{"policy":"login","key":"a"}],"policy":"login"}', 400, "invalid_request"),
    ]
    for body, status, code in cases:
        res = d.request("POST", "/check", body)
        harness.eq((res.status, (res.json or {}).get("error")), (status, code),
                   "%s -> %d %s" % (body[:60], status, code))
        harness.ok(isinstance((res.json or {}).get("message"), str), "with a message")
    res = d.request("POST", "/check", '{"policy":"login","key":"a","colour":1}')
    harness.ok("colour" in res.json["message"], "an unknown field is named")
    # Messages quote the caller's text cut at a byte count, which may fall
    # inside a UTF-8 character: still a clean 400.
    for body in ('{"policy":"a%s","key":"x"}' % ("\u00e9" * 40),
                 '{"policy":"login","key":"x","a%s":1}' % ("\u00e9" * 200)):
        res = d.request("POST", "/check", body)
        harness.ok(res.status == 400 and res.json and res.json["error"] in ("unknown_policy",
                                                                            "unknown_field"),
                   "a long multi-byte name in an error message: 400 (%d)" % res.status)
    for body, what in (('{"policy":"login","key":"\\udc00"}', "a lone surrogate escape"),
                       (b'{"policy":"login","key":"\xff\xfe"}', "invalid UTF-8 bytes")):
        res = d.request("POST", "/check", body)
        harness.eq((res.status, (res.json or {}).get("error")), (400, "invalid_json"),
                   "a key with %s is refused as invalid JSON" % what)
    res = d.request("GET", "/healthz", headers={"X-Big": "x" * 10000})
    harness.ok(res.status in (400, 431), "request headers over 8 KiB are refused (%d)" % res.status)
    res = d.request("POST", "/check", '{"policy":"login","key":"x","cost":123456789012345678901}')
    harness.eq((res.status, (res.json or {}).get("error")), (400, "invalid_cost"),
               "a cost beyond 64 bits is invalid_cost")
    big = d.request("POST", "/check", '{"policy":"login","key":"%s"}' % ("k" * 3000))
    harness.eq(big.status, 413, "a body over max_body is 413")
    huge = d.request("POST", "/check", "x" * (4 << 20))
    harness.eq(huge.status, 413, "a 4 MiB body is 413 too, not a reset")
    for method in ("GET", "PUT", "DELETE", "PATCH"):
        res = d.request(method, "/check")
        harness.eq((res.status, res.headers.get("allow"), (res.json or {}).get("error")),
                   (405, "POST", "method_not_allowed"), "%s /check is 405 with Allow: POST" % method)
    res = d.request("POST", "/nope", "{}")
    harness.eq((res.status, (res.json or {}).get("error")), (404, "not_found"), "other paths: 404")
    form = d.request("POST", "/check", '{"policy":"global","key":"form"}',
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    harness.eq(form.status, 200, "any Content-Type is accepted (curl -d)")
    harness.eq(d.request("GET", "/healthz").status, 200, "GET /healthz")
    harness.eq(d.request("GET", "/readyz").status, 200, "GET /readyz")


def test_key_isolation(d, r):
    hostile = ["a", "a}", "{a}", "a:b", "a b", "a%7D", "rl:", "rl:{global:a}:all", "*", "\r\n",
               "é", "\u00e9", "a\\", "%", "%25", "}{", "global:a"]
    for k in hostile:
        d.check("iso", k)
    seen = [k for k in all_keys(r) if k.startswith("rl:{iso:")]
    harness.eq(len(seen), len(set(hostile)), "each hostile key has its own Redis key")
    harness.ok(all(k.count("{") == 1 and k.count("}") == 1 for k in seen),
               "no caller key adds or breaks a hash tag")
    harness.ok(all(k.startswith("rl:") for k in all_keys(r)), "every key is under key_prefix")
    again = [d.check("iso", k).status for k in hostile]
    harness.eq(again, [429] * len(hostile), "and each one counted only its own request")


def test_expiry(d, r):
    for _ in range(3):
        d.check("every", "ttl")
    keys = all_keys(r)
    ttls = {k: int(r.command("PTTL", k)) for k in keys}
    harness.ok(all(t > 0 for t in ttls.values()),
               "every key written has an expiry (%s)" % [k for k, t in ttls.items() if t <= 0])
    every = {k: t for k, t in ttls.items() if k.startswith("rl:{every:ttl}")}
    harness.eq(len(every), 8, "each rate algorithm wrote its keys (log: two)")
    # A minute window: what matters ends within a minute (a bucket more for
    # the buckets); for sliding_window_counter, at the end of the next window.
    # Plus one second of slack.
    longest = {"swc": 120000 + 1000}
    over = {k: t for k, t in every.items()
            if t > longest.get(k.split(":")[-1], 61000 + 1000)}
    harness.eq(over, {}, "none lives longer than needed plus slack: %r" % every)


def test_noscript(d, r):
    r.command("SCRIPT", "FLUSH")
    res = d.check("global", "noscript")
    harness.eq((res.status, res.json.get("degraded")), (200, None),
               "after SCRIPT FLUSH the check is decided normally (NOSCRIPT reloaded)")
    harness.eq(harness.fixed_window_count(r, "rl:{global:noscript}:all"), "1", "and counted once")


def test_clock_local(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, clock="local", prefix="local:").start()
    res = d.check("login", "local")
    harness.eq((res.status, res.json["remaining"]), (200, 9), "clock: local decides too")
    harness.eq(d.stop(), 0, "SIGTERM exits 0")


def test_command_line(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY)
    ok = subprocess.run([BINARY, "--config", d.config, "--check-config"], capture_output=True)
    harness.eq(ok.returncode, 0, "--check-config on a valid file exits 0")
    d.write_config("policies:\n  p:\n    tiers:\n      - {name: t, algorithm: nope, limit: 1, window: 1s}\n")
    bad = subprocess.run([BINARY, "--config", d.config, "--check-config"], capture_output=True)
    harness.eq(bad.returncode, 1, "--check-config on an invalid file exits 1")
    harness.ok(d.config.encode() + b":" in bad.stderr and b"nope" in bad.stderr,
               "naming the file and what is wrong: %r" % bad.stderr)
    start = subprocess.run([BINARY, "--config", d.config], capture_output=True, timeout=10)
    harness.eq(start.returncode, 1, "an invalid file stops start-up with status 1")
    harness.eq(subprocess.run([BINARY, "--help"], capture_output=True).returncode, 0, "--help")
    v = subprocess.run([BINARY, "--version"], capture_output=True)
    harness.ok(v.returncode == 0 and v.stdout.startswith(b"ratelimitd "), "--version")
    harness.eq(subprocess.run([BINARY, "--bogus"], capture_output=True).returncode, 64,
               "an unknown option exits 64 (EX_USAGE)")


def main():
    if not BINARY:
        harness.bail_out("ratelimitd binary not found (set RATELIMITD)")
    redis = harness.RedisServer().start()
    r = redis.client()
    d = Daemon("unix:" + redis.socket_path, POLICY).start()
    test_login_example(d)
    test_atomicity(d, r)
    test_dry_run_and_cost(d, r)
    test_shadow_and_leaky(d)
    test_errors(d)
    test_key_isolation(d, r)
    test_expiry(d, r)
    test_noscript(d, r)
    harness.eq(d.stop(), 0, "SIGTERM exits 0")
    test_clock_local(redis)
    test_command_line(redis)


harness.run(main)
