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
              "calendar_window", "sliding_window_buckets", "sliding_window_log", "concurrency")
# The algorithms a report may give back to (cost < 0); the others refuse it.
REFUNDS = ("fixed_window", "token_bucket", "gcra", "leaky_bucket", "calendar_window")
# The windows and lease timeouts of the streams of one algorithm: long
# enough that a key they write lives far longer, by Redis's real clock,
# than a run of the test, even a slow one (see NEAR_MS): what the streams
# reach then depends on their seed alone.
LONG = (120 * SEC, 600 * SEC)
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


WINDOWS = (2 * SEC, 10 * SEC, 60 * SEC, 3_600 * SEC)  # the seeded streams'


def calendar_bounds(rnd, now, lengths=(2 * SEC, 10 * SEC, 60 * SEC)):
    """A calendar tier's "p:s:e:n" around now, as the daemon sends them
    (lua/calendar_window.lua): mostly now in [s, e), sometimes in the
    window before or after (a daemon's clock a window off Redis's), of a
    few lengths (windows that share an end but not a start), and rarely
    not holding now at all (the script's error)."""
    length = rnd.choice(lengths)
    shift = rnd.choice((0, 0, 0, 0, 1, -1)) if rnd.random() > 0.03 else 2
    s = now - now % length + shift * length
    p, e = s - rnd.choice((1, 2)) * length, s + length
    return "%d:%d:%d:%d" % (p, s, e, e + length)


# The algorithms whose tiers local leases take blocks of ("L", "G").
LEASABLE = ("fixed_window", "calendar_window", "token_bucket", "gcra")


def random_policy(rnd, now, algorithms=ALGORITHMS, windows=WINDOWS):
    """A policy string, the capacity of its first tier and whether every
    tier can give back (a report's cost < 0)."""
    words, first, refunds = [rnd.choice("0001")], None, True
    for _ in range(rnd.choice((1, 1, 2))):
        alg = rnd.choice(algorithms)
        fixed = alg in ("fixed_window", "calendar_window")
        limit = rnd.randint(0 if fixed else 1, 6)
        window = rnd.choice(windows)
        if alg == "calendar_window":
            window = calendar_bounds(rnd, now, windows[:3])
        burst = rnd.choice((0, 0, 2, 5)) if alg in ("token_bucket", "gcra", "leaky_bucket") else 0
        precision = 0
        if alg == "sliding_window_buckets":
            precision = window // rnd.choice((1, 2, 5, 10, 1000))
        words += [alg, str(limit), str(window), str(burst), str(precision)]
        refunds = refunds and alg in REFUNDS
        if first is None:
            first = capacity(alg, limit, burst)
    return " ".join(words), first, refunds


def random_request(rnd, now, names, windows=WINDOWS):
    """(keys without prefix, argv) of one request: a check (modes 0, 1, 2),
    a report (mode 3, costs from -(capacity + 1), mostly where every
    tier refunds), or a local lease's block taken ("L<want>") or given
    back ("G<taken>", taken a moment or a window ago), mostly on one check
    whose every tier leases."""
    if rnd.random() < 0.15:
        return random_block(rnd, now, names, windows)
    mode = rnd.choice("0001223")
    keys, argv = [], [str(now), mode]
    for _ in range(rnd.choice((1, 1, 2, 3))):
        policy, cap, refunds = random_policy(rnd, now, windows=windows)
        least = -cap - 1 if mode == "3" and (refunds or rnd.random() < 0.1) else 0
        argv += [str(rnd.randint(least, cap + 1)), policy]
        keys += ["%s:%d" % (rnd.choice(names), i) for i in range(nkeys(policy))]
    if rnd.random() < 0.8:
        argv.append(nonce(rnd))  # a concurrency tier's commit needs it
    return keys, argv


def random_block(rnd, now, names, windows=WINDOWS):
    """A block's request (see random_request)."""
    mode = rnd.choice(("L%d" % rnd.randint(1, 12), "L1", "G%d" % max(1, now - rnd.choice(
        (0, 1, 999_999, 2 * SEC, 10 * SEC, 61 * SEC, 3_600 * SEC)))))
    keys, argv = [], [str(now), mode]
    for _ in range(1 if rnd.random() < 0.95 else 2):
        policy, cap, _ = random_policy(rnd, now, LEASABLE if rnd.random() < 0.95 else ALGORITHMS,
                                       windows)
        argv += [str(rnd.randint(0 if rnd.random() < 0.03 else 1, cap + 1)), policy]
        keys += ["%s:%d" % (rnd.choice(names), i) for i in range(nkeys(policy))]
    return keys, argv


def nonce(rnd):
    """A lease nonce: 22 of [A-Za-z0-9_-]."""
    return "".join(rnd.choice("abcXYZ019_-") for _ in range(22))


def nkeys(policy):
    """The keys a policy string's tiers take: a log's set and its sequence
    counter, one for any other algorithm."""
    return sum(2 if w == "sliding_window_log" else 1 for w in policy.split()[1::5])


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
    keys = [n + ":" + str(i) for n in names for i in range(4)]
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
    decided = {"report": 0, "refund": 0, "calendar": 0, "buckets": 0, "log": 0, "concurrency": 0,
               "take": 0, "give": 0, "error": 0}
    for step in range(400):
        now += rnd.choice((0, 1, 999, 250_000, 1_500_000, 7 * SEC))
        reqs = [random_request(rnd, now, names) for _ in range(rnd.choice((1, 1, 2, 4)))]
        single = len(reqs) == 1 and rnd.random() < 0.5
        keys, argv = (reqs[0][0], reqs[0][1]) if single else batch_args(reqs)
        f, m, pair_ms = pair(r, function, keys, argv)
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
       and decided["buckets"] >= 40 and decided["log"] >= 25 and decided["concurrency"] >= 25
       and decided["take"] >= 20 and decided["give"] >= 10 and decided["error"] >= 3, "differential: decided (not refused) %r" % decided)
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
        pairs = argv[2:len(argv) - len(argv) % 2]
        costs = [int(c) for c in pairs[0::2]]
        decided["report"] += argv[1] == "3"
        decided["take"] += argv[1][0] == "L" and reply[1] == 1
        decided["give"] += argv[1][0] == "G" and reply[-2] > 0
        decided["refund"] += argv[1] == "3" and min(costs) < 0
        for alg in ("calendar", "buckets", "log", "concurrency"):
            decided[alg] += any(alg in a for a in pairs[1::2])


def norm(reply):
    """A reply with error replies as the marker "error" (the script's
    messages carry its line numbers; the module's say the same in words)."""
    if isinstance(reply, RedisError):
        return "error"
    if isinstance(reply, list):
        return [norm(x) for x in reply]
    return reply


def pair(r, function, keys, argv):
    """One request (or batch) sent as FCALL under "F:" and as
    ratelimitd.check under "M:" in one MULTI: (FCALL's reply, the
    module's, the pair's duration in ms by Redis's TIME, the clock Redis
    sets expiries by: a loaded machine stretches it, and only Redis's own
    clock bounds it)."""
    r.command("MULTI")
    r.command("TIME")
    r.command("FCALL", function, len(keys), *["F:" + k for k in keys], *argv)
    r.command("ratelimitd.check", len(keys), *["M:" + k for k in keys], *argv)
    r.command("TIME")
    t0, f, m, t1 = r.command("EXEC")
    pair_ms = ((int(t1[0]) - int(t0[0])) * SEC + int(t1[1]) - int(t0[1])) // 1000 + 2
    return f, m, pair_ms


class Stream:
    """A differential stream on a few key names: each call sent as a pair
    (pair), the replies compared, then every key of the names
    (compare_keys, each key's tolerance that of the pair that wrote it),
    and the keys near their expiry deleted on both sides, as
    test_differential does."""

    def __init__(self, r, function, names, what):
        self.r, self.function, self.names, self.what = r, function, names, what
        self.calls, self.unequal, self.bad_keys, self.worst, self.tolerances = 0, 0, 0, 0, {}

    def send(self, keys, argv, equal=None):
        """The module's reply; equal(f, m), if given, says whether the two
        replies agree (else they must be equal)."""
        f, m, pair_ms = pair(self.r, self.function, keys, argv)
        self.calls += 1
        self.worst = max(self.worst, pair_ms)
        if not (equal(f, m) if equal else norm(f) == norm(m)):
            self.unequal += 1
            diag("%s call %d: %r %r: FCALL %r, module %r" % (self.what, self.calls, keys, argv,
                                                             f, m))
        bad, near = compare_keys(self.r, self.names, ("F:", "M:"), pair_ms,
                                 "%s call %d" % (self.what, self.calls), self.tolerances)
        self.bad_keys += len(bad)
        for k in near:  # (see NEAR_MS)
            self.r.command("DEL", "F:" + k, "M:" + k)
        return m

    def finish(self, exercised, seen):
        """Its three points: replies, what the stream exercised (seen,
        shown), keys."""
        eq(self.unequal, 0, "%s: every reply equals FCALL's (%d calls)" % (self.what, self.calls))
        ok(exercised, "%s: exercised %r" % (self.what, seen))
        eq(self.bad_keys, 0, "%s: every key equal in DUMP and expiry (within %d ms)"
           % (self.what, self.worst))


def test_large_fixed_window(r, function):
    """fixed_window and sliding_window_buckets tiers whose limit times
    window is past 2^53 (10 M an hour, 2^53 a year, 2^53 per 2^53 µs, a
    billion buckets' units a year), which the daemon accepts and the
    script decides (it multiplies neither): decided by the module, never
    refused for their size, with FCALL's replies and keys, through checks,
    costs up to the limit and past it, reports and refunds."""
    rnd = random.Random(53)
    tiers = ["fixed_window 10000000 3600000000 0 0",
             "fixed_window 9007199254740992 31622400000000 0 0",
             "fixed_window 9007199254740991 9007199254740992 0 0",
             "fixed_window 4503599627370497 2 0 0",
             "sliding_window_buckets 10000000 3600000000 0 60000000",
             "sliding_window_buckets 1000000000 31622400000000 0 31622400000"]
    stream = Stream(r, function, ["big%d" % i for i in range(3)], "large limits")
    now, decided, arrays = T0 + 7, [], 0
    for _ in range(120):
        now += rnd.choice((0, 1, SEC, 3_600 * SEC))
        mode = rnd.choice("00123")
        argv, keys = [str(now), mode], []
        for _ in range(rnd.choice((1, 2))):
            tier = rnd.choice(tiers)
            limit = int(tier.split()[1])
            cost = rnd.choice((1, 7, limit // 3, limit, limit + 1, 2 ** 53))
            if mode == "3" and rnd.random() < 0.4:
                cost = -rnd.choice((1, limit // 2, 2 ** 53))
            argv += [str(min(cost, 2 ** 53)), rnd.choice("0001") + " " + tier]
            keys.append("%s:0" % rnd.choice(stream.names))
        m = stream.send(keys, argv)
        decided.append(not isinstance(m, RedisError) or "2^53" not in m.message)
        arrays += isinstance(m, list)
    # limit * window past 2^53: never refused for it, mostly decided
    stream.finish(all(decided) and arrays >= 60, "%d of %d not refused for their size, %d "
                  "decided" % (sum(decided), len(decided), arrays))


def test_log_stream(r, function):
    """sliding_window_log alone, on two keys only (so that the sets grow):
    limits from 3 to 1500 (a cost of more than 512 units, the script's
    ZADD chunk, takes several ZADDs), costs 0..limit+1, denials whose
    retry reads a unit inside the window, reports capped at the limit,
    times that step back (a daemon whose clock is behind: members newer
    than now set the expiry) and a second tier. (Not `clock: redis`: a
    member is named by the time it was taken, which two calls a moment
    apart cannot share.)"""
    rnd = random.Random(7)
    stream = Stream(r, function, ["lg0", "lg1"], "log stream")
    now, decided = T0 + 11, {"denied": 0, "big": 0, "back": 0}
    for _ in range(250):
        back = rnd.random() < 0.1
        now += -rnd.choice((1, 999, 60 * SEC)) if back else rnd.choice((0, 1, 999, 36 * SEC,
                                                                         120 * SEC))
        mode = rnd.choice("0001123")
        argv = [str(now), mode]
        keys = []
        for _ in range(rnd.choice((1, 1, 2))):
            limit = rnd.choice((3, 5, 1500))
            cost = rnd.randint(0, limit + 1) if limit < 100 else rnd.choice((1, 700, 1100, 1501))
            tiers = ["sliding_window_log %d %d 0 0" % (limit, rnd.choice(LONG))]
            if rnd.random() < 0.2:
                tiers.append("fixed_window 9 %d 0 0" % LONG[1])
            argv += [str(cost), rnd.choice("0001") + " " + " ".join(tiers)]
            keys += ["%s:%d" % (rnd.choice(stream.names), 2 * i) for i in range(len(tiers))]
            keys.insert(len(keys) - len(tiers) + 1, keys[len(keys) - len(tiers)][:-1] + "1")
            decided["big"] += cost > 512 and mode in "03"
        m = stream.send(keys, argv)
        decided["denied"] += isinstance(m, list) and m[1] == 0
        decided["back"] += back
    # denials, costs past a ZADD chunk, clocks behind
    stream.finish(decided["denied"] >= 20 and decided["big"] >= 10 and decided["back"] >= 10,
                  decided)


def test_concurrency_stream(r, function):
    """concurrency alone on two keys: leases taken (costs 0..limit+1, dry
    runs, a second check, and sometimes no nonce: the commit's error),
    released ("r") and renewed ("n") by their members, live, expired (a
    tombstone) or unknown, with a bad timeout among them now and then (the
    leases before it acted on), while time runs past lease timeouts and
    sometimes back."""
    rnd = random.Random(11)
    names = ["cc0", "cc1"]
    stream, now = Stream(r, function, names, "concurrency stream"), T0 + 5
    taken = []  # (key, member) of every lease either side took
    seen = {"take": 0, "denied": 0, "done": 0, "expired": 0, "unknown": 0, "renewed": 0}
    for _ in range(450):
        now += -60 * SEC if rnd.random() < 0.05 else rnd.choice(
            (0, 1, 18 * SEC, 18 * SEC, 60 * SEC, 180 * SEC, 720 * SEC))
        if taken and rnd.random() < 0.45:
            op = rnd.choice("rnn")
            keys, argv = [], [str(now), op]
            for _ in range(rnd.choice((1, 1, 2, 3))):
                key, member = rnd.choice(taken[-3:]) if rnd.random() < 0.85 else (
                    rnd.choice(names), "3:" + nonce(rnd))
                keys.append(key)
                timeout = rnd.choice(("0", "1000", str(LONG[0]), str(LONG[1])))
                argv += [member, "x" if rnd.random() < 0.03 else timeout]
        else:
            mode = rnd.choice("00012")
            keys, argv = [], [str(now), mode]
            for _ in range(rnd.choice((1, 1, 2))):
                limit = rnd.choice((1, 3, 5))
                cost = rnd.randint(0, limit + 1)
                argv += [str(cost), "%s concurrency %d %d 0 0" % (
                    rnd.choice("0001"), limit, rnd.choice(LONG))]
                keys.append("%s:0" % rnd.choice(names))
            n = nonce(rnd)
            if rnd.random() < 0.9:
                argv.append(n)
            seen["take"] += 1
        m = stream.send(keys, argv)
        if isinstance(m, list) and argv[1] in "rn":
            for status, expires in zip(m[1::2], m[2::2]):
                seen[("unknown", "done", "expired")[status]] += 1
                seen["renewed"] += expires > 0
        elif isinstance(m, list):
            seen["denied"] += m[1] == 0
            if m[1] == 1 and argv[1] == "0" and len(argv) % 2 == 1:
                taken += [(k, "%s:%s" % (c, argv[-1])) for k, c in zip(keys, argv[2::2])
                          if c != "0"]
    # takes, denials, releases and renewals done, expired and unknown
    stream.finish(all(seen[x] >= 10 for x in seen), seen)


def test_block_stream(r, function):
    """Local leases' blocks on every algorithm that leases, on two names
    (so that blocks drain what checks left, and the reverse), in mixed
    batches: blocks taken ("L<want>", want past what is left, a second
    tier) and given back ("G<taken>": within the window, at its very
    start, and after it), beside checks, reports and concurrency lease
    calls in one call, now and then on Redis's clock (dry runs only: a
    write's PXAT would differ by the moment between the two calls)."""
    rnd = random.Random(99)
    names = ["bl0", "bl1"]
    stream, now = Stream(r, function, names, "block stream"), T0 + 3
    windows = LONG + (1_800 * SEC, 3_600 * SEC)
    seen = {"granted>1": 0, "capped": 0, "given": 0, "refused": 0, "edge": 0}
    for _ in range(300):
        now += rnd.choice((0, 1, 15 * SEC, 60 * SEC, 120 * SEC, 660 * SEC))
        reqs = []
        for _ in range(rnd.choice((1, 2, 3))):
            kind = rnd.random()
            if kind < 0.6:
                keys, argv = random_block(rnd, now, names, windows)
                if argv[1][0] == "G" and rnd.random() < 0.2:
                    # a block taken at the very start of a window
                    argv[1] = "G%d" % (now - now % LONG[0])
                    seen["edge"] += 1
            elif kind < 0.9:
                keys, argv = random_request(rnd, now, names, windows)
            else:
                keys, argv = ["%s:0" % rnd.choice(names)], [str(now), rnd.choice("rn"),
                                                            "1:" + nonce(rnd), "1000000"]
            reqs.append((keys, argv))
        clock = rnd.random() < 0.1
        if clock:
            reqs = [(k, [""] + a[1:]) for k, a in reqs if a[1] in ("1", "2")] or \
                [(["bl0:0"], ["", "1", "1", "0 fixed_window 5 2000000 0 0"])]
        keys, argv = batch_args(reqs)
        # Redis's clock: the two calls' now differ by the moment between
        m = stream.send(keys, argv, (lambda f, m: len(f) == len(m)) if clock else None)
        for (_, a), reply in zip(reqs, m):
            if isinstance(reply, RedisError):
                seen["refused"] += 1
            elif a[1][0] == "L" and reply[1] == 1:
                seen["granted>1"] += reply[-2] > 1
                seen["capped"] += reply[-2] < int(a[1][1:])
            elif a[1][0] == "G":
                seen["given"] += reply[-2] > 0
    # blocks of many units, capped by what is left, given back, at the
    # window's edge, and refused
    stream.finish(all(seen[x] >= 10 for x in seen), seen)


def test_lease_boundary(r, function):
    """A lease holds while now < its expiry: released or renewed 1 µs
    before it, done (1); at it, expired (2), as FCALL says."""
    got = []
    for op in "rn":
        for at, want in ((2 * SEC - 1, 1), (2 * SEC, 2)):
            n = nonce(random.Random(at))
            t = T0 + 9_000_000 + at  # keys of their own: no neighbour's lease
            r.command("DEL", "F:lb:0", "M:lb:0")
            f, m, _ = pair(r, function, ["lb:0"], [str(t), "0", "1",
                                                   "0 concurrency 3 2000000 0 0", n])
            f, m, _ = pair(r, function, ["lb:0"], [str(t + at), op, "1:" + n, "5000000"])
            got.append((op, at, m[1] if isinstance(m, list) else m, f == m and m[1] == want))
    ok(all(g[3] for g in got), "lease calls at the expiry's edge: as FCALL's %r" % got)


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


def test_server_clock_blocks(r, function):
    """`clock: redis` for a block taken, given back, and a lease released:
    a fixed window's block in one hour's window writes the same state and
    PXAT expiry as FCALL's; a lease's release answers as FCALL's."""
    policy = "0 fixed_window 50 3600000000 0 0"
    hour, got = 3600 * SEC, []
    for _ in range(5):  # bounded: a pair falls across an hour's end at most once
        r.command("DEL", "F:cb:0", "M:cb:0", "F:cl:0", "M:cl:0")
        f, m, _ = pair(r, function, ["cb:0"], ["", "L7", "2", policy])
        g = pair(r, function, ["cb:0"], ["", "G%d" % m[0], "3", policy])
        n = "c" * 22
        pair(r, function, ["cl:0"], [str(m[0]), "0", "1", "0 concurrency 3 %d 0 0" % hour, n])
        rel = pair(r, function, ["cl:0"], ["", "r", "1:" + n, "0"])
        if f[0] // hour == m[0] // hour == g[0][0] // hour == g[1][0] // hour:
            got = [f, m, g[0], g[1], rel[0], rel[1]]
            break
    def but_time(reply):  # now and reset_us are each call's own
        return reply[1:5] + reply[6:]
    ok(got and but_time(got[0]) == but_time(got[1]) and but_time(got[2]) == but_time(got[3]),
       "clock redis: a block taken and given back: the same figures (but reset_us), granted "
       "and given %r" % (got[:4],))
    ok(got and got[4][1:] == got[5][1:] == [1, 0], "clock redis: a lease released as FCALL's "
       "%r" % (got[4:],))
    eq((r.command("GET", "M:cb:0"), r.command("PEXPIRETIME", "M:cb:0")),
       (r.command("GET", "F:cb:0"), r.command("PEXPIRETIME", "F:cb:0")),
       "clock redis: the block's window: the same state and PXAT expiry, to the ms")


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
        # (a concurrency tier's lease takes the nonce)
        for argv in ([str(T0), "0", big, "1 " + tier, "1", "0 " + tier, "n" * 22],
                     [str(T0), "0", big, "0 " + tier, "n" * 22]):
            n = (len(argv) - 2) // 2
            keys = ["big:%d" % i for i in range(sum(nkeys(p) for p in argv[3::2]))]
            r.command("DEL", *["F:" + k for k in keys], *["M:" + k for k in keys])
            r.command("MULTI")
            r.command("FCALL", function, len(keys), *["F:" + k for k in keys], *argv)
            r.command("ratelimitd.check", len(keys), *["M:" + k for k in keys], *argv)
            f, m = r.command("EXEC")
            got = [(r.command("DUMP", "F:" + k), r.command("DUMP", "M:" + k)) for k in keys]
            same.append(norm(f) == norm(m) and all(a == b for a, b in got))
            if not same[-1]:
                diag("%s: FCALL %r, module %r, keys %r" % (alg, f, m, got))
            # the big tier: denied, reason cost_exceeds_limit, retry -1,
            # its keys never written; the request allowed iff it was shadow
            denied.append(isinstance(m, list) and m[1] == (1 if n == 2 else 0) and
                          m[2] == 0 and m[6] == -1 and m[8] == 1 and
                          all(b is None for _, b in got[:nkeys(argv[3])]))
            if not denied[-1]:
                diag("%s: module %r, keys %r" % (alg, m, got))
    ok(all(same), "cost above capacity, cost * window past int64: the module answers as "
       "FCALL, for %d algorithms, shadow and not" % len(algorithms))
    ok(all(denied), "cost above capacity: denied with cost_exceeds_limit, retry -1, its key "
       "untouched")


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
    ["1", "k", "1", "0", "1", "0 gcra 9007199254740992 9007199254740992 0 0"],
    ["1", "k", "1", "0", "1", "0 sliding_window_counter 3 4503599627370497 0 0"],
    ["1", "k", "1", "0", "1", "0 token_bucket 0 1000 0 0"],
    ["2", "k", "s", "1", "0", "1", "0 sliding_window_log 1000001 1000 0 0"],
    ["1", "k", "1", "0", "1", "0 sliding_window_log 5 1000 0 0"],
    ["3", "k", "s", "j", "1", "0", "1", "0 sliding_window_log 5 1000 0 0"],
    ["1", "k", "1", "0", "1", "0 concurrency 0 1000 0 0", "n" * 22],
    ["1", "k", "1", "0", "1", "0 concurrency 1 0 0 0", "n" * 22],
    ["1", "k", "1", "0", "1", "0 concurrency 1 1000 0 0"],
    ["1", "k", "1", "L0", "1", "0 fixed_window 5 1000 0 0"],
    ["1", "k", "1", "L-1", "1", "0 fixed_window 5 1000 0 0"],
    ["1", "k", "1", "L9007199254740993", "1", "0 fixed_window 5 1000 0 0"],
    ["1", "k", "1", "L 5", "1", "0 fixed_window 5 1000 0 0"],
    ["1", "k", "1", "X5", "1", "0 fixed_window 5 1000 0 0"],
    ["1", "k", "1", "L5", "0", "0 fixed_window 5 1000 0 0"],
    ["1", "k", "1", "G5", "0", "0 token_bucket 5 1000 0 0"],
    ["1", "k", "1", "L5", "1", "0 sliding_window_counter 5 1000 0 0"],
    ["1", "k", "1", "G5", "1", "0 leaky_bucket 5 1000 0 0"],
    ["2", "k", "j", "1", "L5", "1", "0 gcra 5 1000 0 0", "1", "0 gcra 5 1000 0 0"],
    ["2", "k", "j", "1", "L5", "1", "0 gcra 5 1000 0 0 concurrency 5 1000 0 0"],
    ["1", "k", "1", "r"],
    ["1", "k", "1", "r", "m"],
    ["1", "k", "1", "n", "m", "-1"],
    ["1", "k", "1", "n", "m", "x"],
    ["2", "k", "j", "1", "n", "m", "5"],
    ["1", "k", "1", "x", "m", "5"],
    ["1", "k", "x", "r", "m", "5"],
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
    # A log no daemon writes: a score that is no integer refused (the
    # script would compute with it), a set or counter of another type the
    # script's error, as FCALL's.
    refused = []
    for setup, cost in ((("ZADD", "h:l", "1700000000000000.5", "a"), "1"),
                        (("ZADD", "h:l", "inf", "a"), "1"),
                        (("SET", "h:l", "f:1:1"), "1"),
                        (("SET", "h:c", "x"), "1"),
                        (("HSET", "h:c", "a", "1"), "1")):
        r.command("DEL", "h:l", "h:c")
        r.command(*setup)
        try:
            got = r.command("ratelimitd.check", 2, "h:l", "h:c", str(T0), "0", cost,
                            "0 sliding_window_log %s 1000000 0 0" % ("1" if setup[2] != "inf"
                                                                     else "5"))
        except RedisError as e:
            got = e
        refused.append(isinstance(got, RedisError))
    ok(all(refused), "hostile logs: refused (%r)" % refused)
    # A concurrency set no daemon writes: a score that is no integer
    # refused, a member that is no lease holding nothing (as the script
    # skips it), a key of another type the script's error.
    answers = []
    for setup in (("ZADD", "h:z", "1700000000000000000.5", "1:a"),
                  ("ZADD", "h:z", "inf", "1:a"),
                  ("ZADD", "h:z", str(T0 + SEC), "abc", str(T0 + SEC), "1x:a"),
                  ("ZADD", "h:z", str(T0 + SEC), "99999999999999999999:a"),
                  ("SET", "h:z", "f:1:1")):
        r.command("DEL", "h:z")
        r.command(*setup)
        try:
            got = r.command("ratelimitd.check", 1, "h:z", str(T0), "0", "1",
                            "0 concurrency 1 1000000 0 0", "n" * 22)
        except RedisError as e:
            got = e
        answers.append("error" if isinstance(got, RedisError) else got[1])
    eq(answers, ["error", "error", 1, "error", "error"], "hostile concurrency sets: refused, "
       "or a member that is no lease read as holding nothing")
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
    test_server_clock_blocks(r, function)
    test_large_fixed_window(r, function)
    test_log_stream(r, function)
    test_concurrency_stream(r, function)
    test_lease_boundary(r, function)
    test_block_stream(r, function)
    test_cost_above_capacity(r, function)
    test_hostile(r)
    stats = r.command("INFO", "commandstats")
    ok("cmdstat_ratelimitd.check:" in stats, "INFO commandstats shows cmdstat_ratelimitd.check")
    harness.module_sanitizers_clean(server, "differential, hostile arguments and states")


if __name__ == "__main__":
    harness.run(main)
