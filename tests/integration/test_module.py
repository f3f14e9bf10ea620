#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_module.py: ratelimitd.so, the Redis module (src/module/), loaded
into a private redis-server beside the Functions library
($LOCAL_DRIVER --print-library), against them:

- the command exists as `ratelimitd.check`, declares its keys (COMMAND
  GETKEYS) and shows in INFO commandstats;
- a differential run: seeded streams of batches (fixed_window,
  calendar_window, sliding_window_counter, sliding_window_buckets,
  token_bucket, gcra, leaky_bucket; one or two tiers, several checks,
  shadow checks, dry runs "1" and "2", reports "3" with refunds, costs
  -(capacity+1)..capacity+1, chosen times; keys shared by tiers of
  different algorithms, so that a hash met where a string was is the
  script's error) sent as FCALL under one key prefix and as
  ratelimitd.check under another, each pair in one MULTI/EXEC: every
  reply equal, and after every pair every key equal in DUMP and absolute
  expiry (PEXPIRETIME; the writes run a moment apart, so within the
  pair's own duration by Redis's TIME);
- `clock: redis` (ARGV[1] ""): PXAT expiries equal to the millisecond;
- a cost far above the capacity (cost * window past int64), shadow and
  not: the same replies and keys as FCALL's, cost_exceeds_limit;
- what it does not decide yet answers "not implemented in the module yet";
- hostile argument lists and stored states answer errors (or read as
  absent) and Redis keeps answering.
"""

import os
import random
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import RedisError, diag, eq, ok  # noqa: E402

T0 = 1_700_000_000_000_000  # µs
SEC = 1_000_000
ALGORITHMS = ("fixed_window", "sliding_window_counter", "token_bucket", "gcra", "leaky_bucket",
              "calendar_window", "sliding_window_buckets")
# The algorithms a report may give back to (cost < 0); the others refuse it.
REFUNDS = ("fixed_window", "token_bucket", "gcra", "leaky_bucket", "calendar_window")
# A key whose absolute expiry is nearer than this is deleted under both
# prefixes before a pair (after being compared): Redis expires keys by its
# real clock, and one that expired between the FCALL and the module's call
# would part the two streams for a reason that is no bug of either.
NEAR_MS = 5000


def capacity(alg, limit, burst):
    if alg in ("token_bucket", "gcra"):
        return burst if burst > 0 else limit
    if alg == "leaky_bucket":
        return burst + 1
    return limit


def calendar_bounds(rnd, now):
    """A calendar tier's "p:s:e:n" around now, as the daemon sends them
    (lua/calendar_window.lua): mostly now in [s, e), sometimes in the
    window before or after (a daemon's clock a window off Redis's), of a
    few lengths (windows that share an end but not a start), and rarely
    not holding now at all (the script's error)."""
    length = rnd.choice((2 * SEC, 10 * SEC, 60 * SEC))
    shift = rnd.choice((0, 0, 0, 0, 1, -1)) if rnd.random() > 0.03 else 2
    s = now - now % length + shift * length
    p, e = s - rnd.choice((1, 2)) * length, s + length
    return "%d:%d:%d:%d" % (p, s, e, e + length)


def random_policy(rnd, now):
    """A policy string, the capacity of its first tier and whether every
    tier can give back (a report's cost < 0)."""
    words, first, refunds = [rnd.choice("0001")], None, True
    for _ in range(rnd.choice((1, 1, 2))):
        alg = rnd.choice(ALGORITHMS)
        fixed = alg in ("fixed_window", "calendar_window")
        limit = rnd.randint(0 if fixed else 1, 6)
        window = rnd.choice((2 * SEC, 10 * SEC, 60 * SEC, 3_600 * SEC))
        if alg == "calendar_window":
            window = calendar_bounds(rnd, now)
        burst = rnd.choice((0, 0, 2, 5)) if "sliding" not in alg else 0
        precision = 0
        if alg == "sliding_window_buckets":
            precision = window // rnd.choice((1, 2, 5, 10, 1000))
        words += [alg, str(limit), str(window), str(burst), str(precision)]
        refunds = refunds and alg in REFUNDS
        if first is None:
            first = capacity(alg, limit, burst)
    return " ".join(words), first, refunds


def random_request(rnd, now, names):
    """(keys without prefix, argv) of one request: a check (modes 0, 1, 2)
    or a report (mode 3, costs from -(capacity + 1), mostly where every
    tier refunds)."""
    mode = rnd.choice("0001223")
    keys, argv = [], [str(now), mode]
    for _ in range(rnd.choice((1, 1, 2, 3))):
        policy, cap, refunds = random_policy(rnd, now)
        least = -cap - 1 if mode == "3" and (refunds or rnd.random() < 0.1) else 0
        argv += [str(rnd.randint(least, cap + 1)), policy]
        ntiers = (len(policy.split()) - 1) // 5
        keys += ["%s:%d" % (rnd.choice(names), i) for i in range(ntiers)]
    return keys, argv


def batch_args(requests):
    """The batch framing of lua/check.lua's decide_batch."""
    keys, head, tail = [], ["B", str(len(requests))], []
    for k, a in requests:
        keys += k
        head += [str(len(k)), str(len(a))]
        tail += a
    return keys, head + tail


def compare_keys(r, names, prefixes, tolerance_ms, what, tolerances=None):
    """Every key of the stream under both prefixes: DUMP (the value, of
    any type, as Redis serialises it) and expiry. Returns the keys near
    their expiry (see NEAR_MS). With tolerances (a dict), a key whose
    first expiry changed takes tolerance_ms from now on (the pair that
    wrote it), else keeps the one it had."""
    keys = [n + ":" + str(i) for n in names for i in range(2)]
    r.command("MULTI")
    for k in keys:
        for p in prefixes:
            r.command("DUMP", p + k)
            r.command("PEXPIRETIME", p + k)
    got = r.command("EXEC")
    now_ms = int(time.time() * 1000)
    near, bad = [], []
    for i, k in enumerate(keys):
        fv, fe, mv, me = got[4 * i:4 * i + 4]
        tol = tolerance_ms
        if tolerances is not None:
            if tolerances.get(k, (None,))[0] != fe:
                tolerances[k] = (fe, tolerance_ms)
            tol = tolerances[k][1]
        if fv != mv or (fe < 0) != (me < 0) or abs(fe - me) > tol:
            bad.append((k, fv, fe, mv, me))
        if 0 <= min(fe, me) < now_ms + NEAR_MS or 0 <= max(fe, me) < now_ms + NEAR_MS:
            near.append(k)
    if bad:
        diag("%s: %r" % (what, bad[:3]))
    return bad, near


def test_differential(r, function):
    rnd = random.Random(30)
    names = ["k%d" % i for i in range(6)]
    now = T0 + 123
    nreplies = nkeys_bad = 0
    first_bad = None
    worst_ms = 0
    tolerances = {}
    decided = {"report": 0, "refund": 0, "calendar": 0, "buckets": 0, "error": 0}
    for step in range(400):
        now += rnd.choice((0, 1, 999, 250_000, 1_500_000, 7 * SEC))
        reqs = [random_request(rnd, now, names) for _ in range(rnd.choice((1, 1, 2, 4)))]
        single = len(reqs) == 1 and rnd.random() < 0.5
        keys, argv = (reqs[0][0], reqs[0][1]) if single else batch_args(reqs)
        r.command("MULTI")
        r.command("TIME")
        r.command("FCALL", function, len(keys), *["F:" + k for k in keys], *argv)
        r.command("ratelimitd.check", len(keys), *["M:" + k for k in keys], *argv)
        r.command("TIME")
        t0, f, m, t1 = r.command("EXEC")
        # The pair's duration by the clock Redis sets expiries by (a loaded
        # machine stretches it; only Redis's own clock bounds it).
        pair_ms = ((int(t1[0]) - int(t0[0])) * SEC + int(t1[1]) - int(t0[1])) // 1000 + 2
        worst_ms = max(worst_ms, pair_ms)
        nreplies += 1
        count_decided(decided, reqs, [m] if single else m)
        if norm(f) != norm(m) and first_bad is None:
            first_bad = (step, keys, argv, f, m)
        bad, near = compare_keys(r, names, ("F:", "M:"), pair_ms, "step %d" % step, tolerances)
        nkeys_bad += len(bad)
        for k in near:
            r.command("DEL", "F:" + k, "M:" + k)
    ok(first_bad is None, "differential: %d calls, every reply of ratelimitd.check equals "
       "FCALL's" % nreplies)
    # The streams reach what they are for: not only errors on both sides.
    ok(decided["report"] >= 40 and decided["refund"] >= 10 and decided["calendar"] >= 40
       and decided["buckets"] >= 40 and decided["error"] >= 3, "differential: decided (not refused) %r" % decided)
    if first_bad:
        diag("first difference: %r" % (first_bad,))
    eq(nkeys_bad, 0, "differential: every key equal in value and expiry after every call "
       "(expiries within the pair's own duration, at most %d ms)" % worst_ms)


def count_decided(decided, reqs, replies):
    """Counts the requests the module decided (an array, not an error) by
    what they exercise, and those it refused."""
    for (keys, argv), reply in zip(reqs, replies):
        if isinstance(reply, RedisError):
            decided["error"] += 1
            continue
        costs = [int(c) for c in argv[2::2]]
        decided["report"] += argv[1] == "3"
        decided["refund"] += argv[1] == "3" and min(costs) < 0
        decided["calendar"] += any("calendar_window" in a for a in argv[3::2])
        decided["buckets"] += any("sliding_window_buckets" in a for a in argv[3::2])


def norm(reply):
    """A reply with error replies as the marker "error" (the script's
    messages carry its line numbers; the module's say the same in words)."""
    if isinstance(reply, RedisError):
        return "error"
    if isinstance(reply, list):
        return [norm(x) for x in reply]
    return reply


def test_server_clock(r, function):
    policy = "0 fixed_window 5 3600000000 0 0 sliding_window_counter 5 3600000000 0 0"
    same = False
    for _ in range(5):  # bounded: a pair falls across an hour's end at most once
        r.command("DEL", "F:c:0", "F:c:1", "M:c:0", "M:c:1")
        r.command("MULTI")
        r.command("FCALL", function, 2, "F:c:0", "F:c:1", "", "0", "1", policy)
        r.command("ratelimitd.check", 2, "M:c:0", "M:c:1", "", "0", "1", policy)
        f, m = r.command("EXEC")
        if f[0] // (3600 * SEC) == m[0] // (3600 * SEC):
            same = True
            break
    ok(same, "clock redis: both calls in one hour's window")
    for k in ("c:0", "c:1"):
        eq(r.command("GET", "M:" + k), r.command("GET", "F:" + k),
           "clock redis: %s: the same state" % k)
        eq(r.command("PEXPIRETIME", "M:" + k), r.command("PEXPIRETIME", "F:" + k),
           "clock redis: %s: the same PXAT expiry, to the ms" % k)
    eq([m[2 + i] for i in (0, 1, 2, 4, 5, 6, 7, 8, 9, 11, 12, 13)],
       [f[2 + i] for i in (0, 1, 2, 4, 5, 6, 7, 8, 9, 11, 12, 13)],
       "clock redis: the same figures but reset_us")


def test_cost_above_capacity(r, function):
    """fuzz_module_args's input: a cost of 3.17e10 on a window of 1.7e12 µs
    (cost * window past int64), far above the capacity: denied with
    cost_exceeds_limit before any algorithm's step, touching nothing, as a
    shadow check beside an allowed one and as the request's own check."""
    big, window = "31700000000", "1700101000000"
    same, denied = [], []
    # calendar_window's window is its bounds, and its arithmetic multiplies
    # nothing by it: the others' cost * window is what may pass int64.
    algorithms = [a for a in ALGORITHMS if a != "calendar_window"]
    for alg in algorithms:
        burst = "0" if "sliding" in alg else "20"
        precision = window if alg == "sliding_window_buckets" else "0"
        tier = "%s 9 %s %s %s" % (alg, window, burst, precision)
        for argv in ([str(T0), "0", big, "1 " + tier, "1", "0 " + tier],
                     [str(T0), "0", big, "0 " + tier]):
            n = (len(argv) - 2) // 2
            keys = ["big:%d" % i for i in range(n)]
            r.command("DEL", *["F:" + k for k in keys], *["M:" + k for k in keys])
            r.command("MULTI")
            r.command("FCALL", function, n, *["F:" + k for k in keys], *argv)
            r.command("ratelimitd.check", n, *["M:" + k for k in keys], *argv)
            f, m = r.command("EXEC")
            got = [(r.command("DUMP", "F:" + k), r.command("DUMP", "M:" + k)) for k in keys]
            same.append(norm(f) == norm(m) and all(a == b for a, b in got))
            if not same[-1]:
                diag("%s: FCALL %r, module %r, keys %r" % (alg, f, m, got))
            # the big tier: denied, reason cost_exceeds_limit, retry -1,
            # its key never written; the request allowed iff it was shadow
            denied.append(isinstance(m, list) and m[1] == (1 if n == 2 else 0) and
                          m[2] == 0 and m[6] == -1 and m[8] == 1 and got[0][1] is None)
    ok(all(same), "cost above capacity, cost * window past int64: the module answers as "
       "FCALL, for %d algorithms, shadow and not" % len(algorithms))
    ok(all(denied), "cost above capacity: denied with cost_exceeds_limit, retry -1, its key "
       "untouched")


def test_not_implemented(r):
    for argv, what in (
        (["1", "0", "1", "0 sliding_window_log 5 1000000 0 0"], "sliding_window_log"),
        (["1", "0", "1", "0 concurrency 5 1000000 0 0"], "concurrency"),
        (["1", "L5", "1", "0 fixed_window 5 1000000 0 0"], "lease calls"),
        (["1", "r", "m", "0"], "lease calls"),
    ):
        nkeys = 1
        try:
            got = r.command("ratelimitd.check", nkeys, "x", *argv)
        except RedisError as e:
            got = e.message
        ok(isinstance(got, str) and re.fullmatch(
            r"ERR ratelimitd: %s not implemented in the module yet" % what, got),
            "not implemented: %s answers so (%r)" % (what, got))


HOSTILE = [
    [],
    ["x"],
    ["-1", "1", "0"],
    ["99999999999999999999999", "k"],
    ["3", "a", "b"],
    ["0", "B"],
    ["0", "B", "0"],
    ["0", "B", "99999999999999"],
    ["0", "B", "2", "0", "2"],
    ["0", "B", "1", "x", "2", "1", "0"],
    ["0", "B", "1", "0", "99999999999999", "1", "0"],
    ["1", "k", "B", "1", "5", "4", "1", "0", "1", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "abc", "0", "1", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "-5", "0", "1", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "1e3", "0", "1", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "1", "9", "1", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "1", "0", "x", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "1", "0", "-1", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "1", "0", "9007199254740993", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "1", "0", "1", ""],
    ["1", "k", "1", "0", "1", "2 fixed_window 1 1000 0 0"],
    ["1", "k", "1", "0", "1", "0 fixed_window 1 1000 0"],
    ["1", "k", "1", "0", "1", "0 bogus 1 1000 0 0"],
    ["1", "k", "1", "0", "1", "0 gcra\0\0 1 1000 0 0"],
    ["1", "k", "1", "0", "1", "0 " + "x" * 5000 + " 1 1000 0 0"],
    ["1", "k", "1", "0", "1", "0 fixed_window 9007199254740992 9007199254740992 0 0"],
    ["1", "k", "1", "0", "1", "0 token_bucket 0 1000 0 0"],
    ["1", "k", "1", "0", "1", "0 gcra 5 0 0 0"],
    ["1", "k", "1", "0", "1", "0 fixed_window 1 1000 0 0 fixed_window 1 1000 0 0"],
    ["1", "k", "30", "0", "1", "0 calendar_window 1 0:10:20:30 0 0 "],
    ["1", "k", "35", "0", "1", "0 calendar_window 1 0:10:20:30 0 0 "],
    ["1", "k", "5", "0", "1", "0 calendar_window 1 10:10:20:30 0 0 "],
    ["1", "k", "5", "0", "1", "0 calendar_window 1 0:10:20 0 0 "],
    ["1", "k", "5", "0", "1", "0 calendar_window 1 0:10:20:30: 0 0 "],
    ["1", "k", "5", "0", "1", "0 calendar_window 1 0:10:20:9007199254740993 0 0 "],
    ["1", "k", "5", "0", "1", "0 calendar_window -1 0:10:20:30 0 0 "],
    ["1", "k", "5", "3", "-1", "0 sliding_window_counter 1 1000 0 0 "],
    ["1", "k", "5", "3", "-9007199254740993", "0 fixed_window 1 1000 0 0 "],
    ["1", "k", "5", "3", "--1", "0 fixed_window 1 1000 0 0 "],
    ["1", "k", "5", "0", "-1", "0 fixed_window 1 1000 0 0 "],
    ["2", "k", "j", "1", "0", "1", "0 fixed_window 1 1000 0 0"],
    ["1", "k", "1", "0", "1", "0 fixed_window 1 1000 0 0", "short-nonce"],
    ["1", "k", "1", "0", "1", "0 fixed_window 1 1000 0 0 " * 3000],
    ["0", "1", "0"] + ["1", "0 fixed_window 1 1000 0 0"] * 2000,
]


def test_hostile(r):
    answered = []
    for args in HOSTILE:
        try:
            got = r.command("ratelimitd.check", *args)
        except RedisError as e:
            got = e
        answered.append(isinstance(got, RedisError) or (
            isinstance(got, list) and got and all(isinstance(x, RedisError) for x in got)))
        if not answered[-1]:
            diag("not an error: %r -> %r" % ([a[:60] for a in args[:8]], got))
    ok(all(answered), "hostile arguments: all %d lists answer errors" % len(HOSTILE))
    eq(r.command("PING"), "PONG", "hostile arguments: Redis still answers")
    # A batch whose second request is refused: the first decided all the same.
    got = r.command("ratelimitd.check", 1, "h:ok", "B", "2", "1", "4", "0", "2",
                    str(T0), "0", "1", "0 fixed_window 3 1000000 0 0", "x", "0")
    ok(isinstance(got[0], list) and got[0][:3] == [T0, 1, 1] and isinstance(got[1], RedisError),
       "a batch: a refused request is an error in its place, its neighbour decided (%r)"
       % (got,))
    # Stored state no daemon writes: read as absent, never a division by 0.
    states = ["t:1:1:0", "g:5:1:0", "t:-99999999999999999999:1:1", "g:1:99999999999999999999:5",
              "f:1", "c:x:1:1", "f:" + "9" * 400 + ":1"]
    fine = True
    for i, s in enumerate(states):
        r.command("SET", "h:s", s)
        alg = ("token_bucket", "gcra", "token_bucket", "gcra", "fixed_window",
               "sliding_window_counter", "fixed_window")[i]
        got = r.command("ratelimitd.check", 1, "h:s", str(T0), "0", "1",
                        "0 %s 3 1000000 0 0" % alg)
        fine = fine and isinstance(got, list) and got[1] == 1
    ok(fine, "hostile stored states: read as absent, the request allowed")
    # A bucket hash no daemon writes: refused (the script fails on most of
    # these too), never a sum past int64.
    refused = []
    for field, value in (("abc", "1"), (str(T0), "x"), ("0010", "1"), (str(T0), "9" * 30),
                         (str(T0), "-"), ("", "1")):
        r.command("DEL", "h:b")
        r.command("HSET", "h:b", field, value)
        try:
            got = r.command("ratelimitd.check", 1, "h:b", str(T0), "0", "1",
                            "0 sliding_window_buckets 3 1000000 0 1000")
        except RedisError as e:
            got = e
        refused.append(isinstance(got, RedisError))
    ok(all(refused), "hostile bucket hashes: refused (%r)" % refused)
    eq(r.command("PING"), "PONG", "hostile stored states: Redis still answers")


def module_under_test():
    """$RATELIMITD_MODULE's absolute path; bails out without it, skips the
    whole test without redis-server."""
    module = os.environ.get("RATELIMITD_MODULE")
    if not module or not os.path.exists(module):
        harness.bail_out("set RATELIMITD_MODULE to the built ratelimitd.so (make)")
    if harness.find_program("REDIS_SERVER", "redis-server") is None:
        harness.skip_all("redis-server not found (Debian package redis-server)")
    return os.path.abspath(module)


def module_server():
    """A private redis-server with the module and the Functions library
    loaded: (server, a client, the library's function name)."""
    module = module_under_test()
    driver = harness.find_program("LOCAL_DRIVER", os.path.join("tests", "unit", "local_driver"))
    if not driver:
        harness.bail_out("local_driver not found: build it (make check) or set LOCAL_DRIVER")
    lib = subprocess.run([driver, "--print-library"], stdout=subprocess.PIPE, check=True).stdout
    function = re.match(rb"#!lua name=(\S+)", lib).group(1).decode()
    server = harness.RedisServer(extra_args=["--loadmodule", module]).start()
    r = server.client()
    eq(r.command("FUNCTION", "LOAD", "REPLACE", lib), function, "the Functions library loads")
    return server, r, function


def main():
    server, r, function = module_server()
    mods = r.command("MODULE", "LIST")
    ok(any("ratelimitd" in m for m in mods), "MODULE LIST names ratelimitd")
    eq(r.command("COMMAND", "GETKEYS", "ratelimitd.check", "2", "a", "b", "B", "1"),
       ["a", "b"], "the command declares its keys (numkeys, as FCALL)")
    test_differential(r, function)
    test_server_clock(r, function)
    test_cost_above_capacity(r, function)
    test_not_implemented(r)
    test_hostile(r)
    stats = r.command("INFO", "commandstats")
    ok("cmdstat_ratelimitd.check:" in stats, "INFO commandstats shows cmdstat_ratelimitd.check")


if __name__ == "__main__":
    harness.run(main)
