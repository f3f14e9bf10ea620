# SPDX-License-Identifier: Apache-2.0
"""test_rls_grpc.py: ratelimitd as Envoy's rate limit service, end to end.
A real gRPC client (Debian's python3-grpcio, messages built at test time
from the tree's proto/ by rls_client.py) calls
envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit on the real
daemon with a real Redis, and checks what Envoy would see:

- every algorithm behind a `policy:` descriptor, and every unit of
  envoyproxy/ratelimit's `rate_limit:`, admits exactly its limit, then
  OVER_LIMIT;
- two descriptors of one request are decided atomically: when one is over
  its limit the other loses nothing;
- hits_addend, request-level and per descriptor; unmatched descriptors and
  unknown domains; shadow_mode; unlimited; replaces;
- statuses' current_limit (as configured, or derived from the binding tier),
  limit_remaining and duration_until_reset; response_headers_to_add equal to
  /check's headers for the same policy and key (which also proves the key
  format: /check on the RLS key meets the same counter);
- failure modes with Redis stopped: open answers OK, closed UNAVAILABLE,
  local decides in memory;
- 200 concurrent streams on one connection; three daemons and 300 concurrent
  calls on one key admit exactly the limit;
- keys escape `%`, `|` and `=`; a shadow_mode copy shares its policy's
  counters; 65 descriptors are INVALID_ARGUMENT and the connection stays;
- conf/envoy/ (envoyproxy/ratelimit's format, unchanged) loaded with
  --envoy-config and answering as that project's README says; SIGHUP
  re-reads an envoy directory;
- docs/envoy.md's envoy.yaml: valid YAML, HTTP/2 to grpc_listen's port, and
  every descriptor its rate_limits actions make meets a limit of
  conf/ratelimitd.yaml and conf/envoy/.
"""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import ALGORITHMS, Daemon  # noqa: E402

import rls_client  # noqa: E402

rls_client.require()  # skips the whole test without python3-grpcio & co
grpc = rls_client.grpc

SRCDIR = os.environ.get("RL_SRCDIR", ".")
LIMIT = 5
UINT32_MAX = 4294967295
RATE_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                "ratelimit", "ratelimit-policy", "retry-after")
OK, OVER = "OK", "OVER_LIMIT"
UNITS = ("second", "minute", "hour", "day", "week", "month", "year")
UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800,
                "month": 30 * 86400, "year": 365 * 86400}


def policies(limit=LIMIT):
    out = ["policies:\n"]
    for name in sorted(ALGORITHMS):
        extra = ALGORITHMS[name].replace("99", str(limit - 1))
        out.append("  %s: {tiers: [{name: t, algorithm: %s, limit: %d, window: 1h%s}]}\n"
                   % (name, name, limit, extra))
    out.append("""\
  pair_a: {tiers: [{name: t, algorithm: fixed_window, limit: 2, window: 1h}]}
  pair_b: {tiers: [{name: t, algorithm: token_bucket, limit: 10, window: 1h}]}
  hits: {tiers: [{name: t, algorithm: sliding_window_log, limit: 5, window: 1h}]}
  persec: {tiers: [{name: burst, algorithm: token_bucket, limit: 10, window: 1s}]}
  tensec: {tiers: [{name: slow, algorithm: gcra, limit: 100, window: 10s}]}
  hdr: {tiers: [{name: t, algorithm: token_bucket, limit: 3, window: 1h}]}
  hdr_ietf:
    headers: ietf
    tiers: [{name: t, algorithm: gcra, limit: 3, window: 1h}]
  hdr_two:
    headers: both
    tiers:
      - {name: fast, algorithm: token_bucket, limit: 4, window: 1m}
      - {name: slow, algorithm: fixed_window, limit: 2, window: 1h}
  fm_open: {failure_mode: open, tiers: [{name: t, algorithm: fixed_window, limit: 3, window: 1h}]}
  fm_closed: {failure_mode: closed, tiers: [{name: t, algorithm: fixed_window, limit: 3, window: 1h}]}
  fm_local: {failure_mode: local, tiers: [{name: t, algorithm: fixed_window, limit: 3, window: 1h}]}
""")
    return "".join(out)


def domains():
    out = ["domains:\n  - domain: algos\n    descriptors:\n"]
    for name in sorted(ALGORITHMS):
        out.append("      - {key: algorithm, value: %s, policy: %s}\n" % (name, name))
    out.append("  - domain: units\n    descriptors:\n")
    # Keys without a value: one counter per value, so each run of
    # test_units counts on a value of its own.
    for u in UNITS:
        out.append("      - key: %s\n"
                   "        rate_limit: {name: per_%s, unit: %s, requests_per_unit: 3}\n"
                   % (u, u, u))
    out.append("""\
  - domain: edge
    descriptors:
      - {key: a, policy: pair_a}
      - {key: b, policy: pair_b}
      - {key: hits, policy: hits}
      - {key: persec, policy: persec}
      - {key: tensec, policy: tensec}
      - {key: hdr, policy: hdr}
      - {key: hdr_ietf, policy: hdr_ietf}
      - {key: hdr_two, policy: hdr_two}
      - key: shadow
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: shadow_policy
        shadow_mode: true
        policy: pair_a
      - key: health
        rate_limit: {unlimited: true}
      - key: tenant
        value: "beta*"
        rate_limit: {name: tenants, unit: hour, requests_per_unit: 1}
        descriptors:
          - key: user
            rate_limit:
              name: per_user
              unit: minute
              requests_per_unit: 3
              replaces: [{name: tenants}]
      - key: path
        value: /login
        rate_limit: {unit: hour, requests_per_unit: 2}
      - {key: fm, value: open, policy: fm_open}
      - {key: fm, value: closed, policy: fm_closed}
      - {key: fm, value: local, policy: fm_local}
""")
    return "".join(out)


def D(*pairs, hits=None):
    """One request descriptor: D(("k", "v"), ..., hits=N)."""
    return (list(pairs), hits)


class Rls:
    """A gRPC channel (one HTTP/2 connection) to a daemon's grpc_listen."""

    def __init__(self, port):
        self.channel = rls_client.channel("127.0.0.1:%d" % port)

    @staticmethod
    def _descriptors(descriptors):
        return [{"entries": e, "hits_addend": h} for e, h in descriptors]

    def call(self, domain, descriptors, hits_addend=0, timeout=10):
        """The RateLimitResponse, or grpc.RpcError."""
        return rls_client.should_rate_limit(self.channel, domain, self._descriptors(descriptors),
                                            hits_addend, timeout=timeout)

    def future(self, domain, descriptors, hits_addend=0, timeout=30):
        return rls_client.should_rate_limit_future(self.channel, domain,
                                                   self._descriptors(descriptors), hits_addend,
                                                   timeout=timeout)

    def close(self):
        self.channel.close()


CODES = {rls_client.CODE_UNKNOWN: "UNKNOWN", rls_client.CODE_OK: OK,
         rls_client.CODE_OVER_LIMIT: OVER}


def code(resp):
    return CODES[resp.overall_code]


def scode(status):
    return CODES[status.code]


def unit_name(n):
    return rls_client.UNITS.get(n, "UNKNOWN")


def headers(resp):
    return [(h.key.lower(), h.value) for h in resp.response_headers_to_add]


def seconds(duration):
    return duration.seconds + duration.nanos / 1e9


def rpc_code(fn):
    """The grpc.StatusCode fn() raised, or "OK"."""
    try:
        fn()
        return "OK"
    except grpc.RpcError as e:
        return e.code()


def admits(rls, domain, descs, n, hits_addend=0):
    """Sends n calls; the list of their overall codes."""
    return [code(rls.call(domain, descs, hits_addend)) for _ in range(n)]


# ------------------------------------------------------------------ cases


def test_algorithms(rls):
    for alg in sorted(ALGORITHMS):
        got = admits(rls, "algos", [D(("algorithm", alg))], LIMIT + 1)
        harness.eq(got, [OK] * LIMIT + [OVER], "%s: exactly %d OK, then OVER_LIMIT" % (alg, LIMIT))


def test_units(rls):
    def four_calls(u, fresh):
        desc = [D((u, "v-" + fresh))]
        return rls.call("units", desc), admits(rls, "units", desc, 3)

    for u in UNITS:
        # A second or a minute may end in the middle of the calls on a slow
        # box (valgrind); an hour or more is taken not to.
        if u in ("second", "minute"):
            first, rest = harness.in_one_window(UNIT_SECONDS[u], lambda fresh: four_calls(u, fresh),
                                                "rate_limit %s's 4 calls" % u)
        else:
            first, rest = four_calls(u, "once")
        st = first.statuses[0]
        harness.eq([code(first)] + rest, [OK, OK, OK, OVER], "rate_limit %s: 3 OK then OVER_LIMIT" % u)
        harness.eq((st.current_limit.requests_per_unit, unit_name(st.current_limit.unit),
                    st.current_limit.name),
                   (3, u.upper(), "per_" + u), "%s: current_limit as configured" % u)
        harness.eq(st.limit_remaining, 2, "%s: limit_remaining 2 after the first" % u)
        reset = seconds(st.duration_until_reset)
        harness.ok(0 < reset <= UNIT_SECONDS[u],
                   "%s: 0 < duration_until_reset %.3f <= %d s" % (u, reset, UNIT_SECONDS[u]))


def test_atomic_pair(rls):
    a, b = D(("a", "x")), D(("b", "x"))
    harness.eq(admits(rls, "edge", [a, b], 2), [OK, OK], "a (limit 2) + b (limit 10): 2 OK")
    r = rls.call("edge", [a, b])
    harness.eq((code(r), scode(r.statuses[0]), scode(r.statuses[1])), (OVER, OVER, OK),
               "third call: OVER_LIMIT, a's status OVER_LIMIT, b's OK")
    harness.eq(r.statuses[1].limit_remaining, 8, "b's remaining in the denied answer: 8 (none taken)")
    r = rls.call("edge", [b])
    harness.eq((code(r), r.statuses[0].limit_remaining), (OK, 7),
               "b alone afterwards: remaining 7, the denied call consumed nothing from b")
    # The same again, one denied request after another: b still loses nothing.
    for _ in range(3):
        rls.call("edge", [b, a])
    harness.eq(rls.call("edge", [b]).statuses[0].limit_remaining, 6,
               "three more denied a+b calls: b's remaining goes 7 -> 6 only by its own call")


def test_hits_addend(rls):
    d = D(("hits", "req"))
    r = rls.call("edge", [d], hits_addend=3)
    harness.eq((code(r), r.statuses[0].limit_remaining), (OK, 2), "request hits_addend 3 of 5: remaining 2")
    r = rls.call("edge", [d], hits_addend=3)
    harness.eq((code(r), r.statuses[0].limit_remaining), (OVER, 2),
               "hits_addend 3 more: OVER_LIMIT, remaining still 2")
    r = rls.call("edge", [d], hits_addend=2)
    harness.eq((code(r), r.statuses[0].limit_remaining), (OK, 0), "hits_addend 2: OK, remaining 0")
    # A descriptor's own hits_addend wins over the request's.
    r = rls.call("edge", [D(("hits", "desc"), hits=4)], hits_addend=1)
    harness.eq((code(r), r.statuses[0].limit_remaining), (OK, 1),
               "descriptor hits_addend 4 (request says 1): remaining 1")
    r = rls.call("edge", [D(("hits", "desc"), hits=2), D(("hits", "other"))], hits_addend=1)
    harness.eq((code(r), r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
               (OVER, 1, 5), "descriptor hits 2 over; its neighbour (request's 1) not taken either: 5 left")
    # hits_addend 0 is proto3's unset: 1.
    r = rls.call("edge", [D(("hits", "zero"))], hits_addend=0)
    harness.eq(r.statuses[0].limit_remaining, 4, "hits_addend 0 (unset) counts 1")
    r = rls.call("edge", [D(("hits", "big"))], hits_addend=6)
    harness.eq((code(r), r.statuses[0].limit_remaining), (OVER, 5),
               "hits_addend over the whole limit: OVER_LIMIT, nothing taken")


def test_unmatched(rls):
    r = rls.call("edge", [D(("nosuchkey", "v")), D(("a", "unmatched-neighbour"))])
    s = r.statuses
    harness.eq((code(r), len(s), scode(s[0]), s[0].HasField("current_limit"), s[0].limit_remaining),
               (OK, 2, OK, False, 0), "unmatched descriptor: OK, no current_limit, remaining 0")
    harness.eq((scode(s[1]), s[1].limit_remaining), (OK, 1), "its matched neighbour is decided")
    r = rls.call("nosuchdomain", [D(("a", "x")), D(("b", "y"))])
    harness.eq((code(r), [scode(x) for x in r.statuses], [x.HasField("current_limit") for x in r.statuses]),
               (OK, [OK, OK], [False, False]), "unknown domain: OK for every descriptor")
    # A value given where the config wants another value: no match.
    r = rls.call("edge", [D(("path", "/other"))])
    harness.eq((code(r), r.statuses[0].HasField("current_limit")), (OK, False),
               "path=/other does not match path=/login")
    # A limit applies at the depth of the request's last entry only.
    got = admits(rls, "edge", [D(("path", "/login"), ("extra", "1"))], 3)
    harness.eq(got, [OK, OK, OK], "path=/login + another entry: the /login limit (2) does not apply")
    harness.eq(admits(rls, "edge", [D(("path", "/login"))], 3), [OK, OK, OVER],
               "path=/login alone: limit 2")


def test_shadow(rls):
    got = []
    for _ in range(4):
        r = rls.call("edge", [D(("shadow", "s"))])
        got.append((code(r), scode(r.statuses[0]), r.statuses[0].limit_remaining))
    harness.eq(got, [(OK, OK, 1), (OK, OK, 0), (OK, OK, 0), (OK, OK, 0)],
               "shadow_mode rate_limit 2/hour: always OK, remaining counts down to 0")
    got = [code(rls.call("edge", [D(("shadow_policy", "s"))])) for _ in range(3)]
    harness.eq(got, [OK, OK, OK], "shadow_mode policy: pair_a (limit 2): 3 calls OK")
    # The shadow copy shares the named policy's counters (same name, same
    # Redis keys): a non-shadow descriptor of the same key is not involved,
    # but a shadow over-limit never blocks its neighbour.
    r = rls.call("edge", [D(("shadow", "s")), D(("b", "shadow-neighbour"))])
    harness.eq((code(r), r.statuses[1].limit_remaining), (OK, 9),
               "shadow over-limit next to b: OK, b consumed")


def test_unlimited(rls):
    for i in range(3):
        r = rls.call("edge", [D(("health", "x"))])
    s = r.statuses[0]
    harness.eq((code(r), scode(s), s.limit_remaining, s.HasField("current_limit")),
               (OK, OK, UINT32_MAX, False), "unlimited: OK, limit_remaining UINT32_MAX, no current_limit")
    r = rls.call("edge", [D(("health", "x")), D(("a", "with-unlimited"))])
    harness.eq((code(r), r.statuses[1].limit_remaining), (OK, 1), "unlimited next to a limited one")


def test_replaces(rls):
    tenant, user = D(("tenant", "beta7")), D(("tenant", "beta7"), ("user", "u1"))
    got = []
    for _ in range(4):
        r = rls.call("edge", [tenant, user])
        got.append((code(r), scode(r.statuses[0]), r.statuses[0].HasField("current_limit")))
    harness.eq(got, [(OK, OK, False)] * 3 + [(OVER, OK, False)],
               "tenants (1/hour) replaced by per_user (3/minute): 3 OK then OVER_LIMIT; "
               "the replaced status is OK without current_limit")
    st = r.statuses[1]
    harness.eq((scode(st), st.current_limit.name, st.current_limit.requests_per_unit),
               (OVER, "per_user", 3), "per_user's status: OVER_LIMIT, its current_limit")
    harness.eq(admits(rls, "edge", [tenant], 2), [OK, OVER],
               "tenant alone: tenants (1/hour) untouched by the replaced calls: 1 OK then OVER")
    # Prefix: "beta*" matches beta-anything, not gamma.
    r = rls.call("edge", [D(("tenant", "gamma"))])
    harness.eq(r.statuses[0].HasField("current_limit"), False, "tenant=gamma: beta* does not match")


def test_derived_limit(rls):
    r = rls.call("edge", [D(("persec", "x")), D(("tensec", "x")), D(("a", "derived"))])
    want = [(10, "SECOND", "persec/burst"), (600, "MINUTE", "tensec/slow"), (2, "HOUR", "pair_a/t")]
    got = [(s.current_limit.requests_per_unit, unit_name(s.current_limit.unit),
            s.current_limit.name) for s in r.statuses]
    harness.eq(got, want, "current_limit of policy: descriptors: 10/1s -> 10/SECOND, "
               "100/10s -> 600/MINUTE, 2/1h -> 2/HOUR, named policy/tier")
    harness.eq([s.limit_remaining for s in r.statuses], [9, 99, 1], "their remaining")
    reset = [seconds(s.duration_until_reset) for s in r.statuses]
    harness.ok(0 <= reset[2] <= 3600, "fixed_window 1h: duration_until_reset %.1f s within the hour"
               % reset[2])


def test_headers_equal_check(rls, d):
    """A policy: descriptor k=v of domain edge is /check's policy with key
    "edge|k=v": a dry run of /check on that key just before each RLS call
    must show the headers the RLS call then sends (allowed, then denied),
    and a real /check afterwards meets the same counter."""
    for pol, limit in (("hdr", 3), ("hdr_ietf", 3), ("hdr_two", 2)):
        key = "edge|%s=v" % pol
        same, codes = True, []
        for i in range(limit + 2):
            c = d.check(pol, key, dry_run=True)
            want = [(k, v) for k, v in c.headers.items() if k in RATE_HEADERS]
            r = rls.call("edge", [D((pol, "v"))])
            got = [(k, v) for k, v in headers(r) if k in RATE_HEADERS]
            codes.append((c.status, code(r)))
            if not want or not same_headers(sorted(got), sorted(want)):
                same = False
                harness.diag("%s call %d: RLS %r, /check %r" % (pol, i, got, want))
        harness.eq(codes, [(200, OK)] * limit + [(429, OVER)] * 2,
                   "%s: /check's dry run and the RLS call agree: %d allowed, then denied" % (pol, limit))
        harness.ok(same, "%s: response_headers_to_add are /check's for the same key "
                   "(allowed and denied)" % pol)
        names = sorted({k for k, _ in headers(r)})
        harness.ok("retry-after" in names, "%s: the denied answer adds Retry-After (%r)" % (pol, names))
    # The counter is shared: /check on the RLS key sees what RLS took.
    key = "edge|hdr=w"
    rls.call("edge", [D(("hdr", "w"))])
    rls.call("edge", [D(("hdr", "w"))])
    c = d.check("hdr", key)
    harness.eq((c.status, c.json and c.json.get("remaining")), (200, 0),
               "/check on key %r after 2 RLS calls: the third of 3, remaining 0" % key)
    # `%`, `|` and `=` inside names and values are escaped in the key, so no
    # two descriptors meet one counter by accident.
    rls.call("edge", [D(("hdr", "x|y=z%"))])
    c = d.check("hdr", "edge|hdr=x%7Cy%3Dz%25", dry_run=True)
    harness.eq(c.json and c.json.get("remaining"), 1,
               "value 'x|y=z%%' is counted under key 'edge|hdr=x%%7Cy%%3Dz%%25'")
    r = rls.call("edge", [D(("hdr", "x"), ("y", "z"))])  # another node, not hdr=x|y=z
    harness.eq(r.statuses[0].HasField("current_limit"), False,
               "entries (hdr, x), (y, z) are not the value 'x|y=z'")
    # A shadow_mode copy of a policy shares its counters (same name, same
    # Redis keys): the shadow calls above took pair_a's 2 for their key.
    c = d.check("pair_a", "edge|shadow_policy=s", dry_run=True)
    harness.eq(c.status, 429, "/check pair_a on the shadow descriptor's key: the shadow calls took "
               "its 2 (shadow never denied them)")
    # Too many descriptors: INVALID_ARGUMENT, and the connection still works.
    got = rpc_code(lambda: rls.call("edge", [D(("b", "many%d" % i)) for i in range(65)]))
    harness.eq(got, grpc.StatusCode.INVALID_ARGUMENT, "65 descriptors: INVALID_ARGUMENT")
    harness.eq(code(rls.call("edge", [D(("b", "after-invalid"))])), OK,
               "the same connection answers the next call")


def same_headers(got, want):
    """Equal names in the same order, equal values except times, which may
    differ by 1 s (the two answers were taken a moment apart)."""
    if [k for k, _ in got] != [k for k, _ in want]:
        return False
    for (k, g), (_, w) in zip(got, want):
        if g == w:
            continue
        if k in ("x-ratelimit-reset", "retry-after") and g.isdigit() and w.isdigit():
            if abs(int(g) - int(w)) <= 1:
                continue
        if k == "ratelimit":  # '"t";r=1;t=3599': only t may move
            gh, _, gt = g.rpartition(";t=")
            wh, _, wt = w.rpartition(";t=")
            if gh == wh and gt.isdigit() and wt.isdigit() and abs(int(gt) - int(wt)) <= 1:
                continue
        return False
    return True


def outcomes(futures):
    """The overall code of each call, or the gRPC status code it failed with."""
    codes = []
    for f in futures:
        try:
            codes.append(code(f.result(timeout=60)))
        except grpc.RpcError as e:
            codes.append(str(e.code()))
    return codes


def test_limit_override(rls):
    """RateLimitDescriptor.limit, Envoy's per-request override: a fixed
    window of that limit for the descriptor, in a known domain."""
    def call(domain, limit, n, value="x"):
        desc = [{"entries": [("override", value)], "limit": limit}]
        return [rls_client.should_rate_limit(rls.channel, domain, desc) for _ in range(n)]

    got = harness.in_one_window(60, lambda fresh: call("edge", (2, 2), 3, "x-" + fresh),
                                "the 3 calls of 2 per MINUTE")
    harness.eq([(code(r), r.statuses[0].limit_remaining) for r in got],
               [(OK, 1), (OK, 0), (OVER, 0)], "a limit override of 2/minute: 2 OK, then OVER_LIMIT")
    st = got[0].statuses[0]
    harness.eq((st.current_limit.requests_per_unit, unit_name(st.current_limit.unit)), (2, "MINUTE"),
               "the override is the status's current_limit")
    harness.eq([code(r) for r in call("no_such_domain", (1, 3), 2)], [OK, OK],
               "no override in an unknown domain")
    got = call("edge", (0, 3), 2)  # 0 per HOUR
    harness.eq([(code(r), r.statuses[0].current_limit.requests_per_unit, r.statuses[0].limit_remaining)
                for r in got], [(OVER, 0, 0)] * 2,
               "an override of 0 requests denies every request, as a file's requests_per_unit: 0")
    harness.eq(rpc_code(lambda: call("edge", (1, 0), 1)), grpc.StatusCode.INVALID_ARGUMENT,
               "an override with unit UNKNOWN: INVALID_ARGUMENT")


def test_concurrent_streams(rls):
    """200 calls in flight at once on one channel (one HTTP/2 connection:
    the daemon's max concurrent streams queues the rest in the client)."""
    futs = [rls.future("edge", [D(("b", "stream%d" % (i % 20)))]) for i in range(200)]
    codes = outcomes(futs)
    harness.eq((codes.count(OK), codes.count(OVER), len(codes)), (200, 0, 200),
               "200 concurrent streams on one connection: every one answered, 10 per key of limit 10")
    r = rls.call("edge", [D(("b", "stream0"))])
    harness.eq(code(r), OVER, "and each key then over its limit (exactly 10 taken)")


def test_failure_modes(redis, rls):
    redis.stop()
    r = rls.call("edge", [D(("fm", "open"))])
    s = r.statuses[0]
    harness.eq((code(r), scode(s), s.HasField("current_limit")), (OK, OK, False),
               "Redis stopped, failure_mode open: OK, no current_limit")
    harness.eq(rpc_code(lambda: rls.call("edge", [D(("fm", "closed"))])), grpc.StatusCode.UNAVAILABLE,
               "failure_mode closed: UNAVAILABLE (Envoy's failure_mode_deny decides)")
    harness.eq(rpc_code(lambda: rls.call("edge", [D(("fm", "open")), D(("fm", "closed"))])),
               grpc.StatusCode.UNAVAILABLE, "open + closed in one request: the strictest, UNAVAILABLE")
    got = admits(rls, "edge", [D(("fm", "local"))], 4)
    harness.eq(got, [OK, OK, OK, OVER], "failure_mode local: decided in memory, 3 OK then OVER_LIMIT")
    redis.restart()
    got = harness.wait_until(lambda: code(rls.call("edge", [D(("fm", "closed"), ("after", "1"))])) == OK
                             or None, timeout=20, what="closed policy answering after Redis is back")
    harness.ok(got, "Redis back: closed policy answers again")


def test_many_daemons(redis):
    """Three daemons on one Redis, 300 concurrent calls on one key (100 a
    daemon, each over its own connection): for every algorithm, exactly the
    limit of 100 admitted (the buckets may refill one in the meantime)."""
    text = policies(limit=100) + domains()
    daemons = [Daemon("unix:" + redis.socket_path, text, timeout="2s", prefix="rl-many:",
                      extra="grpc_listen: 127.0.0.1:%d\n" % harness.free_port()).start()
               for _ in range(3)]
    clients = [Rls(grpc_port(d)) for d in daemons]
    for alg in sorted(ALGORITHMS):
        key = D(("algorithm", alg))
        t0 = time.monotonic()
        futs = [clients[i % 3].future("algos", [key], 0) for i in range(300)]
        codes = outcomes(futs)
        refill = int((time.monotonic() - t0) * 100 / 3600) + 1 \
            if alg in ("token_bucket", "gcra", "leaky_bucket") else 0
        n = codes.count(OK)
        harness.ok(100 <= n <= 100 + refill and codes.count(OVER) == 300 - n,
                   "%s: 3 daemons, 300 concurrent calls on one key: %d OK (limit 100, refill %d), "
                   "the rest OVER_LIMIT" % (alg, n, refill))
    for c in clients:
        c.close()
    for d in daemons:
        harness.eq(d.stop(), 0, "daemon exits 0")


def grpc_port(d):
    with open(d.config) as f:
        for line in f:
            if line.startswith("grpc_listen:"):
                return int(line.rsplit(":", 1)[1])
    raise RuntimeError("no grpc_listen in " + d.config)


def burst(rls, domain, descs, n):
    """n calls at once, started just after a second begins (per-second
    limits: Redis TIME and this clock are the box's); their overall codes,
    or None when they did not all finish within that second."""
    time.sleep(1.02 - time.time() % 1.0)
    start = int(time.time())
    futs = [rls.future(domain, descs) for _ in range(n)]
    codes = outcomes(futs)
    return codes if int(time.time()) == start else None


def limit_fields(status):
    cl = status.current_limit
    return (cl.requests_per_unit, unit_name(cl.unit), cl.name) if status.HasField("current_limit") else None


def test_envoy_examples(redis):
    """conf/envoy/ as shipped, loaded with --envoy-config, answering as
    envoyproxy/ratelimit's README describes its configuration format."""
    envoy = os.path.join(SRCDIR, "conf", "envoy")
    d = Daemon("unix:" + redis.socket_path, "policies:\n  p: {tiers: [{name: t, algorithm: "
               "fixed_window, limit: 1, window: 1h}]}\n", prefix="rl-examples:",
               # Exact answers only: under valgrind a first call that takes
               # longer than 200 ms would be answered per failure_mode.
               timeout="2s", extra="grpc_listen: 127.0.0.1:%d\n" % harness.free_port())
    d.start(args=("--envoy-config", envoy))
    rls = Rls(grpc_port(d))

    def one(domain, *descs):
        r = rls.call(domain, list(descs))
        return [(scode(s), limit_fields(s), s.limit_remaining) for s in r.statuses]

    # db_ops.yaml: exact values, nesting, a value-less leaf.
    harness.eq(one("db_ops", D(("database", "accounts")), D(("database", "catalog")),
                   D(("database", "logs"))),
               [(OK, (400, "SECOND", ""), 399), (OK, (150, "SECOND", ""), 149), (OK, None, 0)],
               "db_ops: database=accounts 400/s, catalog 150/s, another database unmatched")
    harness.eq(one("db_ops", D(("source_cluster", "frontend"))), [(OK, None, 0)],
               "db_ops: source_cluster=frontend alone: no limit at that depth")
    harness.eq(one("db_ops", D(("source_cluster", "frontend"), ("destination_cluster", "search")),
                   D(("source_cluster", "frontend"), ("destination_cluster", "mail"))),
               [(OK, (200, "SECOND", ""), 199), (OK, (200, "SECOND", ""), 199)],
               "db_ops: any other destination_cluster: 200/s, one counter per destination")
    pay = [D(("source_cluster", "frontend"), ("destination_cluster", "payments"))]
    for _ in range(3):
        codes = burst(rls, "db_ops", pay, 21)
        if codes is not None:
            break
    harness.eq(codes and (codes.count(OK), codes.count(OVER)), (20, 1),
               "db_ops: frontend -> payments: 21 calls within one second, exactly 20 OK")
    # notifications.yaml: shadow_mode never denies; detailed_metric.
    got = [one("notifications", D(("channel", "promo"), ("recipient", "r1")))[0] for _ in range(4)]
    harness.eq(got, [(OK, (3, "DAY", ""), 2), (OK, (3, "DAY", ""), 1), (OK, (3, "DAY", ""), 0),
                     (OK, (3, "DAY", ""), 0)],
               "notifications: promo to one recipient (shadow, 3/day): 4 calls, all OK")
    harness.eq(one("notifications", D(("recipient", "r1"))), [(OK, (50, "DAY", ""), 49)],
               "notifications: recipient alone: 50/day, its own counter")
    # public_api.yaml: wildcard, unlimited, replaces.
    harness.eq(one("public_api", D(("client", "internal-a")), D(("client", "internal-b")),
                   D(("client", "internal-a"))),
               [(OK, (1000, "MINUTE", ""), 998), (OK, (1000, "MINUTE", ""), 999),
                (OK, (1000, "MINUTE", ""), 998)],
               "public_api: internal-* (1000/min): one counter per client id (two of a in one call)")
    harness.eq(one("public_api", D(("client", "monitoring"))), [(OK, None, UINT32_MAX)],
               "public_api: client=monitoring unlimited")
    harness.eq(one("public_api", D(("client", "c1"))), [(OK, (60, "MINUTE", "per_client"), 59)],
               "public_api: any client 60/min, named per_client")
    harness.eq(one("public_api", D(("client", "c2")), D(("client", "c2"), ("plan", "premium"))),
               [(OK, None, 0), (OK, (300, "MINUTE", "premium"), 299)],
               "public_api: client + plan=premium replaces per_client (no current_limit)")
    harness.eq(one("public_api", D(("client", "c2"))), [(OK, (60, "MINUTE", "per_client"), 59)],
               "public_api: c2's per_client counter untouched by the replaced call")
    got = harness.in_one_window(
        60, lambda fresh: admits(rls, "public_api", [D(("client", "c3-" + fresh))], 61),
        "public_api's 61 calls")
    harness.eq(got, [OK] * 60 + [OVER],
               "public_api: client c3: exactly 60 OK, then OVER_LIMIT")
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


ENVOY_A = """domain: reload_a
descriptors:
  - key: k
    rate_limit:
      unit: hour
      requests_per_unit: %d
"""
ENVOY_B = """domain: reload_b
descriptors:
  - key: k
    value: v
    rate_limit:
      name: bee
      unit: day
      requests_per_unit: 1
"""


def limit_of(rls, domain, desc):
    """(requests_per_unit, name) of the descriptor's current_limit, or None."""
    s = rls.call(domain, [desc]).statuses[0]
    return (s.current_limit.requests_per_unit, s.current_limit.name) if s.HasField("current_limit") else None


def test_reload(redis):
    """--envoy-config DIR: SIGHUP re-reads the directory (a changed limit, a
    new domain, a removed one); a broken file keeps the running config."""
    envoy = harness.make_tempdir("rl-envoy-")
    write(os.path.join(envoy, "a.yaml"), ENVOY_A % 2)
    d = Daemon("unix:" + redis.socket_path, "policies:\n  p: {tiers: [{name: t, algorithm: fixed_window, "
               "limit: 1, window: 1h}]}\n", prefix="rl-reload:", timeout="2s",
               extra="grpc_listen: 127.0.0.1:%d\n" % harness.free_port())
    d.start(args=("--envoy-config", envoy))
    rls = Rls(grpc_port(d))
    harness.eq(admits(rls, "reload_a", [D(("k", "1"))], 3), [OK, OK, OVER],
               "--envoy-config: reload_a k (2/hour): 2 OK then OVER_LIMIT")
    harness.eq(limit_of(rls, "reload_b", D(("k", "v"))), None, "reload_b not defined yet")
    write(os.path.join(envoy, "a.yaml"), ENVOY_A % 4)
    write(os.path.join(envoy, "b.yml"), ENVOY_B)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: limit_of(rls, "reload_b", D(("k", "v"))), timeout=10,
                       what="reload_b after SIGHUP")
    harness.eq(limit_of(rls, "reload_b", D(("k", "v2"))), None, "after SIGHUP: b.yml's value must match")
    harness.eq(admits(rls, "reload_a", [D(("k", "2"))], 5), [OK] * 4 + [OVER],
               "after SIGHUP: reload_a's new limit, 4 OK then OVER_LIMIT")
    harness.eq(admits(rls, "reload_b", [D(("k", "v"))], 1), [OVER],
               "reload_b (1/day): over after the probes above took its one")
    # A broken file: the reload is refused, the running config stays.
    write(os.path.join(envoy, "c.yaml"), "domain: reload_c\ndescriptors:\n  - key: k\n    bogus: 1\n")
    os.remove(os.path.join(envoy, "b.yml"))
    d.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    harness.ok(d.proc.poll() is None, "a broken envoy file on SIGHUP: the daemon keeps running")
    harness.eq(limit_of(rls, "reload_b", D(("k", "v"))), (1, "bee"), "and keeps its running config")
    harness.ok("c.yaml" in d.logs(), "the refused reload names the broken file")
    os.remove(os.path.join(envoy, "c.yaml"))
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: limit_of(rls, "reload_b", D(("k", "v"))) is None, timeout=10,
                       what="reload_b gone after its file was removed")
    harness.ok(True, "b.yml removed and SIGHUP: reload_b no longer matches")
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


# docs/envoy.md's "The gRPC rate limit service" ---------------------------

SAMPLE_HEADERS = {"x-tenant": "beta-7", "x-user": "ann", "x-client-id": "c-42",
                  "x-plan": "premium"}


def readme_section(title):
    with open(os.path.join(SRCDIR, "docs", "envoy.md")) as f:
        text = f.read()
    start = text.index("\n## %s\n" % title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def action_entry(action):
    """The descriptor entry Envoy appends for one rate_limits action, with
    the sample request's values; None for an action this test does not know."""
    if "remote_address" in action:
        return ("remote_address", "203.0.113.7")
    if "request_headers" in action:
        a = action["request_headers"]
        return (a["descriptor_key"], SAMPLE_HEADERS[a["header_name"].lower()])
    if "generic_key" in action:
        a = action["generic_key"]
        return (a.get("descriptor_key", "generic_key"), a["descriptor_value"])
    if "header_value_match" in action:
        a = action["header_value_match"]
        return (a.get("descriptor_key", "header_match"), a["descriptor_value"])
    return None


def envoy_filters(cfg):
    """[(domain, ratelimit filter config, [descriptor...])] per listener."""
    out = []
    for listener in cfg["static_resources"]["listeners"]:
        for chain in listener["filter_chains"]:
            for nf in chain["filters"]:
                hcm = nf["typed_config"]
                descs = []
                for vh in hcm["route_config"]["virtual_hosts"]:
                    limits = list(vh.get("rate_limits", []))
                    for r in vh["routes"]:
                        limits += r.get("route", {}).get("rate_limits", [])
                    for rl in limits:
                        descs.append([action_entry(a) for a in rl["actions"]])
                for hf in hcm["http_filters"]:
                    if hf["name"] == "envoy.filters.http.ratelimit":
                        out.append((hf["typed_config"]["domain"], hf["typed_config"], descs))
    return out


def test_readme_envoy(redis):
    """docs/envoy.md's envoy.yaml is valid YAML; its rate limit cluster speaks
    HTTP/2 to the port docs/envoy.md and conf/ratelimitd.yaml give grpc_listen;
    and every descriptor its rate_limits actions make (sample values) meets
    a limit of the daemon running conf/ratelimitd.yaml and conf/envoy/."""
    try:
        import yaml
    except ImportError:
        harness.skip("python3-yaml is not installed: docs/envoy.md's Envoy YAML is not checked")
        return
    sec = readme_section("The gRPC rate limit service")
    blocks = [b.split("\n```", 1)[0] for b in sec.split("\n```yaml\n")[1:]]
    if not harness.eq(len(blocks), 1, "docs/envoy.md's gRPC section has one envoy.yaml block"):
        return
    cfg = yaml.safe_load(blocks[0])
    filters = envoy_filters(cfg)
    harness.ok(len(filters) >= 1, "it has envoy.filters.http.ratelimit filters (%d)" % len(filters))
    clusters = {c["name"]: c for c in cfg["static_resources"]["clusters"]}
    with open(os.path.join(SRCDIR, "conf", "ratelimitd.yaml")) as f:
        conf = f.read()
    ports = set()
    for domain, fc, descs in filters:
        svc = fc["rate_limit_service"]
        name = svc["grpc_service"]["envoy_grpc"]["cluster_name"]
        c = clusters.get(name, {})
        h2 = c.get("typed_extension_protocol_options", {}).get(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", {})
        harness.ok("http2_protocol_options" in h2.get("explicit_http_config", {}),
                   "%s: cluster %s is HTTP/2 (explicit_http_config)" % (domain, name))
        harness.eq(svc.get("transport_api_version"), "V3", "%s: transport_api_version V3" % domain)
        for ep in c["load_assignment"]["endpoints"][0]["lb_endpoints"]:
            ports.add(ep["endpoint"]["address"]["socket_address"]["port_value"])
        harness.ok(descs and all(None not in d for d in descs),
                   "%s: every rate_limits action is one this test knows" % domain)
    want = set(int(p) for p in re.findall(r"(?m)^    grpc_listen: [0-9.]+:(\d+)$", sec)) | \
        set(int(p) for p in re.findall(r"(?m)^# grpc_listen: 127\.0\.0\.1:(\d+)$", conf))
    harness.eq(ports, want, "the cluster's port is grpc_listen's in docs/envoy.md and conf/ratelimitd.yaml")

    # The daemon on the example policy file and directory, as shipped but for
    # its addresses.
    d = Daemon("unix:" + redis.socket_path, "")
    conf, n1 = re.subn(r"(?m)^listen: 127\.0\.0\.1:8080$", "listen: 127.0.0.1:%d" % d.port, conf)
    conf, n2 = re.subn(r"(?m)^  url: redis://127\.0\.0\.1:6379/0$", "  url: unix:" + redis.socket_path,
                       conf)
    conf, n3 = re.subn(r"(?m)^# grpc_listen: 127\.0\.0\.1:8081$",
                       "grpc_listen: 127.0.0.1:%d" % harness.free_port(), conf)
    harness.eq((n1, n2, n3), (1, 1, 1), "conf/ratelimitd.yaml: listen, redis.url, grpc_listen replaced")
    with open(d.config, "w") as f:
        f.write(conf)
    d.start(args=("--envoy-config", os.path.join(SRCDIR, "conf", "envoy")))
    rls = Rls(grpc_port(d))
    for domain, _, descs in filters:
        for desc in descs:
            s = rls.call(domain, [D(*desc)]).statuses[0]
            harness.ok(s.HasField("current_limit") or s.limit_remaining == UINT32_MAX,
                       "docs/envoy.md's Envoy config: domain %s, descriptor %r meets a limit (%s)"
                       % (domain, desc, limit_fields(s) or
                          ("unlimited" if s.limit_remaining == UINT32_MAX else "none")))
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


def main():
    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, policies() + domains(), timeout="200ms",
               extra="grpc_listen: 127.0.0.1:%d\n" % harness.free_port())
    d.start()
    rls = Rls(grpc_port(d))
    test_algorithms(rls)
    test_units(rls)
    test_atomic_pair(rls)
    test_hits_addend(rls)
    test_unmatched(rls)
    test_shadow(rls)
    test_unlimited(rls)
    test_replaces(rls)
    test_derived_limit(rls)
    test_headers_equal_check(rls, d)
    test_limit_override(rls)
    test_concurrent_streams(rls)
    if os.path.isdir(os.path.join(SRCDIR, "conf", "envoy")):
        test_envoy_examples(redis)
    test_reload(redis)
    test_readme_envoy(redis)
    test_many_daemons(redis)
    test_failure_modes(redis, rls)  # last: it stops Redis
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


harness.run(main)
