# SPDX-License-Identifier: Apache-2.0
"""test_rls_modes.py: envoyproxy/ratelimit's quota mode and its global
switches in ratelimitd's Envoy service, over gRPC (Redis and backend: memory,
whose answer comes within the call) and POST /json:

- quota_mode descriptors: reported OVER_LIMIT in their status, but the call
  is OVER_LIMIT only when a normal descriptor is over or every quota
  descriptor of it is (envoyproxy/ratelimit's rule); what an allowed call
  takes: every descriptor that allowed, and nothing from a quota descriptor
  that is over (it takes nothing, as a shadow one); a denied call takes
  nothing anywhere; a shadow descriptor left out of the second round is
  still counted shadow_over_limit in the metrics, and a check decided in
  both rounds is counted once in ratelimitd_checks_total;
- shadow_mode on a quota descriptor: never over; a per-request limit
  override is never a quota descriptor; hits_addend (0, over the limit)
  with quota descriptors;
- envoy_shadow_mode (file, --envoy-shadow-mode, SIGHUP): the overall code is
  never OVER_LIMIT, statuses still say OVER_LIMIT, no Retry-After, what
  allowed is taken; /check is not affected;
- envoy_quota_mode (file, --envoy-quota-mode): every descriptor but an
  unlimited one is a quota descriptor (an unmatched one is one that is never
  over, as in envoyproxy/ratelimit), overrides included.
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import Daemon  # noqa: E402

import rls_client  # noqa: E402

rls_client.require()

OK, OVER = "OK", "OVER_LIMIT"
CODES = {rls_client.CODE_OK: OK, rls_client.CODE_OVER_LIMIT: OVER}
HOUR = 3

POLICY = """policies:
  two: {tiers: [{name: t, algorithm: gcra, limit: 2, window: 1h}]}
domains:
  - domain: q
    descriptors:
      - key: soft
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: soft2
        quota_mode: true
        rate_limit: {unit: hour, requests_per_unit: 4}
      - key: softpol
        quota_mode: true
        policy: two
      - key: softshadow
        quota_mode: true
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1}
      - key: hard
        rate_limit: {unit: hour, requests_per_unit: 3}
      - key: free
        rate_limit: {unlimited: true}
      - key: shade
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1}
"""


class Rls:
    def __init__(self, d, port, prefix):
        self.d = d
        self.prefix = prefix
        self.ch = rls_client.channel("127.0.0.1:%d" % port)

    def call(self, descs, hits_addend=0, domain="q"):
        """descs: ("key", "value") pairs, or dicts as rls_client takes."""
        ds = [d if isinstance(d, dict) else {"entries": [d]} for d in descs]
        return rls_client.should_rate_limit(self.ch, domain, ds, hits_addend)

    def close(self):
        self.ch.close()


def start(redis, extra="", args=(), prefix="rl-modes:"):
    port = harness.free_port()
    if redis is None:
        d = Daemon(None, POLICY, extra="backend: memory\ngrpc_listen: 127.0.0.1:%d\n%s" % (port, extra))
    else:
        d = Daemon("unix:" + redis.socket_path, POLICY, prefix=prefix, timeout="2s",
                   extra="grpc_listen: 127.0.0.1:%d\n%s" % (port, extra))
    d.start(args=args)
    return Rls(d, port, prefix)


def brief(r):
    """(overall, [(code, remaining)...])"""
    return (CODES[r.overall_code], [(CODES[s.code], s.limit_remaining) for s in r.statuses])


def test_quota(rls, tag):
    s, s2, h = ("soft", tag + "1"), ("soft2", tag + "1"), ("hard", tag + "1")
    got = [brief(rls.call([s])) for _ in range(3)]
    harness.eq(got, [(OK, [(OK, 1)]), (OK, [(OK, 0)]), (OVER, [(OVER, 0)])],
               "%s: one quota descriptor (2/hour): 2 OK, then OVER_LIMIT (every quota descriptor over)" % tag)

    s, s2 = ("soft", tag + "2"), ("soft2", tag + "2")
    got = [brief(rls.call([s, s2])) for _ in range(6)]
    harness.eq(got, [(OK, [(OK, 1), (OK, 3)]), (OK, [(OK, 0), (OK, 2)]),
                     (OK, [(OVER, 0), (OK, 1)]), (OK, [(OVER, 0), (OK, 0)]),
                     (OVER, [(OVER, 0), (OVER, 0)]), (OVER, [(OVER, 0), (OVER, 0)])],
               "%s: soft (2) + soft2 (4): OK while one of them allows; soft over takes nothing, "
               "soft2 is still taken; OVER_LIMIT once both are over" % tag)

    s, s2, h = ("soft", tag + "3"), ("soft2", tag + "3"), ("hard", tag + "3")
    rls.call([s])
    rls.call([s])
    r = rls.call([s, h])
    harness.eq(brief(r), (OVER, [(OVER, 0), (OK, 3)]),
               "%s: the only quota descriptor over, a normal one fine: OVER_LIMIT, the normal one "
               "not taken (3 left)" % tag)
    r = rls.call([s, s2, h])
    harness.eq(brief(r), (OK, [(OVER, 0), (OK, 3), (OK, 2)]),
               "%s: with another quota descriptor that allows: OK, soft2 and hard taken" % tag)
    harness.eq(brief(rls.call([h])), (OK, [(OK, 1)]), "%s: hard was taken once (1 left after this)" % tag)
    rls.call([h])
    r = rls.call([s2, h])
    harness.eq(brief(r), (OVER, [(OK, 3), (OVER, 0)]),
               "%s: a normal descriptor over: OVER_LIMIT whatever the quota ones say, soft2 not taken" % tag)

    p, p2 = ("softpol", tag + "4"), ("soft2", tag + "4")
    got = [brief(rls.call([p, p2])) for _ in range(3)]
    harness.eq([g[0] for g in got] + [got[2][1][0]], [OK, OK, OK, (OVER, 0)],
               "%s: a quota descriptor with policy: (gcra 2/hour) is a quota descriptor too" % tag)

    sh, s2 = ("softshadow", tag + "5"), ("soft2", tag + "5")
    got = [brief(rls.call([sh])) for _ in range(3)]
    harness.eq([g[0] for g in got], [OK, OK, OK], "%s: shadow_mode on a quota descriptor: never over" % tag)

    # hits_addend with quota descriptors.
    s, s2 = ("soft", tag + "6"), ("soft2", tag + "6")
    r = rls.call([{"entries": [s], "hits_addend": 3}, s2])
    harness.eq(brief(r), (OK, [(OVER, 2), (OK, 3)]),
               "%s: hits_addend 3 on soft (2): over, takes nothing (2 left); soft2 taken" % tag)
    rls.call([s, s])
    r = rls.call([{"entries": [s], "hits_addend": 0}])
    harness.eq(brief(r), (OK, [(OK, 0)]),
               "%s: hits_addend 0 on a quota descriptor at its limit: OK (a check, not over)" % tag)

    # A per-request limit override is never a quota descriptor.
    s, s2 = ("soft", tag + "7"), ("soft2", tag + "7")
    ov = {"entries": [s], "limit": (1, HOUR)}
    got = [brief(rls.call([ov, s2])) for _ in range(2)]
    harness.eq(got, [(OK, [(OK, 0), (OK, 3)]), (OVER, [(OVER, 0), (OK, 3)])],
               "%s: a limit override (1/hour) on a quota node is a normal limit: over it, OVER_LIMIT "
               "and soft2 not taken" % tag)
    ov = {"entries": [("softshadow", tag + "7")], "limit": (1, HOUR)}
    got = [brief(rls.call([ov])) for _ in range(2)]
    harness.eq([g[0] for g in got], [OK, OVER],
               "%s: a limit override on a shadow_mode quota node is neither: OVER_LIMIT when over" % tag)


def shadow_over_count(rls, key):
    """ratelimitd_rls_descriptors_total of domain q's descriptor key,
    result shadow_over_limit (0 when absent)."""
    m = promtext.parse(rls.d.admin("/metrics").body.decode())
    try:
        return promtext.value(m, "ratelimitd_rls_descriptors_total", domain="q",
                              descriptor=key, result="shadow_over_limit") or 0
    except KeyError:
        return 0


def test_quota_shadow_metric(rls, tag):
    """A shadow descriptor a shadow limit would deny, in a call that a quota
    descriptor denies at first and the second round allows: it is left out of
    the second round, and still counted shadow_over_limit."""
    s, s2, sh = ("soft", tag + "8"), ("soft2", tag + "8"), ("shade", tag + "8")
    rls.call([s])
    rls.call([s])
    rls.call([sh])
    before = shadow_over_count(rls, "shade")
    r = rls.call([s, s2, sh])
    harness.eq(brief(r), (OK, [(OVER, 0), (OK, 3), (OK, 0)]),
               "%s: soft over, soft2 fine, a shadow descriptor at its limit: OK" % tag)
    harness.eq(shadow_over_count(rls, "shade") - before, 1,
               "%s: the shadow descriptor left out of the second round is counted "
               "shadow_over_limit" % tag)


def checks_count(rls, policy, decision):
    """ratelimitd_checks_total of a named policy (0 when absent)."""
    m = promtext.parse(rls.d.admin("/metrics").body.decode())
    try:
        return promtext.value(m, "ratelimitd_checks_total", policy=policy,
                              decision=decision) or 0
    except KeyError:
        return 0


def test_quota_check_metric(rls, tag):
    """A call decided in two rounds counts each of its checks once in
    ratelimitd_checks_total: the second round's are the first's again."""
    s, p = ("soft", tag + "9"), ("softpol", tag + "9")
    rls.call([s])
    rls.call([s])
    allowed, denied = checks_count(rls, "two", "allowed"), checks_count(rls, "two", "denied")
    r = rls.call([s, p])
    harness.eq(brief(r)[0], OK, "%s: soft over, softpol (policy two) fine: OK" % tag)
    harness.eq((checks_count(rls, "two", "allowed") - allowed,
                checks_count(rls, "two", "denied") - denied), (1, 0),
               "%s: a call of two rounds counts policy two's check once, allowed" % tag)


def test_json(rls):
    body = {"domain": "q", "descriptors": [{"entries": [{"key": "soft", "value": "json"}]},
                                           {"entries": [{"key": "soft2", "value": "json"}]}]}
    for _ in range(2):
        rls.call([("soft", "json")])
    r = rls.d.request("POST", "/json", json.dumps(body))
    st = r.json["statuses"]
    harness.eq((r.status, r.json["overallCode"], st[0]["code"], st[1]["code"], st[1]["limitRemaining"]),
               (200, "OK", "OVER_LIMIT", "OK", 3),
               "POST /json: a quota descriptor over, another allowing: 200 OK, soft2 taken")
    names = [h["key"] for h in r.json.get("responseHeadersToAdd", [])]
    harness.ok("Retry-After" not in names, "an OK answer adds no Retry-After (%r)" % names)


def test_global_shadow(rls, how):
    k, h = ("hard", how + "a"), ("soft2", how + "a")
    got = [brief(rls.call([k])) for _ in range(4)]
    harness.eq(got, [(OK, [(OK, 2)]), (OK, [(OK, 1)]), (OK, [(OK, 0)]), (OK, [(OVER, 0)])],
               "%s: the global shadow mode: never OVER_LIMIT overall, the status still says OVER_LIMIT" % how)
    r = rls.call([k])
    harness.ok(all(x.key.lower() != "retry-after" for x in r.response_headers_to_add),
               "%s: no Retry-After on the OK answer" % how)
    r = rls.call([k, h])
    harness.eq(brief(r), (OK, [(OVER, 0), (OK, 3)]),
               "%s: with a descriptor over, the others are still taken (soft2: 3 left)" % how)
    ov = {"entries": [("hard", how + "ov")], "limit": (1, HOUR)}
    got = [brief(rls.call([ov])) for _ in range(2)]
    harness.eq(got, [(OK, [(OK, 0)]), (OK, [(OVER, 0)])], "%s: a limit override in shadow too" % how)
    big = {"entries": [("soft2", how + "big")], "hits_addend": 9}
    zero = {"entries": [("hard", how + "a")], "hits_addend": 0}
    r = rls.call([big, zero])
    harness.eq(brief(r), (OK, [(OVER, 4), (OK, 0)]),
               "%s: hits_addend 9 over a limit of 4 and a 0 at the limit: OK overall, the first "
               "OVER_LIMIT taking nothing, the 0 a check" % how)
    # /check is not Envoy's: its policies' own shadow rule only.
    c1 = rls.d.check(policy="two", key=how)
    c2 = rls.d.check(policy="two", key=how)
    c3 = rls.d.check(policy="two", key=how)
    harness.eq([c1.status, c2.status, c3.status], [200, 200, 429], "%s: /check still denies" % how)


def test_global_quota(rls, how):
    k, u = ("hard", how + "q"), ("nothing", "x")
    got = [brief(rls.call([k, ("soft2", how + "q")])) for _ in range(5)]
    harness.eq([g[0] for g in got], [OK] * 4 + [OVER],
               "%s: global quota mode: hard (3) + soft2 (4) are both quota descriptors: OK until "
               "both are over" % how)
    harness.eq(got[3][1], [(OVER, 0), (OK, 0)], "%s: hard's status says OVER_LIMIT on the 4th" % how)
    r = rls.call([k, u])
    harness.eq(brief(r), (OK, [(OVER, 0), (OK, 0)]),
               "%s: an unmatched descriptor is a quota descriptor never over: OK (as "
               "envoyproxy/ratelimit)" % how)
    r = rls.call([k, ("free", "x")])
    harness.eq(CODES[r.overall_code], OVER, "%s: an unlimited one is not: OVER_LIMIT" % how)
    ov = {"entries": [("hard", how + "ov")], "limit": (1, HOUR)}
    got = [brief(rls.call([ov])) for _ in range(2)]
    harness.eq([g[0] for g in got], [OK, OVER], "%s: an override alone, over: OVER_LIMIT" % how)


def reload_with(rls, extra):
    d = rls.d
    before = d.logs().count("policies reloaded")
    d.write_config(POLICY, extra="grpc_listen: 127.0.0.1:%d\n%s" % (rls_port(rls), extra),
                   prefix=rls.prefix, timeout="2s")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: d.logs().count("policies reloaded") > before, what="the reload")


def rls_port(rls):
    with open(rls.d.config) as f:
        for line in f:
            if line.startswith("grpc_listen:"):
                return int(line.rsplit(":", 1)[1])
    raise RuntimeError("no grpc_listen")


def stop(rls, what):
    rls.close()
    harness.eq(rls.d.stop(), 0, "%s: the daemon exits 0" % what)


def test_reloads(redis):
    """The switches in the file are applied by SIGHUP, on and off."""
    rls = start(redis, prefix="rl-modes-q:")
    for _ in range(4):
        r = rls.call([("hard", "rl")])
    harness.eq(CODES[r.overall_code], OVER, "without the switches: hard over is OVER_LIMIT")
    reload_with(rls, "envoy_quota_mode: true\n")
    r = rls.call([("hard", "rl"), ("soft2", "rl")])
    harness.eq(brief(r), (OK, [(OVER, 0), (OK, 3)]),
               "envoy_quota_mode: true applied by SIGHUP: hard over, soft2 allows: OK")
    reload_with(rls, "envoy_shadow_mode: true\n")
    harness.eq(CODES[rls.call([("hard", "rl")]).overall_code], OK,
               "envoy_shadow_mode: true applied by SIGHUP: OK")
    reload_with(rls, "")
    harness.eq(CODES[rls.call([("hard", "rl")]).overall_code], OVER, "and off again by SIGHUP")
    stop(rls, "reloads")


def run(test, redis, how, extra="", args=(), prefix="rl-modes:"):
    """test(rls, how) on a daemon of its own."""
    rls = start(redis, extra=extra, args=args, prefix=prefix)
    test(rls, how)
    return rls


def main():
    redis = harness.RedisServer().start()
    for backend in ("redis", "memory"):
        rls = run(test_quota, redis if backend == "redis" else None, backend)
        test_quota_shadow_metric(rls, backend)
        test_quota_check_metric(rls, backend)
        if backend == "redis":
            test_json(rls)
        stop(rls, backend)

    stop(run(test_global_shadow, redis, "file", extra="envoy_shadow_mode: true\n",
             prefix="rl-modes-sh:"), "envoy_shadow_mode")
    rls = run(test_global_shadow, None, "cli-memory", args=("--envoy-shadow-mode",))
    reload_with(rls, "backend: memory\n")
    harness.eq(brief(rls.call([("hard", "cli-memorya")])), (OK, [(OVER, 0)]),
               "--envoy-shadow-mode stays on across a reload of a file without it")
    stop(rls, "--envoy-shadow-mode")

    test_reloads(redis)

    stop(run(test_global_quota, redis, "file", extra="envoy_quota_mode: true\n",
             prefix="rl-modes-gq:"), "envoy_quota_mode")
    stop(run(test_global_quota, None, "cli-memory", args=("--envoy-quota-mode",)),
         "--envoy-quota-mode")


harness.run(main)
