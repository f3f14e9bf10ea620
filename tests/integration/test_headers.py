# SPDX-License-Identifier: Apache-2.0
"""test_headers.py: the header modes end to end against a real Redis. Every
answer's RateLimit-Policy and RateLimit are parsed with the strict RFC 9651
parser (sfv.py) and compared with the JSON body of the same answer: each
algorithm, allowed and denied, the per-policy override of the top-level
mode, a two-tier policy, and the failure_mode answers with Redis down."""
import math
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import sfv  # noqa: E402
from daemon import ALGORITHMS, BINARY, Daemon  # noqa: E402

LIMIT = 3


def algorithm_policies():
    out = []
    for name in sorted(ALGORITHMS):
        extra = ALGORITHMS[name].replace("99", "1")
        out.append("  %s:\n    tiers:\n      - {name: t, algorithm: %s, limit: %d, window: 1m%s}\n"
                   % (name, name, LIMIT, extra))
    return "".join(out)


POLICY = "headers: ietf\npolicies:\n" + algorithm_policies() + """  two:
    headers: both
    failure_mode: closed
    tiers:
      - {name: fast, algorithm: token_bucket, limit: 5, window: 1s, burst: 10}
      - {name: slow, algorithm: fixed_window, limit: 2, window: 1h}
  xr:
    headers: x-ratelimit
    tiers:
      - {name: t, algorithm: fixed_window, limit: 2, window: 1h}
  quiet:
    headers: none
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1, window: 1h}
  sub:
    tiers:
      - {name: t, algorithm: gcra, limit: 2, window: 250ms}
"""


def ceil_s(ms):
    return math.ceil(ms / 1000)


def policy_members(res, what):
    """The parsed RateLimit-Policy of res as [(name, q, w)], strictly."""
    text = res.headers.get("ratelimit-policy")
    if not harness.ok(text is not None, "%s: RateLimit-Policy present" % what):
        return []
    try:
        members = sfv.parse_list(text)
    except sfv.SFVError as e:
        harness.ok(False, "%s: RateLimit-Policy %r is not an RFC 9651 List: %s" % (what, text, e))
        return []
    out = []
    for bare, params in members:
        ok = isinstance(bare, str) and not isinstance(bare, sfv.Token) and \
            [k for k, _ in params] == ["q", "w"]
        harness.ok(ok, "%s: member %r is an sf-string with q and w" % (what, bare))
        p = dict(params)
        out.append((bare, p.get("q"), p.get("w")))
    return out


def limit_member(res, what):
    """The parsed RateLimit of res as (name, r, t), strictly, or None."""
    text = res.headers.get("ratelimit")
    if not harness.ok(text is not None, "%s: RateLimit present" % what):
        return None
    try:
        members = sfv.parse_list(text)
        sfv.parse_item(text)  # one member: also a valid Item
    except sfv.SFVError as e:
        harness.ok(False, "%s: RateLimit %r is not valid RFC 9651: %s" % (what, text, e))
        return None
    bare, params = members[0]
    harness.eq([k for k, _ in params], ["r", "t"], "%s: RateLimit parameters r and t" % what)
    p = dict(params)
    return (bare, p.get("r"), p.get("t"))


def expect_limit(res, name, what):
    """RateLimit agrees with the body: r the remaining, t the Retry-After
    when denied with a wait, else the reset in whole seconds, rounded up."""
    j = res.json
    if j["allowed"]:
        t = ceil_s(j["reset_ms"])
    else:
        t = int(res.headers["retry-after"])
    harness.eq(limit_member(res, what), (name, j["remaining"], t), "%s: RateLimit" % what)


def test_algorithms(d):
    for alg in sorted(ALGORITHMS):
        seen = set()
        # The window is a minute (w=60 is checked): calls that straddle a
        # minute would see fixed_window start again and never deny.
        answers = harness.in_one_window(
            60, lambda fresh: [d.check(alg, "k-" + fresh) for _ in range(LIMIT + 3)],
            "%s's %d calls" % (alg, LIMIT + 3))
        for i, res in enumerate(answers):
            what = "%s call %d (%d)" % (alg, i + 1, res.status)
            seen.add(res.status)
            harness.eq(policy_members(res, what), [(alg, LIMIT, 60)],
                       "%s: RateLimit-Policy \"%s\";q=%d;w=60" % (what, alg, LIMIT))
            expect_limit(res, alg, what)
            harness.ok("x-ratelimit-limit" not in res.headers,
                       "%s: no X-RateLimit-* under ietf" % what)
            if alg == "leaky_bucket" and res.status == 200:
                delay = res.json["delay_ms"]
                harness.eq(res.headers.get("x-ratelimit-delay-ms"), None,
                           "%s: no X-RateLimit-Delay-Ms under ietf (delay %d)" % (what, delay))
        harness.eq(seen, {200, 429}, "%s: allowed, then denied" % alg)


def test_two_tiers(d):
    for i in range(3):
        res = d.check("two", "k")
        what = "two call %d (%d)" % (i + 1, res.status)
        harness.eq(policy_members(res, what), [("two/fast", 5, 1), ("two/slow", 2, 3600)],
                   "%s: one member per tier, <policy>/<tier>, q the limit" % what)
        j = res.json
        binding = "two/slow" if j["limit"] == 2 else "two/fast"
        expect_limit(res, binding, what)
        harness.eq(res.headers.get("x-ratelimit-limit"), str(j["limit"]),
                   "%s: both: X-RateLimit-Limit too" % what)
    harness.eq(res.status, 429, "the third call to two is denied by slow")
    harness.eq(limit_member(res, "two denied")[0], "two/slow", "the denying tier is named")


def test_overrides(d):
    res = d.check("xr", "k")
    harness.ok("ratelimit" not in res.headers and "ratelimit-policy" not in res.headers,
               "headers: x-ratelimit in a policy overrides the top-level ietf")
    harness.eq(res.headers.get("x-ratelimit-limit"), "2", "and sends X-RateLimit-*")
    d.check("quiet", "k")
    res = d.check("quiet", "k")
    harness.eq(res.status, 429, "quiet denies the second call")
    harness.ok(not [h for h in res.headers if "ratelimit" in h],
               "headers: none sends no rate-limit field (%r)" % sorted(res.headers))
    harness.ok(res.headers.get("retry-after") is not None, "Retry-After stays under none")
    res = d.check("sub", "k")
    harness.eq(policy_members(res, "sub-second window"), [("sub", 2, 1)],
               "a 250ms window is w=1 (rounded up)")
    res = d.check(checks=[{"policy": "xr", "key": "m"}, {"policy": "quiet", "key": "m"}])
    harness.ok("x-ratelimit-limit" not in res.headers,
               "two checks: the binding check's policy (quiet, fewest remaining) decides")


def test_redis_down(redis, d):
    redis.proc.send_signal(signal.SIGKILL)
    redis.proc.wait()
    res = d.check("gcra", "down")
    harness.eq((res.status, res.json.get("degraded")), (200, True), "open: 200 degraded")
    harness.eq(policy_members(res, "open, Redis down"), [("gcra", LIMIT, 60)],
               "open: RateLimit-Policy from the config")
    harness.ok("ratelimit" not in res.headers, "open: no RateLimit (the state is unknown)")
    res = d.check("two", "down")
    harness.eq((res.status, res.headers.get("retry-after")), (503, "1"),
               "closed: 503 with Retry-After: 1")
    harness.eq(policy_members(res, "closed, Redis down"), [("two/fast", 5, 1), ("two/slow", 2, 3600)],
               "closed: RateLimit-Policy from the config")
    harness.eq(res.headers.get("x-ratelimit-limit"), "2",
               "closed: X-RateLimit-Limit of the slowest tier (2 per hour)")
    harness.ok("ratelimit" not in res.headers and "x-ratelimit-remaining" not in res.headers,
               "closed: no RateLimit, no X-RateLimit-Remaining")
    harness.eq(res.json["checks"][0]["failure_mode"], "closed", "checks[].failure_mode")


def main():
    if not BINARY:
        harness.bail_out("ratelimitd binary not found (set RATELIMITD)")
    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, POLICY).start()
    test_algorithms(d)
    test_two_tiers(d)
    test_overrides(d)
    test_redis_down(redis, d)
    harness.eq(d.stop(), 0, "SIGTERM exits 0")


harness.run(main)
