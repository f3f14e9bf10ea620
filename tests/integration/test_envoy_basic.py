# SPDX-License-Identifier: Apache-2.0
"""test_envoy_basic.py: envoyproxy/ratelimit's own integration scenario
(testBasicConfig in its test/integration/integration_test.go) run against
ratelimitd over gRPC, with that project's configuration files unchanged
(tests/envoy-ratelimit/config/, byte for byte; the ones this scenario reads
are copied into a temporary --envoy-config directory, since ratelimitd
refuses some fields of the others until it knows them).

What the peer's test states, and ratelimitd answers the same except where
docs/envoy.md's table of differences says why:
- an unknown domain: OK, no current_limit, remaining 0;
- basic/key1: 50 per SECOND, remaining 49;
- another/key2, 25 calls one after another and 25 at once: 20 OK then
  OVER_LIMIT with remaining 0;
- another/key2 + key3 in one call, 15 calls: 10 OK, then OVER_LIMIT on key3.
  The deliberate difference: a denied call consumes nothing, so key2's
  remaining stays at 10 in the denied answers (the peer's default counts key2
  on; its STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT variant does what
  ratelimitd does); the same 15 at once, and 200 five-descriptor calls at
  once (key3 limits: exactly 10 OK);
- duration_until_reset in whole seconds (nanos 0) that goes down as the
  window passes (key4, two calls 2 s apart);
- response_headers_to_add as configured: none with `headers: none` (the
  peer's default, no header unless asked), not even Retry-After on a
  denial; the rate-limit fields with `headers: x-ratelimit` (the peer's
  LIMIT_RESPONSE_HEADERS_ENABLED, its basic_headers.yaml domain), and
  Retry-After with them on a denial;
- hits_addend: a descriptor's explicit 0 checks without consuming, OK even at
  the limit (the peer's isOverLimit with 0 hits); the request's 0 means 1; a
  descriptor's own wins; the same through POST /json.
"""
import json
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

import rls_client  # noqa: E402

rls_client.require()  # skips the whole test without python3-grpcio & co

SRCDIR = os.environ.get("RL_SRCDIR", ".")
PEER_CONFIG = os.path.join(SRCDIR, "tests", "envoy-ratelimit", "config")
# The files this scenario reads (the peer's test directory holds others).
FILES = ("basic.yaml", "another.yaml", "basic_headers.yaml")
OK, OVER = "OK", "OVER_LIMIT"
CODES = {rls_client.CODE_OK: OK, rls_client.CODE_OVER_LIMIT: OVER}
POLICY = ("policies:\n  unused: {tiers: [{name: t, algorithm: fixed_window, limit: 1, "
          "window: 1h}]}\n")


def envoy_dir():
    """A temporary --envoy-config directory with FILES, copied unchanged."""
    d = harness.make_tempdir("rl-envoy-basic-")
    for name in FILES:
        shutil.copyfile(os.path.join(PEER_CONFIG, name), os.path.join(d, name))
    return d


def start(redis, headers, prefix):
    port = harness.free_port()
    # A Redis timeout long enough for a daemon under valgrind: no answer
    # by the failure mode.
    d = Daemon("unix:" + redis.socket_path, POLICY, prefix=prefix, timeout="2s",
               extra="grpc_listen: 127.0.0.1:%d\nheaders: %s\n" % (port, headers))
    d.start(args=("--envoy-config", envoy_dir()))
    return d, rls_client.channel("127.0.0.1:%d" % port)


def call(ch, domain, descriptors, hits_addend=0):
    return rls_client.should_rate_limit(ch, domain, descriptors, hits_addend)


def status(s):
    """(code, requests_per_unit, unit, remaining) of one status; no limit: None
    for the two limit fields."""
    if not s.HasField("current_limit"):
        return (CODES[s.code], None, None, s.limit_remaining)
    return (CODES[s.code], s.current_limit.requests_per_unit,
            rls_client.UNITS[s.current_limit.unit], s.limit_remaining)


def answer(r):
    return (CODES[r.overall_code], [status(s) for s in r.statuses])


def whole_seconds(r, most):
    """Every limited status's duration is whole seconds in [1, most]."""
    return all(not s.HasField("current_limit")
               or (s.duration_until_reset.nanos == 0 and 1 <= s.duration_until_reset.seconds <= most)
               for s in r.statuses)


def headers(r):
    return {h.key.lower(): h.value for h in r.response_headers_to_add}


def outcomes(futures):
    return [CODES[f.result(timeout=60).overall_code] for f in futures]


def test_basic(ch):
    r = call(ch, "foo", [[("hello", "world")]])
    harness.eq(answer(r), (OK, [(OK, None, None, 0)]),
               "unknown domain foo: OK, no current_limit, remaining 0")
    harness.eq(r.statuses[0].HasField("duration_until_reset"), False, "and no duration")

    r = call(ch, "basic", [[("key1", "foo")]])
    harness.eq(answer(r), (OK, [(OK, 50, "SECOND", 49)]), "basic/key1: 50 per SECOND, remaining 49")
    harness.ok(whole_seconds(r, 1), "basic/key1: duration_until_reset 1 s, whole (%r)"
               % (r.statuses[0].duration_until_reset,))

    def one_by_one(key):
        got, whole = [], True
        for _ in range(25):
            r = call(ch, "another", [[("key2", key)]])
            got.append(answer(r))
            whole = whole and whole_seconds(r, 60)
        return got, whole

    got, whole = harness.in_one_window(60, one_by_one, "25 calls on key2 (20 a minute)")
    want = [(OVER if i >= 20 else OK, [(OVER if i >= 20 else OK, 20, "MINUTE", 0 if i >= 20 else 19 - i)])
            for i in range(25)]
    harness.eq(got, want, "another/key2, 25 calls: 20 OK (remaining 19..0), then OVER_LIMIT remaining 0")
    harness.ok(whole, "another/key2: every duration_until_reset whole seconds in [1, 60]")

    def with_key3(key):
        got = [answer(call(ch, "another", [[("key2", key)], [("key3", key)]])) for _ in range(15)]
        return got, answer(call(ch, "another", [[("key2", key)]]))

    got, alone = harness.in_one_window(60, with_key3, "15 calls on key2 (a minute) + key3 (an hour)")
    # Denied: nothing consumed, key2 stays at 10 left (the peer's
    # stop-increment variant; its default would say 19 - i).
    want = [(OK, [(OK, 20, "MINUTE", 19 - i), (OK, 10, "HOUR", 9 - i)]) for i in range(10)]
    want += [(OVER, [(OK, 20, "MINUTE", 10), (OVER, 10, "HOUR", 0)])] * 5
    harness.eq(got, want, "another/key2 + key3, 15 calls: 10 OK, then OVER_LIMIT on key3; "
               "key2's remaining stays 10 (a denied call consumes nothing)")
    harness.eq(alone, (OK, [(OK, 20, "MINUTE", 9)]),
               "key2 alone afterwards: 9 left, only the 10 allowed calls (and this one) counted")


def test_concurrent(ch):
    """The peer's asynchronous variants: exact counts under concurrency."""
    def at_once(key, n, descriptors):
        codes = outcomes([rls_client.should_rate_limit_future(ch, "another", descriptors)
                          for _ in range(n)])
        return codes.count(OK), codes.count(OVER)

    harness.eq(harness.in_one_window(60, lambda key: at_once(key, 25, [[("key2", key)]]),
                                     "25 calls at once on key2"),
               (20, 5), "25 calls at once on key2: 20 OK, 5 OVER_LIMIT")
    harness.eq(harness.in_one_window(60, lambda key: at_once(key, 15, [[("key2", key)], [("key3", key)]]),
                                     "15 calls at once on key2 + key3"),
               (10, 5), "15 key2 + key3 calls at once: 10 OK, 5 OVER_LIMIT")

    def five(key):
        counts = at_once(key, 200, [[("key%d" % k, key)] for k in range(2, 7)])
        r = call(ch, "another", [[("key2", key)], [("key4", key)]])
        return counts, [s.limit_remaining for s in r.statuses]

    counts, left = harness.in_one_window(60, five, "200 calls at once on key2..key6")
    harness.eq(counts, (10, 190),
               "200 calls at once of key2..key6 (key3: 10 an hour): 10 OK, 190 OVER_LIMIT")
    harness.eq(left, [9, 9], "and key2, key4 took exactly the 10 allowed calls (9 left after this one)")


def test_duration(ch):
    def two(key):
        r1 = call(ch, "another", [[("key4", "durTest-" + key)]])
        time.sleep(2)
        r2 = call(ch, "another", [[("key4", "durTest-" + key)]])
        return r1.statuses[0].duration_until_reset, r2.statuses[0].duration_until_reset

    d1, d2 = harness.in_one_window(86400, two, "two calls on key4 (a day)")
    harness.ok(d2.seconds < d1.seconds and d1.nanos == 0 and d2.nanos == 0,
               "key4 (a day): duration_until_reset goes down in whole seconds (%d s, then %d s)"
               % (d1.seconds, d2.seconds))


def second_call(ch, value):
    """The answer to the second of two calls on basic/one_per_minute=value
    (1 a minute)."""
    call(ch, "basic", [[("one_per_minute", value)]])
    return call(ch, "basic", [[("one_per_minute", value)]])


def test_headers_none(ch):
    r = call(ch, "basic_headers", [[("key1", "none")]])
    harness.eq((answer(r), headers(r)), ((OK, [(OK, 50, "SECOND", 49)]), {}),
               "headers: none: no response header (the peer's default)")
    r = harness.in_one_window(60, lambda key: second_call(ch, "none-" + key), "two calls on one_per_minute")
    harness.eq((answer(r), headers(r)), ((OVER, [(OVER, 1, "MINUTE", 0)]), {}),
               "headers: none, OVER_LIMIT: no header at all, not even Retry-After")


def test_headers_x(ch):
    r = call(ch, "basic_headers", [[("key1", "x")]])
    h = headers(r)
    harness.eq((h.get("x-ratelimit-limit"), h.get("x-ratelimit-remaining"), h.get("x-ratelimit-reset"),
                "retry-after" in h),
               ("50", "49", "1", False),
               "headers: x-ratelimit: the limit, remaining and reset of the binding descriptor, "
               "no Retry-After when OK (the peer's LIMIT_RESPONSE_HEADERS_ENABLED)")
    r = harness.in_one_window(60, lambda key: second_call(ch, "x-" + key), "two calls on one_per_minute")
    h = headers(r)
    harness.ok(CODES[r.overall_code] == OVER and h.get("x-ratelimit-remaining") == "0"
               and 1 <= int(h.get("retry-after", "0")) <= 60,
               "headers: x-ratelimit, OVER_LIMIT: the fields and Retry-After (%r)" % (h,))


def hits(entries, n):
    return {"entries": entries, "hits_addend": n}


def test_hits_addend(ch, d):
    def five(value):
        k = [("one_per_minute", value)]
        return [answer(call(ch, "basic", [hits(k, 0)])),
                answer(call(ch, "basic", [k])),
                answer(call(ch, "basic", [hits(k, 0)])),
                answer(call(ch, "basic", [k], hits_addend=0)),
                answer(call(ch, "basic", [hits(k, 0)], hits_addend=5))]

    got = harness.in_one_window(60, five, "five calls on one_per_minute")
    harness.eq(got[0], (OK, [(OK, 1, "MINUTE", 1)]),
               "descriptor hits_addend 0: checks without consuming (remaining 1 of 1)")
    harness.eq(got[1], (OK, [(OK, 1, "MINUTE", 0)]), "then a call of 1: OK, remaining 0")
    harness.eq(got[2], (OK, [(OK, 1, "MINUTE", 0)]),
               "hits_addend 0 at the limit: OK, remaining 0 (the peer's isOverLimit with 0 hits)")
    harness.eq(got[3], (OVER, [(OVER, 1, "MINUTE", 0)]), "the request's hits_addend 0 means 1: OVER_LIMIT")
    harness.eq(got[4], (OK, [(OK, 1, "MINUTE", 0)]),
               "a descriptor's 0 wins over the request's 5: still a check without consuming")

    k2 = [("key2", "hits-%d" % random.getrandbits(32))]
    r = call(ch, "another", [hits(k2, 3), k2], hits_addend=2)
    harness.eq(answer(r), (OK, [(OK, 20, "MINUTE", 15), (OK, 20, "MINUTE", 15)]),
               "descriptor hits 3 and the request's 2 on one key: 5 taken, both statuses say 15")

    def three(value):
        body = {"domain": "basic", "descriptors": [{"entries": [{"key": "one_per_minute", "value": value}],
                                                    "hits_addend": 0}]}
        got = [d.request("POST", "/json", json.dumps(body))]
        body["descriptors"][0].pop("hits_addend")
        got.append(d.request("POST", "/json", json.dumps(body)))
        body["descriptors"][0]["hitsAddend"] = "0"
        got.append(d.request("POST", "/json", json.dumps(body)))
        return got

    r, r2, r3 = harness.in_one_window(60, three, "three POST /json on one_per_minute")
    st = r.json["statuses"][0]
    harness.eq((r.status, st.get("limitRemaining"), st.get("durationUntilReset", "")[-1:]),
               (200, 1, "s"), "POST /json, hits_addend 0: 200, remaining 1 (nothing taken)")
    harness.ok(st["durationUntilReset"][:-1].isdigit(),
               "POST /json: durationUntilReset in whole seconds (%s)" % st["durationUntilReset"])
    harness.eq((r2.status, r2.json["statuses"][0].get("limitRemaining")), (200, None),
               "without hits_addend: 1 taken (remaining 0, left out)")
    harness.eq((r3.status, r3.json["overallCode"]), (200, "OK"),
               "hitsAddend \"0\" (protojson's uint64) at the limit: OK")


def main():
    redis = harness.RedisServer().start()
    d, ch = start(redis, "none", "rl-basic:")
    test_basic(ch)
    test_concurrent(ch)
    test_duration(ch)
    test_headers_none(ch)
    test_hits_addend(ch, d)
    ch.close()
    harness.eq(d.stop(), 0, "daemon exits 0")

    dx, chx = start(redis, "x-ratelimit", "rl-basic-x:")
    test_headers_x(chx)
    chx.close()
    harness.eq(dx.stop(), 0, "the x-ratelimit daemon exits 0")


harness.run(main)
