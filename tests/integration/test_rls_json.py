# SPDX-License-Identifier: Apache-2.0
"""test_rls_json.py: Envoy's rate limit service through POST /json (the JSON
form envoyproxy/ratelimit serves), end to end against a real Redis and
again with `backend: memory`: every algorithm through a `policy:`
descriptor and every unit of `rate_limit:` allowed then OVER_LIMIT after
exactly the limit; several descriptors decided atomically (a denied
request consumes nothing from the others); hits_addend; unmatched
descriptors and unknown domains; shadow_mode; unlimited; replaces;
current_limit of `policy:` limits; response_headers_to_add equal to
/check's headers; the failure modes with Redis stopped; 400s; the bearer
token; metrics."""
import json
import urllib.parse
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import ALGORITHMS, BINARY, Daemon  # noqa: E402

LIMIT = 3
UNITS = ["second", "minute", "hour", "day", "week", "month", "year"]

POLICY = "policies:\n" + "".join(
    "  %s: {tiers: [{name: t, algorithm: %s, limit: %d, window: 1h%s}]}\n"
    % (a, a, LIMIT, extra.replace("99", str(LIMIT - 1))) for a, extra in ALGORITHMS.items()) + """\
  ten_per_10s: {tiers: [{name: t, algorithm: fixed_window, limit: 100, window: 10s}]}
  two_tiers:
    tiers:
      - {name: daily, algorithm: fixed_window, limit: 10, window: 1d}
      - {name: slow, algorithm: fixed_window, limit: 4, window: 1h}
  ovr:
    tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1h}]
    overrides:
      - key: "edge|ovr=vip"
        tiers: [{name: t, algorithm: fixed_window, limit: 5, window: 1h}]
  hdr:
    headers: both
    tiers: [{name: t, algorithm: fixed_window, limit: 2, window: 1h}]
  open: {failure_mode: open, tiers: [{name: t, algorithm: fixed_window, limit: 2, window: 1h}]}
  closed: {failure_mode: closed, tiers: [{name: t, algorithm: fixed_window, limit: 2, window: 1h}]}
  local: {failure_mode: local, tiers: [{name: t, algorithm: fixed_window, limit: 2, window: 1h}]}
domains:
  - domain: algos
    descriptors:
""" + "".join("      - {key: %s, policy: %s}\n" % (a, a) for a in ALGORITHMS) + """\
  - domain: units
    descriptors:
""" + "".join("      - {key: %s, rate_limit: {unit: %s, requests_per_unit: %d}}\n"
              % (u, u, LIMIT) for u in UNITS) + """\
  - domain: edge
    descriptors:
      - key: path
        value: /login
        rate_limit: {name: login, unit: hour, requests_per_unit: 2}
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 5}
      - key: tenant
        value: "beta*"
        shadow_mode: true
        rate_limit: {name: tenants, unit: hour, requests_per_unit: 1}
        descriptors:
          - key: user
            detailed_metric: true
            rate_limit: {unit: hour, requests_per_unit: 2, replaces: [{name: tenants}]}
      - key: health
        rate_limit: {unlimited: true}
      - key: ten
        policy: ten_per_10s
      - key: two
        policy: two_tiers
      - key: hdr
        policy: hdr
      - key: ovr
        policy: ovr
      - key: open
        policy: open
      - key: closed
        policy: closed
      - key: local
        policy: local
"""


def rls(d, domain, descriptors, hits=None, headers=None, raw=None):
    """POST /json; descriptors as [([(key, value)...], hits_addend or None)]."""
    if raw is None:
        body = {"domain": domain, "descriptors": [
            dict({"entries": [{"key": k, "value": v} for k, v in entries]},
                 **({"hits_addend": h} if h is not None else {}))
            for entries, h in descriptors]}
        if hits is not None:
            body["hits_addend"] = hits
        raw = json.dumps(body)
    return d.request("POST", "/json", raw, headers=headers)


def one(d, domain, key, value, hits=None):
    return rls(d, domain, [([(key, value)], hits)])


def status(res, i=0):
    return res.json["statuses"][i]


def remaining(res, i=0):
    return status(res, i).get("limitRemaining", 0)


def exact_limit(d, domain, key, value, what, window=None):
    """LIMIT calls OK with remaining counting down, then OVER_LIMIT; with
    a window (seconds), all inside one such window, on a value of their own."""
    def calls(value):
        got = []
        for _ in range(LIMIT + 1):
            r = one(d, domain, key, value)
            got.append((r.status, r.json["overallCode"], status(r)["code"], remaining(r)))
        return got

    if window:
        got = harness.in_one_window(window, lambda fresh: calls(value + "-" + fresh), what)
    else:
        got = calls(value)
    want = [(200, "OK", "OK", LIMIT - 1 - i) for i in range(LIMIT)]
    want.append((429, "OVER_LIMIT", "OVER_LIMIT", 0))
    return harness.eq(got, want, "%s: %d allowed, then OVER_LIMIT" % (what, LIMIT))


def test_algorithms(d, tag):
    for alg in ALGORITHMS:
        exact_limit(d, "algos", alg, tag, "%s %s" % (tag, alg))


def test_units(d, tag):
    for u in UNITS:
        # A second or a minute may end in the middle of the calls on a slow
        # box (valgrind); an hour or more is taken not to.
        window = {"second": 1, "minute": 60}.get(u)
        if exact_limit(d, "units", u, tag, "%s rate_limit unit %s" % (tag, u), window):
            cl = status(one(d, "units", u, tag))["currentLimit"]
            harness.eq(cl, {"requestsPerUnit": LIMIT, "unit": u.upper()},
                       "%s unit %s: currentLimit as configured, no name" % (tag, u))


def test_atomic(d, tag):
    login = [("path", "/login")]
    user = [("user", tag)]
    r = rls(d, "edge", [(login, None), (user, None)])
    harness.eq((r.status, remaining(r, 0), remaining(r, 1)), (200, 1, 4), "%s: both counted" % tag)
    r = one(d, "edge", "path", "/login")  # login's last
    harness.eq(remaining(r), 0, "%s: login exhausted" % tag)
    r = rls(d, "edge", [(login, None), (user, None)])
    harness.eq((r.status, r.json["overallCode"], status(r, 0)["code"], status(r, 1)["code"]),
               (429, "OVER_LIMIT", "OVER_LIMIT", "OK"),
               "%s: one descriptor over the limit denies the request" % tag)
    r = one(d, "edge", "user", tag)
    harness.eq(remaining(r), 3, "%s: the denied request consumed nothing from the other" % tag)


def test_hits(d, tag):
    r = one(d, "edge", "user", "hits-" + tag, hits=None)
    harness.eq(remaining(r), 4, "%s: no hits_addend costs 1" % tag)
    r = rls(d, "edge", [([("user", "hits-" + tag)], None)], hits=2)
    harness.eq(remaining(r), 2, "%s: request-level hits_addend 2" % tag)
    r = rls(d, "edge", [([("user", "hits-" + tag)], 0)], hits=2)
    harness.eq(remaining(r), 2, "%s: a descriptor's hits_addend 0 wins (costs nothing)" % tag)
    r = rls(d, "edge", [([("user", "hits-" + tag)], 2)], hits=1)
    harness.eq((r.status, remaining(r)), (200, 0), "%s: a descriptor's own hits_addend wins" % tag)
    r = rls(d, "edge", [([("user", "hits2-" + tag)], None)], hits=0)
    harness.eq(remaining(r), 4, "%s: hits_addend 0 (proto3 unset) counts 1" % tag)
    r = rls(d, "edge", [([("user", "hits3-" + tag)], 6)])
    harness.eq((r.status, status(r)["code"]), (429, "OVER_LIMIT"),
               "%s: hits over the whole limit: OVER_LIMIT" % tag)
    # Two descriptors on the same counter add up, as duplicate checks do.
    r = rls(d, "edge", [([("user", "dup-" + tag)], 2), ([("user", "dup-" + tag)], 1)])
    harness.eq((remaining(r, 0), remaining(r, 1)), (2, 2), "%s: duplicates add their hits" % tag)


def test_unmatched(d, tag):
    r = rls(d, "edge", [([("nope", "x")], None), ([("path", "/other")], None),
                        ([("path", "/login"), ("extra", "1")], None)])
    harness.eq((r.status, r.json), (200, {"overallCode": "OK", "statuses": [
        {"code": "OK"}, {"code": "OK"}, {"code": "OK"}]}),
        "%s: unmatched descriptors are OK, without limit or headers" % tag)
    r = one(d, "no_such_domain", "user", "x")
    harness.eq((r.status, r.json), (200, {"overallCode": "OK", "statuses": [{"code": "OK"}]}),
               "%s: an unknown domain is OK" % tag)


def test_shadow_unlimited_replaces(d, tag):
    for i in range(3):
        r = one(d, "edge", "tenant", "beta-" + tag)
        harness.eq((r.status, status(r)["code"]), (200, "OK"),
                   "%s: shadow_mode call %d OK (limit 1)" % (tag, i + 1))
    harness.eq(status(r)["currentLimit"], {"requestsPerUnit": 1, "unit": "HOUR", "name": "tenants"},
               "%s: a shadow limit still reports its limit" % tag)
    r = one(d, "edge", "tenant", "alpha")
    harness.eq(status(r), {"code": "OK"}, "%s: the prefix does not match alpha" % tag)
    for i in range(2):
        r = one(d, "edge", "health", "x")
        harness.eq((r.status, r.json), (200, {"overallCode": "OK", "statuses": [
            {"code": "OK", "limitRemaining": 4294967295}]}), "%s: unlimited %d" % (tag, i + 1))
    # The nested user limit replaces "tenants": with both matched, only it counts.
    tenant = [("tenant", "beta-r-" + tag)]
    nested = [("tenant", "beta-r-" + tag), ("user", "u")]
    for i in range(2):
        r = rls(d, "edge", [(tenant, None), (nested, None)])
        harness.eq((r.status, status(r, 0), status(r, 1)["code"], remaining(r, 1)),
                   (200, {"code": "OK"}, "OK", 1 - i),
                   "%s: replaced limit answers as unmatched, the other counts (%d)" % (tag, i))
    r = rls(d, "edge", [(tenant, None), (nested, None)])
    harness.eq((r.status, status(r, 1)["code"]), (429, "OVER_LIMIT"), "%s: replacing limit denies" % tag)
    r = one(d, "edge", "tenant", "beta-r-" + tag)
    harness.eq((status(r)["code"], remaining(r)), ("OK", 0),
               "%s: the replaced limit was not counted before (its first count now)" % tag)


def test_current_limit(d, tag):
    r = one(d, "edge", "ten", tag)
    harness.eq(status(r)["currentLimit"],
               {"requestsPerUnit": 600, "unit": "MINUTE", "name": "ten_per_10s/t"},
               "%s: 100 per 10s is 600 per MINUTE" % tag)
    harness.ok(status(r)["durationUntilReset"].endswith("s"), "%s: durationUntilReset" % tag)
    r = one(d, "edge", "two", tag)
    harness.eq((status(r)["currentLimit"], remaining(r)),
               ({"requestsPerUnit": 4, "unit": "HOUR", "name": "two_tiers/slow"}, 3),
               "%s: the tier with the fewest remaining binds" % tag)
    # The admin API reads the state after the call: the tiers' windows are
    # long (a day, an hour) so that neither starts again in between.
    r = d.admin("/v1/keys/two_tiers/" + urllib.parse.quote("edge|two=" + tag, safe=""))
    harness.eq((r.status, [t["remaining"] for t in json.loads(r.body)["tiers"]]), (200, [9, 3]),
               "%s: the admin API shows a policy: descriptor's state under "
               "<policy>/<domain|key=value>" % tag)
    r = one(d, "edge", "ovr", "vip")
    harness.eq((remaining(r), status(r)["currentLimit"]["requestsPerUnit"]), (4, 5),
               "%s: an override of the key rls builds applies, as on /check" % tag)
    r = one(d, "edge", "ovr", "other")
    harness.eq((remaining(r), status(r)["currentLimit"]["requestsPerUnit"]), (0, 1),
               "%s: another key has the policy's own tiers" % tag)
    r = one(d, "algos", "gcra", "cl-" + tag)
    harness.eq(status(r)["currentLimit"], {"requestsPerUnit": LIMIT, "unit": "HOUR",
                                           "name": "gcra/t"}, "%s: 3 per 1h is 3 per HOUR" % tag)


def header_list(res):
    names = {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after",
             "ratelimit", "ratelimit-policy", "x-ratelimit-delay-ms"}
    return sorted((k, v) for k, v in res.headers.items() if k in names)


def test_headers(d, tag):
    """The same policy and two keys at the same count: the same headers.
    Times (reset, retry) are whole seconds and the two calls may straddle
    one: a pair of fresh keys is tried again, three times at most."""
    for attempt in range(3):
        rows = []
        for i in range(3):
            r = one(d, "edge", "hdr", "h%d-%s" % (attempt, tag))
            c = d.check("hdr", "edge|hdr=c%d-%s" % (attempt, tag))
            got = sorted((h["key"].lower(), h["value"]) for h in r.json["responseHeadersToAdd"])
            rows.append((got, r.status, header_list(c), c.status))
        if all(a == b and s == t for a, s, b, t in rows):
            break
    for i, (a, s, b, t) in enumerate(rows):
        harness.eq(a, b, "%s: call %d: response_headers_to_add are /check's (%d)" % (tag, i + 1, t))
        harness.eq(s, t, "%s: call %d: the same status as /check" % (tag, i + 1))
    harness.ok(any(k == "ratelimit-policy" for k, _ in rows[0][0]) and
               any(k == "retry-after" for k, _ in rows[2][0]),
               "%s: headers: both (IETF too), Retry-After when denied" % tag)
    # The counter really is /check's: the key rls builds is edge|hdr=<value>.
    d.check("hdr", "edge|hdr=shared-" + tag)
    r = one(d, "edge", "hdr", "shared-" + tag)
    harness.eq((r.status, remaining(r)), (200, 0), "%s: /check and /json share a counter" % tag)


def test_bad(d):
    cases = [
        ("{", "invalid_json", "bad JSON"),
        (json.dumps({"descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}),
         "missing_field", "missing domain"),
        (json.dumps({"domain": "", "descriptors": [{"entries": [{"key": "k"}]}]}),
         "invalid_request", "empty domain"),
        (json.dumps({"domain": "edge", "descriptors": []}), "invalid_request", "no descriptors"),
        (json.dumps({"domain": "edge", "descriptors": [{"entries": []}]}), "invalid_request",
         "a descriptor without entries"),
        (json.dumps({"domain": "edge", "descriptors": [{"entries": [{"key": "", "value": "v"}]}]}),
         "invalid_key", "empty key"),
        (json.dumps({"domain": "edge", "descriptors": [{"entries": [{"key": "user"}]}] * 65}),
         "invalid_request", "too many descriptors"),
        (json.dumps({"domain": "edge", "descriptors": [
            {"entries": [{"key": "user", "value": "x" * 1100}]}]}), "invalid_key", "key too long"),
        (json.dumps({"domain": "edge", "descriptors": [], "colour": 1}), "unknown_field",
         "unknown field"),
        (json.dumps({"domain": "edge", "hits_addend": -1, "descriptors": []}), "invalid_cost",
         "negative hits_addend"),
    ]
    for body, code, what in cases:
        r = rls(d, None, None, raw=body)
        harness.eq((r.status, (r.json or {}).get("error")), (400, code), "400 %s" % what)
    r = d.request("GET", "/json")
    harness.eq((r.status, r.headers.get("allow")), (405, "POST"), "GET /json: 405, Allow: POST")
    # protojson's null for a message field: unset.
    r = rls(d, None, None, raw=json.dumps({"domain": "edge", "descriptors": [
        {"entries": [{"key": "nope", "value": "v"}], "limit": None}]}))
    harness.eq((r.status, r.json), (200, {"overallCode": "OK", "statuses": [{"code": "OK"}]}),
               "a descriptor's \"limit\": null is no override")
    # The key limit counts escaped bytes: an unmatched long key is no error.
    r = one(d, "edge", "nope", "x" * 1100)
    harness.eq(r.status, 200, "a long unmatched descriptor builds no key: OK")


def test_metrics(d, tag):
    m = promtext.parse(d.admin("/metrics").body.decode())

    def v(name, **labels):
        return promtext.value(m, name, **labels) or 0

    harness.ok(v("ratelimitd_rls_requests_total", front="json", code="ok") > 10,
               "%s: json ok requests counted" % tag)
    harness.ok(v("ratelimitd_rls_requests_total", front="json", code="over_limit") >= 14,
               "%s: json over_limit requests counted" % tag)
    harness.eq(v("ratelimitd_rls_requests_total", front="json", code="invalid"), 10,
               "%s: the 10 invalid requests counted" % tag)
    harness.eq(v("ratelimitd_rls_requests_total", front="grpc", code="ok"), 0,
               "%s: nothing under grpc" % tag)
    harness.eq(v("ratelimitd_rls_descriptors_total", domain="edge", descriptor="path_/login",
                 result="over_limit"), 1, "%s: login over_limit once" % tag)
    harness.eq(v("ratelimitd_rls_descriptors_total", domain="edge", descriptor="health",
                 result="unlimited"), 2, "%s: unlimited counted" % tag)
    harness.eq(v("ratelimitd_rls_descriptors_total", domain="edge", descriptor="tenant_beta*",
                 result="shadow_over_limit"), 2, "%s: shadow_mode over the limit counted" % tag)
    harness.eq(v("ratelimitd_rls_descriptors_total", domain="", descriptor="",
                 result="unmatched"), 1, "%s: the unknown domain counted under domain=\"\"" % tag)
    harness.ok(v("ratelimitd_rls_descriptors_total", domain="edge", descriptor="",
                 result="unmatched") >= 4, "%s: unmatched under descriptor=\"\"" % tag)
    detailed = "tenant_beta-r-%s.user_u" % tag
    harness.eq(v("ratelimitd_rls_descriptors_total", domain="edge", descriptor=detailed,
                 result="over_limit"), 1, "%s: detailed_metric names the request's values" % tag)


def test_limit_override(d, tag):
    """Envoy's per-request limit (RateLimitDescriptor.limit) replaces the
    config's limit of that descriptor in a known domain, as a fixed window."""
    def call(domain, descs):
        return rls(d, None, None, raw=json.dumps({"domain": domain, "descriptors": descs}))

    def desc(key, value, limit):
        return {"entries": [{"key": key, "value": value}], "limit": limit}

    def three_calls(value):
        limit = {"requests_per_unit": 2, "unit": "MINUTE"}
        return value, [call("edge", [desc("user", value, limit)]) for _ in range(3)]

    value, got = harness.in_one_window(60, lambda fresh: three_calls("ov-%s-%s" % (tag, fresh)),
                                       "%s: the 3 calls of 2 per MINUTE" % tag)
    harness.eq([(r.status, status(r)["code"], remaining(r)) for r in got],
               [(200, "OK", 1), (200, "OK", 0), (429, "OVER_LIMIT", 0)],
               "%s: an override of 2/minute admits 2, over the config's 5/hour" % tag)
    harness.eq(status(got[0]).get("currentLimit"), {"requestsPerUnit": 2, "unit": "MINUTE"},
               "%s: the override is the current_limit" % tag)
    r = one(d, "edge", "user", value)
    harness.eq((r.status, remaining(r)), (200, 4),
               "%s: without it, the config's limit and its own state" % tag)
    got = [call("edge", [desc("free", tag, {"requestsPerUnit": 1, "unit": 3})]) for _ in range(2)]
    harness.eq([status(r)["code"] for r in got], ["OK", "OVER_LIMIT"],
               "%s: an override limits a descriptor the config does not (camelCase, unit by "
               "number)" % tag)
    got = [call("no_such_domain", [desc("free", tag, {"requests_per_unit": 1, "unit": "HOUR"})])
           for _ in range(2)]
    harness.eq([(r.status, r.json) for r in got], [(200, {"overallCode": "OK", "statuses": [
        {"code": "OK"}]})] * 2, "%s: not in an unknown domain" % tag)
    lim = {"requests_per_unit": 3, "unit": "HOUR"}
    r = call("edge", [desc("free", "twice-" + tag, lim), desc("free", "twice-" + tag, lim)])
    harness.eq([remaining(r, 0), remaining(r, 1)], [1, 1],
               "%s: two equal descriptors with one override are one check of cost 2" % tag)
    got = [call("edge", [desc("free", "zero-" + tag, {"requests_per_unit": 0, "unit": "HOUR"})])
           for _ in range(2)]
    harness.eq([(r.status, status(r)["code"], status(r).get("currentLimit")) for r in got],
               [(429, "OVER_LIMIT", {"unit": "HOUR"})] * 2,
               "%s: an override of 0 requests denies every request, as a file's "
               "requests_per_unit: 0 (current_limit 0, left out by protojson)" % tag)
    for limit, what in (({"requests_per_unit": -1, "unit": "HOUR"}, "requests_per_unit -1"),
                        ({"requests_per_unit": 1, "unit": "UNKNOWN"}, "unit UNKNOWN"),
                        ({"requests_per_unit": 1, "unit": 0}, "unit 0"),
                        ({"requests_per_unit": 1}, "no unit"),
                        ({"requests_per_unit": 1 << 32, "unit": "HOUR"}, "over uint32")):
        r = call("edge", [desc("free", tag, limit)])
        harness.eq((r.status, (r.json or {}).get("error")), (400, "invalid_limit"),
                   "%s: a limit override with %s: 400" % (tag, what))


def run_all(d, tag):
    test_algorithms(d, tag)
    test_units(d, tag)
    test_atomic(d, tag)
    test_hits(d, tag)
    test_unmatched(d, tag)
    test_shadow_unlimited_replaces(d, tag)
    test_current_limit(d, tag)
    test_headers(d, tag)
    test_bad(d)
    test_metrics(d, tag)
    test_limit_override(d, tag)


def test_cancel(redis, d):
    """A client that leaves while its /json waits for Redis: the call is
    cancelled (nothing answered, nothing leaked: tools/valgrind.sh runs this
    test too), and Redis late past redis.timeout answers per failure_mode."""
    body = json.dumps({"domain": "edge", "descriptors": [
        {"entries": [{"key": "user", "value": "cancel"}]}]}).encode()
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
        s.sendall(b"POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        time.sleep(0.05)  # read and waiting for Redis
        s.close()
        r = one(d, "edge", "user", "late")
        harness.eq((r.status, status(r)), (200, {"code": "OK"}),
                   "Redis stopped: at redis.timeout, failure_mode open answers OK")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    harness.wait_until(lambda: one(d, "edge", "user", "again").json["statuses"][0]
                       .get("currentLimit") is not None, 10, what="decided again")
    r = one(d, "edge", "user", "cancel")
    # 3 if Redis ran the cancelled call once it woke (it was sent), 4 if
    # the daemon dropped that connection first: never consumed twice.
    harness.ok(r.status == 200 and remaining(r) in (3, 4),
               "decided again after a cancelled call (remaining %d)" % remaining(r))


def test_failure_modes(redis, d):
    redis.stop()
    harness.wait_until(lambda: d.admin("/readyz").status == 503, 10, what="unready")
    r = one(d, "edge", "open", "f")
    harness.eq((r.status, r.json["overallCode"], status(r)), (200, "OK", {"code": "OK"}),
               "Redis down, failure_mode open: OK without current_limit")
    harness.eq(r.json["responseHeadersToAdd"], [{"key": "X-RateLimit-Limit", "value": "2"}],
               "open: the headers /check sends (the configured limit only)")
    r = one(d, "edge", "closed", "f")
    harness.eq((r.status, r.json["error"], r.headers.get("retry-after")),
               (503, "backend_unavailable", "1"), "failure_mode closed: 503")
    r = rls(d, "edge", [([("open", "f")], None), ([("closed", "f")], None)])
    harness.eq(r.status, 503, "open and closed together: the strictest, closed")
    got = [one(d, "edge", "local", "f").status for _ in range(3)]
    harness.eq(got, [200, 200, 429], "failure_mode local: decided in memory (limit 2)")
    r = rls(d, "edge", [([("health", "x")], None), ([("nope", "y")], None)])
    harness.eq(r.status, 200, "nothing to decide: OK without the backend")
    m = promtext.parse(d.admin("/metrics").body.decode())
    harness.eq(promtext.value(m, "ratelimitd_rls_requests_total", front="json",
                              code="unavailable"), 2, "unavailable answers counted")


def test_token(tmp):
    path = os.path.join(tmp, "token")
    with open(path, "w") as f:
        f.write("s3cret-token-for-json\n")
    d = Daemon("redis://127.0.0.1:1/0", POLICY,
               extra="backend: memory\nauth_token_file: %s\n" % path).start()
    r = one(d, "edge", "user", "t")
    harness.eq((r.status, r.headers.get("www-authenticate")), (401, "Bearer"),
               "with auth_token_file, /json without the token: 401")
    r = rls(d, "edge", [([("user", "t")], None)],
            headers={"Authorization": "Bearer s3cret-token-for-json"})
    harness.eq(r.status, 200, "with the token: 200")
    harness.eq(d.stop(), 0, "token daemon exits 0")


def main():
    if not BINARY:
        harness.bail_out("ratelimitd binary not found (set RATELIMITD)")
    redis = harness.RedisServer().start()
    # admin_on_listen: the admin API on listen without a token (test_current_limit).
    d = Daemon("unix:" + redis.socket_path, POLICY, extra="admin_on_listen: true\n").start()
    run_all(d, "redis")
    test_cancel(redis, d)
    test_failure_modes(redis, d)
    harness.eq(d.stop(), 0, "SIGTERM exits 0")

    m = Daemon("redis://127.0.0.1:1/0", POLICY,
               extra="backend: memory\nadmin_on_listen: true\n").start()
    run_all(m, "memory")
    harness.eq(m.stop(), 0, "memory: SIGTERM exits 0")
    test_token(harness.make_tempdir())


harness.run(main)
