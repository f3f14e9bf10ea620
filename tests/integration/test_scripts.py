#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_scripts.py: the decision code, exactly as the daemon carries it, in
both its forms, against a private redis-server: the EVAL script
($RATELIMITD --print-script, called with EVALSHA) and the Redis Function
library ($LOCAL_DRIVER --print-library, which prints scripts_library_code();
FUNCTION LOAD, then FCALL). Every test below runs once per caller, and the
two runs must get identical replies, request for request.

Every figure the script returns is compared EXACTLY with a reference
computed here, for chosen and pseudo-random (fixed seed) timestamps and
costs. The reference models are written from the algorithms' rules, not
from the Lua: they keep the plain history or exact rationals (Fraction), and
find retry_us and reset_us by searching for the first µs at which the
request fits or the tier is idle again, rather than by the closed formulas
the Lua uses. On top of the figures: what is written (nothing for a denied
request, a dry run, a cost of 0, a denied shadow check), key expiries, log
member uniqueness, gcra == token_bucket, leaky_bucket delays, Redis TIME.
"""

import copy
import hashlib
import math
import os
import random
import re
import subprocess
import sys
import time
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import diag  # noqa: E402

SLACK_MS = 1000  # EXPIRY_SLACK_MS in lua/common.lua
T0 = 1_700_000_000_000_000  # µs; a multiple of every round window below
SEC = 1_000_000
FIELDS = ("allowed", "limit", "remaining", "reset_us", "retry_us", "delay_us", "reason")

R = None  # the RedisClient
SHA = None  # the script's SHA1
FUNCTION = None  # the library's function name
CALLER = "load"  # then "fcall", "evalsha": how the suite calls the code
REPLIES = {}  # caller -> every reply of call() at a given now, in order


def ok(cond, desc):
    return harness.ok(cond, "%s: %s" % (CALLER, desc))


def eq(got, want, desc):
    return harness.eq(got, want, "%s: %s" % (CALLER, desc))


def invoke(client, keys, argv):
    """The decision code through the current caller."""
    if CALLER == "fcall":
        return client.command("FCALL", FUNCTION, len(keys), *keys, *argv)
    return client.command("EVALSHA", SHA, len(keys), *keys, *argv)

# ------------------------------------------------------------ the models
#
# A model holds one tier's state as plain history and answers, for a time t
# (µs) with no traffic between the last take and t:
#   allows(t, cost)   would a request of cost (0 < cost <= capacity) pass?
#   remaining(t)      units left
#   idle(t)           is the tier back to empty/full (reset reached)?
#   take(t, cost)     records an allowed request


class Model:
    nkeys = 1
    shapes = False  # reports a delay (leaky_bucket)

    def __init__(self, limit, window, burst, precision):
        self.L, self.W, self.burst, self.P = limit, window, burst, precision
        self.capacity = limit

    def horizon(self):
        """An upper bound of every retry and reset, in µs."""
        return 3 * self.W + -(-self.capacity * self.W // self.L) + 1


class FixedWindow(Model):
    def __init__(self, *a):
        super().__init__(*a)
        self.window, self.n = None, 0

    def count(self, t):
        return self.n if self.window == t // self.W else 0

    def allows(self, t, cost):
        return self.count(t) + cost <= self.L

    def remaining(self, t):
        return self.L - self.count(t)

    def idle(self, t):
        return self.count(t) == 0

    def take(self, t, cost):
        if self.window != t // self.W:
            self.window, self.n = t // self.W, 0
        self.n += cost


class SlidingWindowLog(Model):
    nkeys = 2

    def __init__(self, *a):
        super().__init__(*a)
        self.times = []  # one entry per unit taken

    def count(self, t):
        # Every unit later than now - W, even one from a clock ahead of ours.
        return sum(1 for s in self.times if s > t - self.W)

    def allows(self, t, cost):
        return self.count(t) + cost <= self.L

    def remaining(self, t):
        return self.L - self.count(t)

    def idle(self, t):
        return self.count(t) == 0

    def take(self, t, cost):
        # Units out of the window are forgotten when a request is taken.
        self.times = [s for s in self.times if s > t - self.W] + [t] * cost


class SlidingWindowCounter(Model):
    def __init__(self, *a):
        super().__init__(*a)
        self.per_window = {}  # window index -> units taken in it

    def estimate(self, t):
        i = t // self.W
        elapsed = t - i * self.W
        prev = self.per_window.get(i - 1, 0)
        return Fraction(prev * (self.W - elapsed), self.W) + self.per_window.get(i, 0)

    def allows(self, t, cost):
        return self.estimate(t) + cost <= self.L

    def remaining(self, t):
        return math.floor(self.L - self.estimate(t))

    def idle(self, t):
        return self.estimate(t) == 0

    def take(self, t, cost):
        i = t // self.W
        self.per_window[i] = self.per_window.get(i, 0) + cost


class SlidingWindowBuckets(Model):
    def __init__(self, *a):
        super().__init__(*a)
        self.per_bucket = {}

    def count(self, t):
        cur, n = t // self.P, self.W // self.P
        return sum(v for b, v in self.per_bucket.items() if cur - n < b <= cur)

    def allows(self, t, cost):
        return self.count(t) + cost <= self.L

    def remaining(self, t):
        return self.L - self.count(t)

    def idle(self, t):
        return self.count(t) == 0

    def take(self, t, cost):
        b = t // self.P
        self.per_bucket[b] = self.per_bucket.get(b, 0) + cost


class TokenBucket(Model):
    def __init__(self, *a):
        super().__init__(*a)
        self.capacity = self.burst or self.L
        self.tokens, self.last = Fraction(self.capacity), None

    def level(self, t):
        if self.last is None:
            return Fraction(self.capacity)
        # A clock behind the last update's sees no refill, and no drain.
        elapsed = max(0, t - self.last)
        return min(self.capacity, self.tokens + Fraction(elapsed * self.L, self.W))

    def allows(self, t, cost):
        return self.level(t) >= cost

    def remaining(self, t):
        return math.floor(self.level(t))

    def idle(self, t):
        return self.level(t) == self.capacity

    def take(self, t, cost):
        self.tokens = self.level(t) - cost
        self.last = t if self.last is None else max(self.last, t)


class Gcra(Model):
    """Theoretical arrival time, as an exact rational."""

    def __init__(self, *a):
        super().__init__(*a)
        self.capacity = self.burst or self.L
        self.T = Fraction(self.W, self.L)  # emission interval
        self.tat = None

    def backlog(self, t):
        return Fraction(0) if self.tat is None else max(Fraction(0), self.tat - t)

    def allows(self, t, cost):
        return self.backlog(t) + cost * self.T <= self.capacity * self.T

    def remaining(self, t):
        return math.floor((self.capacity * self.T - self.backlog(t)) / self.T)

    def idle(self, t):
        return self.backlog(t) == 0

    def take(self, t, cost):
        self.tat = t + self.backlog(t) + cost * self.T

    def delay(self, t, cost):
        # The request's last unit leaves (cost - 1) intervals after the first,
        # which leaves when the backlog has drained.
        return math.ceil(self.backlog(t) + (cost - 1) * self.T)


class LeakyBucket(Gcra):
    shapes = True

    def __init__(self, *a):
        super().__init__(*a)
        self.capacity = self.burst + 1


MODELS = {
    "fixed_window": FixedWindow,
    "sliding_window_log": SlidingWindowLog,
    "sliding_window_counter": SlidingWindowCounter,
    "sliding_window_buckets": SlidingWindowBuckets,
    "token_bucket": TokenBucket,
    "gcra": Gcra,
    "leaky_bucket": LeakyBucket,
}
ALGORITHMS = list(MODELS)

_nkey = 0


class Tier:
    """One tier: its parameters, its Redis keys, and its reference model."""

    def __init__(self, alg, limit, window, burst=0, precision=0):
        global _nkey
        _nkey += 1
        self.alg = alg
        self.argv = [alg, str(limit), str(window), str(burst), str(precision)]
        self.model = MODELS[alg](limit, window, burst, precision)
        key = "t%d:%s" % (_nkey, alg)
        self.keys = [key, key + ":seq"] if self.model.nkeys == 2 else [key]

    def __repr__(self):
        return "%s(%s)" % (self.alg, ",".join(self.argv[1:]))


class Check:
    def __init__(self, cost, tiers, shadow=False):
        self.cost, self.tiers, self.shadow = cost, tiers, shadow


def first_true(pred, lo, hi):
    """The least integer t in [lo, hi] with pred(t), pred being monotone."""
    if pred(lo):
        return lo
    if not pred(hi):
        raise AssertionError("reference: no answer before the horizon")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def reference(now, checks, dry=False):
    """The expected reply, from the rules; takes the cost in the models when
    the script should write. Returns (reply, [(tier, reset_us) written])."""
    decided, request_allowed = [], True
    for c in checks:
        rows = []
        for t in c.tiers:
            m = t.model
            if c.cost == 0:
                rows.append((t, True, 0))
            elif c.cost > m.capacity:
                rows.append((t, False, 1))
            else:
                rows.append((t, m.allows(now, c.cost), 0))
        check_allowed = all(r[1] for r in rows)
        if not c.shadow and not check_allowed:
            request_allowed = False
        decided.append((c, check_allowed, rows))

    reply, written = [now, int(request_allowed)], []
    for c, check_allowed, rows in decided:
        consumed = request_allowed and check_allowed
        for t, allowed, reason in rows:
            m = after = t.model
            if consumed and c.cost > 0:
                after = copy.deepcopy(m)
                after.take(now, c.cost)
            remaining = max(0, after.remaining(now))
            reset = first_true(after.idle, now, now + m.horizon()) - now
            if reason:
                retry = -1
            elif not allowed:
                retry = first_true(lambda x: m.allows(x, c.cost), now, now + m.horizon()) - now
            else:
                retry = 0
            delay = m.delay(now, c.cost) if allowed and c.cost > 0 and m.shapes else 0
            reply += [int(allowed), m.capacity, remaining, reset, retry, delay, reason]
            if consumed and c.cost > 0 and not dry:
                written.append((t, reset))
    if request_allowed and not dry:
        for c, check_allowed, rows in decided:
            if check_allowed and c.cost > 0:
                for t, _, _ in rows:
                    t.model.take(now, c.cost)
    return reply, written


# ------------------------------------------------------------ the script


def call(now, checks, dry=False, client=None):
    """One request through CALLER; now is an int, or "" for Redis TIME.
    Replies at a given now are recorded, to compare the two callers."""
    keys, argv = [], [str(now), "1" if dry else "0"]
    for c in checks:
        argv += [str(c.cost), " ".join(["1" if c.shadow else "0"] + [w for t in c.tiers for w in t.argv])]
        for t in c.tiers:
            keys += t.keys
    try:
        reply = invoke(client or R, keys, argv)
    except harness.RedisError as e:
        reply = e
    if now != "":
        REPLIES.setdefault(CALLER, []).append(reply if not isinstance(reply, Exception) else str(reply))
    if isinstance(reply, Exception):
        raise reply
    return reply


def explain(got, want, checks):
    """The differing fields of two replies, by tier."""
    if not isinstance(got, list) or len(got) != len(want):
        return ["reply %r, want %r" % (got, want)]
    out = []
    for i, name in enumerate(("now_us", "request_allowed")):
        if got[i] != want[i]:
            out.append("%s: got %r want %r" % (name, got[i], want[i]))
    i = 2
    for c in checks:
        for t in c.tiers:
            for f, g, w in zip(FIELDS, got[i : i + 7], want[i : i + 7]):
                if g != w:
                    out.append("%r %s: got %r want %r" % (t, f, g, w))
            i += 7
    return out


def check_ttls(written):
    """Every key just written expires at reset (the time its state stops
    mattering, which is reset for every algorithm) plus the slack."""
    problems = []
    for t, reset in written:
        want = -(-reset // 1000) + SLACK_MS
        for k in t.keys:
            pttl = R.command("PTTL", k)
            if not (want - 750 < pttl <= want):
                problems.append("%s: PTTL %d, want %d (reset %d us)" % (k, pttl, want, reset))
    return problems


def run_steps(desc, steps):
    """Runs (now, checks, dry) steps, comparing every reply with the
    reference and every written key's TTL. One test point."""
    problems = []
    for i, (now, checks, dry) in enumerate(steps):
        try:
            got = call(now, checks, dry)
        except harness.RedisError as e:
            got = "error: %s" % e.message
        want, written = reference(now, checks, dry)
        if got != want:
            problems.append("step %d at %d (dry=%s, cost=%s):" % (i, now, dry, [c.cost for c in checks]))
            problems += ["  " + p for p in explain(got, want, checks)]
            break  # the models and Redis have diverged
        problems += check_ttls(written)
    ok(not problems, desc)
    for p in problems[:12]:
        diag(p)
    return not problems


# ------------------------------------------------------------ sequences


def chosen_steps(tier, base, max_cost=None):
    """Hand-picked times around window boundaries, with cost 0, a cost over
    capacity, dry runs, refill and a long idle. Costs up to max_cost (else
    capacity), besides the one over capacity."""
    W, over = tier.model.W, tier.model.capacity + 1
    C = min(tier.model.capacity, max_cost or tier.model.capacity)
    plan = [
        (0, 1, False), (1, 2, False), (2, 0, False), (3, over, False),
        (4, 2, True), (5, 2, False), (6, 1, False), (6, 1, True), (7, 0, False),
        (W - 1, 1, False), (W, 1, False), (W + 1, 3, False), (W + W // 2, 2, False),
        (W + W // 2 + 1, C, False), (2 * W - 1, 1, False), (2 * W, C, False),
        (2 * W + 3, 1, True), (3 * W + W // 3, min(C, 4), False), (3 * W + W // 3, 1, False),
        (103 * W + 7, C, False), (103 * W + 7, 1, False), (103 * W + 8, 0, False),
        (103 * W + 8, 1, True),
        # Decades idle: elapsed * limit would leave 2^53.
        (10 ** 15, 1, False), (10 ** 15 + 1, C, False),
    ]
    return [(base + dt, [Check(cost, [tier])], dry) for dt, cost, dry in plan]


def random_steps(rng, tier, n, base, max_cost=None):
    """n requests at pseudo-random gaps (0, 1 µs, an interval, exactly onto
    or just before a window or bucket boundary, a window, several) and
    costs (0, 1, anything up to capacity, capacity + 1), 10% dry runs."""
    m = tier.model
    W, C = m.W, m.capacity
    top = min(C, max_cost or C)
    grain = m.P or W
    now, steps = base + rng.randrange(W), []
    for _ in range(n):
        now += rng.choice([
            0, 0, 1, rng.randrange(1, 1000), rng.randrange(1, W // m.L + 2),
            rng.randrange(W), rng.randrange(3 * W), W - now % W, (W - now % W - 1) % W,
            grain - now % grain, rng.randrange(1, 10 * W),
        ])
        cost = rng.choice([0, 1, 1, 1, rng.randint(1, top), rng.randint(1, top), top, C + 1])
        steps.append((now, [Check(cost, [tier])], rng.random() < 0.1))
    return steps


def skewed_steps(rng, tier, n, base):
    """As random_steps, but now sometimes steps back (up to a window), as
    when daemons with different clocks pass `now` for the same key."""
    steps = random_steps(rng, tier, n, base)
    W, out, now = tier.model.W, [], base
    for t, checks, dry in steps:
        now = max(base, now + (t - now if rng.random() < 0.7 else -rng.randrange(1, W)))
        out.append((now, checks, dry))
    return out


# Per algorithm: (limit, window, burst, precision, max_cost) parameter sets.
# The last of each is near the daemon's bounds (capacity * window ~ 2^53),
# where inexact arithmetic would show.
BIG_L, BIG_W = 1_000_000_000, 9_000_000  # 9e15 < 2^53 = 9.007e15
PARAMS = {
    "fixed_window": [(5, 10 * SEC, 0, 0, None), (3, 999_983, 0, 0, None), (BIG_L, BIG_W, 0, 0, None)],
    "sliding_window_log": [(5, 10 * SEC, 0, 0, None), (3, 999_983, 0, 0, None), (BIG_L, BIG_W, 0, 0, 4)],
    "sliding_window_counter": [(5, 10 * SEC, 0, 0, None), (7, 999_983, 0, 0, None), (BIG_L, BIG_W, 0, 0, None)],
    "sliding_window_buckets": [
        (5, 10 * SEC, 0, SEC, None), (4, 3 * 999_983, 0, 999_983, None), (BIG_L, BIG_W, 0, 9_000, None),
    ],
    "token_bucket": [
        (5, 10 * SEC, 0, 0, None), (3, 7 * SEC, 10, 0, None), (7, 999_983, 2, 0, None), (BIG_L, BIG_W, 0, 0, None),
    ],
    "gcra": [
        (5, 10 * SEC, 0, 0, None), (3, 7 * SEC, 10, 0, None), (7, 999_983, 2, 0, None), (BIG_L, BIG_W, 0, 0, None),
    ],
    "leaky_bucket": [
        (5, 10 * SEC, 4, 0, None), (3, 7 * SEC, 0, 0, None), (10, SEC, 3, 0, None), (BIG_L, BIG_W, BIG_L - 1, 0, None),
    ],
}


def test_algorithms():
    rng = random.Random(20240601)
    for alg in ALGORITHMS:
        tier = Tier(alg, 5, 10 * SEC, burst=4 if alg == "leaky_bucket" else 0,
                    precision=SEC if alg == "sliding_window_buckets" else 0)
        run_steps("%s: chosen sequence %r" % (alg, tier), chosen_steps(tier, T0))
        big = PARAMS[alg][-1]
        tier = Tier(alg, *big[:4])
        run_steps("%s: chosen sequence near 2^53 %r" % (alg, tier), chosen_steps(tier, T0 + 12_345, big[4]))
        for limit, window, burst, precision, max_cost in PARAMS[alg]:
            tier = Tier(alg, limit, window, burst, precision)
            steps = random_steps(rng, tier, 150, T0, max_cost)
            run_steps("%s: 150 pseudo-random requests %r" % (alg, tier), steps)
    # Clocks that disagree: the rules still hold exactly for these three
    # (the others lose or keep state by design when time goes backwards).
    for alg, burst in (("fixed_window", 0), ("sliding_window_log", 0), ("token_bucket", 8)):
        tier = Tier(alg, 5, 10 * SEC, burst)
        run_steps("%s: 150 requests, now sometimes going backwards" % alg, skewed_steps(rng, tier, 150, T0))


# ------------------------------------------------------------ what is written


def all_tiers():
    """One tier of every algorithm, capacity 5, window 10 s."""
    return [
        Tier(alg, 5, 10 * SEC, burst=4 if alg == "leaky_bucket" else 0,
             precision=SEC if alg == "sliding_window_buckets" else 0)
        for alg in ALGORITHMS
    ]


MARK_MS = 987_654  # a TTL no script would set: windows here are <= 10 s


def snapshot(tiers):
    """Type, content and TTL of every key of the tiers; existing keys get
    the marker TTL first, so that any PEXPIRE by the script shows."""
    snap = {}
    for t in tiers:
        for k in t.keys:
            kind = R.command("TYPE", k)
            if kind == "none":
                snap[k] = None
                continue
            R.command("PEXPIRE", k, MARK_MS)
            if kind == "hash":
                v = R.command("HGETALL", k)
                v = sorted(zip(v[::2], v[1::2]))
            elif kind == "zset":
                v = R.command("ZRANGE", k, 0, -1, "WITHSCORES")
            else:
                v = R.command("GET", k)
            snap[k] = (kind, v)
    return snap


def unchanged(tiers, before):
    """Problems if any key of tiers differs from its snapshot: created,
    changed, or its expiry touched."""
    problems = []
    for t in tiers:
        for k in t.keys:
            if before[k] is None:
                if R.command("EXISTS", k):
                    problems.append("%s was created" % k)
                continue
            now = snapshot_one(k)
            if now != before[k]:
                problems.append("%s changed: %r -> %r" % (k, before[k], now))
            pttl = R.command("PTTL", k)
            if not (MARK_MS - 2000 < pttl <= MARK_MS):
                problems.append("%s: expiry touched (PTTL %d)" % (k, pttl))
    return problems


def snapshot_one(k):
    kind = R.command("TYPE", k)
    if kind == "hash":
        v = R.command("HGETALL", k)
        return (kind, sorted(zip(v[::2], v[1::2])))
    if kind == "zset":
        return (kind, R.command("ZRANGE", k, 0, -1, "WITHSCORES"))
    if kind == "none":
        return None
    return (kind, R.command("GET", k))


def request(now, checks, dry=False):
    """Runs one request; returns the differences from the reference."""
    try:
        got = call(now, checks, dry)
    except harness.RedisError as e:
        got = [None, None, "error: %s" % e.message]
    want, written = reference(now, checks, dry)
    return explain(got, want, checks) if got != want else [], got, written


def report(desc, problems):
    ok(not problems, desc)
    for p in problems[:12]:
        diag(p)


def primed(now):
    """Seven tiers with some state (cost 2 taken at now) and seven fresh."""
    used, fresh = all_tiers(), all_tiers()
    p, _, _ = request(now, [Check(2, used)])
    assert not p, p
    return used, fresh


def blocker(now):
    """A fixed_window tier of limit 1 that is already used up at now."""
    t = Tier("fixed_window", 1, 10 * SEC)
    p, _, _ = request(now, [Check(1, [t])])
    assert not p, p
    return t


def test_writes():
    now = T0 + 1000 * 10 * SEC

    # One tier denies: nothing is written anywhere, in any tier.
    used, fresh = primed(now)
    b = blocker(now)
    everything = used + fresh + [b]
    before = snapshot(everything)
    p, got, _ = request(now + 1, [Check(1, used + fresh + [b])])
    report("multi-tier: one denying tier, nothing written nor expiry touched",
           p + unchanged(everything, before) + ([] if got[1] == 0 else ["request allowed"]))

    # One check denies: the other checks write nothing either.
    before = snapshot(everything)
    p, got, _ = request(now + 2, [Check(1, used), Check(3, fresh), Check(1, [b])])
    report("multi-check: one denying check, nothing written nor expiry touched",
           p + unchanged(everything, before) + ([] if got[1] == 0 else ["request allowed"]))

    # Several checks all allowing: every one is taken, figures and TTLs exact.
    p, got, written = request(now + 3, [Check(1, used), Check(3, fresh)])
    report("multi-check: all allow, every tier written with its TTL",
           p + check_ttls(written) + ([] if len(written) == 14 else ["written %d tiers" % len(written)]))

    # Two checks of one policy (the same settings string, two keys: the
    # script keeps one parse per string, and must not share it within a
    # call): each is decided on its own key.
    a, b = Tier("token_bucket", 2, 10 * SEC), Tier("token_bucket", 2, 10 * SEC)
    p1, _, _ = request(now + 4, [Check(2, [a]), Check(0, [b])])
    p2, got, _ = request(now + 4, [Check(1, [a]), Check(1, [b])])
    p3, _, _ = request(now + 4, [Check(1, [b]), Check(1, [b])])
    report("two checks of one policy in one call: each on its own key",
           p1 + p2 + p3 + ([] if (got[1], got[2], got[9]) == (0, 0, 1) else ["reply %r" % got]))

    # Dry run of an allowed request: reports what the real one reports,
    # writes nothing.
    used, fresh = primed(now)
    everything = used + fresh
    before = snapshot(everything)
    dry = call(now + 5, [Check(2, used), Check(1, fresh)], dry=True)
    after_dry = unchanged(everything, before)
    p, real, written = request(now + 5, [Check(2, used), Check(1, fresh)])
    eq(dry, real, "dry run reports exactly what the real request reports")
    report("dry run writes nothing (real run after it is exact)", after_dry + p + check_ttls(written))

    # Dry run of a denied request.
    b = blocker(now)
    before = snapshot(used + [b])
    dry = call(now + 6, [Check(1, used + [b])], dry=True)
    p = unchanged(used + [b], before)
    real = call(now + 6, [Check(1, used + [b])])
    eq(dry, real, "dry run of a denied request reports what the real one reports")
    report("dry run of a denied request writes nothing", p)

    # Cost 0: allowed even on a used-up tier, writes nothing.
    used, fresh = primed(now)
    b = blocker(now)
    everything = used + fresh + [b]
    before = snapshot(everything)
    p, got, _ = request(now + 7, [Check(0, everything)])
    report("cost 0: allowed everywhere, nothing written nor expiry touched",
           p + unchanged(everything, before) + ([] if got[1] == 1 else ["request denied"]))

    # Cost over capacity: denied with reason 1 and retry -1, nothing written.
    used, fresh = primed(now)
    before = snapshot(used + fresh)
    p, got, _ = request(now + 8, [Check(6, used + fresh)])
    tiers = [got[2 + 7 * i : 9 + 7 * i] for i in range(14)]
    report("cost > capacity: allowed 0, reason 1, retry -1, nothing written",
           p + unchanged(used + fresh, before)
           + ["tier %d: %r" % (i, t) for i, t in enumerate(tiers) if (t[0], t[4], t[6]) != (0, -1, 1)])


def test_limit_lowered():
    """A policy reload can lower a limit under existing state: the figures
    must stay sane (denied, remaining 0, positive reset and retry)."""
    now = T0 + 1500 * 10 * SEC
    used, _ = primed(now)
    p, _, _ = request(now + 1, [Check(3, used)])  # 5 of 5 taken everywhere
    lowered = []
    for t in used:
        low = Tier(t.alg, 2, 10 * SEC, burst=1 if t.alg in ("token_bucket", "gcra", "leaky_bucket") else 0,
                   precision=SEC if t.alg == "sliding_window_buckets" else 0)
        low.keys = t.keys
        lowered.append(low)
    got = call(now + 2, [Check(1, lowered)])
    tiers = [got[2 + 7 * i : 9 + 7 * i] for i in range(len(lowered))]
    bad = ["%s: %r" % (t.alg, f) for t, f in zip(lowered, tiers)
           if not (f[0:3] == [0, t.model.capacity, 0] and f[3] > 0 and f[4] > 0 and f[5:] == [0, 0])]
    report("limit lowered under existing state: denied, remaining 0, positive reset and retry", p + bad)


BUCKETS = ("token_bucket", "gcra", "leaky_bucket")
MINUTE = 60 * SEC


def tier_as(alg, limit, burst, keys=None):
    """A tier of alg per minute (buckets of 5 s), burst for the bucket
    algorithms; on the keys of another tier if given (a reload)."""
    t = Tier(alg, limit, MINUTE, burst if alg in BUCKETS else 0,
             5 * SEC if alg == "sliding_window_buckets" else 0)
    if keys:
        t.keys = keys
    return t


def used_up(alg, base):
    """A tier at 10/min burst 5, used up by cost-1 requests 100 ms apart."""
    t = tier_as(alg, 10, 5)
    for i in range(12):
        call(base + i * 100_000, [Check(1, [t])])
    return t


def figures(now, t, cost):
    """A dry run's 7 figures for one tier."""
    return call(now, [Check(cost, [t])], dry=True)[2:9]


def no_worse(a, b, cost):
    """Is b (allowed, limit, remaining, reset, retry, delay, reason) no
    worse for the caller than a: allowed if a is, no less remaining, no
    longer wait (retry when denied, delay when allowed)?"""
    if a[0] and not b[0]:
        return False
    # remaining as before the request (an allowed dry run reports it after).
    if b[2] + b[0] * cost < a[2] + a[0] * cost:
        return False
    if not a[0] and not b[0] and a[6] == 0 and b[6] == 0 and b[4] > a[4]:
        return False
    return not (a[0] and b[0] and b[5] > a[5])


def greedy(t, start, step, n):
    """Cost-1 requests at start, start + step, ...: how many were allowed."""
    return sum(call(start + i * step, [Check(1, [t])])[1] for i in range(n))


# Dry-run probes after a reload at r: at r itself and at chosen times after
# it (around the emission intervals of 10/min and 20/min, a window later).
PROBES = (0, 1, 999, 2_999_999, 3_000_000, 5_999_999, 6_000_000, 11_000_000, 29_000_000,
          MINUTE - 1, MINUTE + 1)


def test_reload():
    """Settings changed by a reload, read with state written under the old
    ones. Raise (higher limit, or higher limit and burst, same window): at
    the reload and at every probe after it (no traffic in between), the new
    settings leave every caller no worse off than the old ones would have:
    allowed if it was, no less remaining, no longer retry or delay. Cut:
    from the reload on, requests every 250 ms for two windows are allowed no
    more often than on a key that was idle at the reload."""
    base = T0 + 600 * MINUTE + 7 * SEC
    problems = []
    for alg in ALGORITHMS:
        for what, limit, burst in (("limit 10 -> 20", 20, 5), ("limit 10 -> 20, burst 5 -> 10", 20, 10)):
            old = used_up(alg, base)
            new = tier_as(alg, limit, burst, old.keys)
            r = base + 1_500_000
            for dt in PROBES:
                for cost in (1, 2):
                    a, b = figures(r + dt, old, cost), figures(r + dt, new, cost)
                    if not no_worse(a, b, cost):
                        problems.append("%s, %s, at reload + %d us, cost %d: before %r, after %r"
                                        % (alg, what, dt, cost, a, b))
            base += 10 * MINUTE
        for what, limit, burst in (("limit 10 -> 4", 4, 5), ("limit 10 -> 4, burst 5 -> 2", 4, 2),
                                   ("burst 5 -> 2", 10, 2)):
            if alg not in BUCKETS and limit == 10:
                continue
            for partly in (3, 12):  # partly used, used up
                old = tier_as(alg, 10, 5)
                for i in range(partly):
                    call(base + i * 100_000, [Check(1, [old])])
                new, fresh = tier_as(alg, limit, burst, old.keys), tier_as(alg, limit, burst)
                r = base + 1_500_000
                got, idle = greedy(new, r, 250_000, 480), greedy(fresh, r, 250_000, 480)
                if got > idle or got == 0:
                    problems.append("%s, %s, %d used: %d allowed in two windows after the reload, "
                                    "%d on an idle key" % (alg, what, partly, got, idle))
                base += 10 * MINUTE
    report("reload: a raise never leaves a caller worse off, a cut never gives more than an idle key "
           "gets (every algorithm)", problems)

    # The case reported: 10/min burst 5, used up, limit doubled.
    base += 10 * MINUTE
    tb, g = used_up("token_bucket", base), used_up("gcra", base)
    r = base + 1_500_000
    before = [figures(r, t, 1)[4] for t in (tb, g)]
    after = [figures(r, tier_as(t.alg, 20, 5, t.keys), 1)[4] for t in (tb, g)]
    # 5 taken by 400 ms; at 1.5 s 0.25 token (4.5 s to go at 10/min); at
    # 20/min the 1.1 s since the last take refill 0.37 token: 1.7 s to go.
    eq((before, after), ([4_500_000, 4_500_000], [1_700_000, 1_700_000]),
       "reload: 10/min burst 5 used up, limit doubled: retry 4.5 s -> 1.7 s for token_bucket and gcra")


def test_window_changed():
    """A change of window (1 min -> 7 min), on a tier used up at 10/min:
    fixed_window and sliding_window_counter count afresh unless the stored
    window ends where the new one ends (or, for the counter, starts: it is
    then the previous window); the log and the buckets count their units in
    the new window; the bucket algorithms carry whole tokens."""
    base = T0 + 900 * MINUTE
    problems = []
    W2 = 7 * MINUTE
    for alg in ALGORITHMS:
        old = used_up(alg, base)
        r = base + 1_500_000
        longer = Tier(alg, 10, W2, 5 if alg in BUCKETS else 0,
                      5 * SEC if alg == "sliding_window_buckets" else 0)
        longer.keys = old.keys
        f = figures(r, longer, 1)
        e_old, start = (base // MINUTE + 1) * MINUTE, r // W2 * W2
        if alg == "fixed_window":
            want = int(e_old != start + W2)
        elif alg == "sliding_window_counter":
            want = int(e_old not in (start, start + W2))
        else:
            want = 0
        if f[0] != want:
            problems.append("%s: window 1 min -> 7 min: %r, want allowed %d" % (alg, f, want))
        base += 10 * MINUTE
    # 10/min burst 5: 2 taken, 1 more 3 s later (2.5 tokens short), window
    # 1 min -> 2 min at once: rounded to 3 tokens short, so a dry run of cost
    # 1 reports 4 short after it, reset 4 * 12 s (3.5 * 12 s would be exact).
    for alg, want in (("token_bucket", [1, 5, 1, 48 * SEC]), ("gcra", [1, 5, 1, 48 * SEC]),
                      ("leaky_bucket", [1, 6, 2, 48 * SEC])):
        t = tier_as(alg, 10, 5)
        call(base, [Check(2, [t])])
        call(base + 3 * SEC, [Check(1, [t])])
        longer = Tier(alg, 10, 2 * MINUTE, 5)
        longer.keys = t.keys
        f = figures(base + 3 * SEC, longer, 1)
        if f[:4] != want:
            problems.append("%s: 2.5 tokens short, window doubled: %r, want %r" % (alg, f, want))
        base += 10 * MINUTE
    report("reload: a change of window", problems)


def test_shadow():
    now = T0 + 2000 * 10 * SEC

    # A denying shadow check does not deny the request and is not written;
    # the normal check is.
    b, normal = blocker(now), all_tiers()
    before = snapshot([b])
    p, got, written = request(now + 1, [Check(1, normal), Check(1, [b], shadow=True)])
    report("shadow denies, normal allows: request allowed, only normal written",
           p + unchanged([b], before) + check_ttls(written)
           + ([] if got[1] == 1 and len(written) == 7 else ["allowed %d, written %d" % (got[1], len(written))]))

    # An allowing shadow check is not written when the request is denied.
    b, shadow = blocker(now), all_tiers()
    before = snapshot(shadow + [b])
    p, got, _ = request(now + 2, [Check(1, shadow, shadow=True), Check(1, [b])])
    report("shadow allows, normal denies: request denied, nothing written",
           p + unchanged(shadow + [b], before) + ([] if got[1] == 0 else ["request allowed"]))

    # Both allow: both are written.
    shadow, normal = all_tiers(), all_tiers()
    p, got, written = request(now + 3, [Check(2, shadow, shadow=True), Check(1, normal)])
    report("shadow and normal allow: both written",
           p + check_ttls(written) + ([] if len(written) == 14 else ["written %d" % len(written)]))

    # Only shadow checks: the request is allowed; within a shadow check that
    # denies, even its allowing tiers are not written.
    b, mixed, good = blocker(now), all_tiers(), all_tiers()
    before = snapshot(mixed + [b])
    p, got, written = request(now + 4, [Check(1, mixed + [b], shadow=True), Check(1, good, shadow=True)])
    report("only shadow checks: allowed; the denying one writes nothing, the other is written",
           p + unchanged(mixed + [b], before) + check_ttls(written)
           + ([] if got[1] == 1 and len(written) == 7 else ["allowed %d, written %d" % (got[1], len(written))]))


def test_log_members():
    now = T0 + 3000 * 10 * SEC
    t = Tier("sliding_window_log", 10, 10 * SEC)
    other = harness.RedisClient(SERVER.socket_path)  # as if a second daemon
    a = call(now, [Check(3, [t])])
    b = call(now, [Check(3, [t])], client=other)
    other.close()
    members = R.command("ZRANGE", t.keys[0], 0, -1, "WITHSCORES")
    names, scores = members[::2], members[1::2]
    ok(a[1] == 1 and b[1] == 1 and len(names) == 6 and len(set(names)) == 6
       and all(re.fullmatch(r"%d-\d+" % now, n) for n in names) and set(scores) == {str(now)},
       "log: same µs from two connections, six unique members <now>-<seq>")
    if len(set(names)) != 6:
        diag("members: %r" % members)

    # More units in one request than one ZADD call takes (chunked).
    big = Tier("sliding_window_log", 2000, 10 * SEC)
    run_steps("log: cost 1500 then 600 (chunked ZADD), exact figures",
              [(now, [Check(1500, [big])], False), (now + 1, [Check(600, [big])], False),
               (now + 2, [Check(500, [big])], False)])
    eq(R.command("ZCARD", big.keys[0]), 2000, "log: 2000 members after 1500 + 500 units")


def test_gcra_equals_token_bucket():
    rng = random.Random(7)
    problems = []
    for limit, window, burst in ((3, 7 * SEC, 10), (7, 999_983, 0), (BIG_L, BIG_W, 0)):
        tb, g = Tier("token_bucket", limit, window, burst), Tier("gcra", limit, window, burst)
        now, C = T0 + 4000 * 10 * SEC, burst or limit
        for i in range(700):
            now += rng.choice([0, 1, rng.randrange(window // limit + 2), rng.randrange(2 * window)])
            cost = rng.choice([0, 1, 1, rng.randint(1, C), C, C + 1])
            dry = rng.random() < 0.1
            x = call(now, [Check(cost, [tb])], dry)
            y = call(now, [Check(cost, [g])], dry)
            if x != y:
                problems.append("%r step %d: token_bucket %r, gcra %r" % (tb, i, x, y))
                break
    report("gcra and token_bucket: identical replies on 2100 pseudo-random requests", problems)


def test_leaky_delays():
    now = T0 + 5000 * 10 * SEC
    t = Tier("leaky_bucket", 10, SEC, burst=3)
    interval = SEC // 10
    replies = [call(now, [Check(1, [t])]) for _ in range(5)]
    eq([r[2 + 5] for r in replies[:4]], [0, interval, 2 * interval, 3 * interval],
       "leaky_bucket burst 3: delays 0, 1, 2, 3 intervals")
    eq(replies[4][1:], [0, 0, 4, 0, 4 * interval, interval, 0, 0],
       "leaky_bucket: the fifth is denied, retry one interval, limit 4")
    t2 = Tier("leaky_bucket", 10, SEC, burst=3)
    r = call(now, [Check(3, [t2])])
    eq(r[2 + 5], 2 * interval, "leaky_bucket: cost 3 on an idle key waits for its last unit, 2 intervals")


def test_redis_time():
    t = Tier("fixed_window", 5, 10 * SEC)
    before = time.time()
    got = call("", [Check(1, [t])])
    now = got[0]
    ok(abs(now - before * SEC) < 5 * SEC, 'ARGV[1] "" uses Redis TIME (now_us %d, time.time() %.0f)' % (now, before * SEC))
    want, _ = reference(now, [Check(1, [t])])
    eq(got, want, "Redis TIME: figures exact for the time it returned")


def test_kept_strings():
    """The strings the code keeps from call to call (lua/common.lua's
    expiry_until, fixed_window's state strings): with Redis TIME an expiry
    is absolute, the window's end (ms, rounded up) plus the slack, for
    every key that window writes; counts past the kept ones and more window
    ends than are kept at once are written as "f:<end>:<count>" all the
    same."""
    W = 10 * SEC
    fw = "0 fixed_window 1000 %d 0 0" % W
    swc = "0 sliding_window_counter 1000 %d 0 0" % W
    for i in range(3):
        k = "kept:%s:fw:%d" % (CALLER, i)
        now = int(invoke(R, [k], ["", "0", "1", fw])[0])
        end = now - now % W + W
        eq(R.command("PEXPIRETIME", k), -(-end // 1000) + SLACK_MS,
           "clock redis: fixed_window key %d expires at its window's end + slack (PXAT)" % i)
        k = "kept:%s:swc:%d" % (CALLER, i)
        now = int(invoke(R, [k], ["", "0", "1", swc])[0])
        end = now - now % W + 2 * W
        eq(R.command("PEXPIRETIME", k), -(-end // 1000) + SLACK_MS,
           "clock redis: sliding_window_counter key %d expires at the next window's end + slack" % i)
    # 10 window ends in turn (8 are kept at once), counts rising past 64.
    problems = []
    for rnd in range(4):
        for w in range(10):
            k = "kept:%s:n:%d" % (CALLER, w)
            now = T0 + w * W + rnd
            got = invoke(R, [k], [str(now), "0", "30", fw])
            n = 30 * (rnd + 1)
            want = "f:%d:%d" % (T0 + (w + 1) * W, n)
            if got[4] != 1000 - n or R.command("GET", k) != want:
                problems.append("window %d round %d: remaining %r, state %r, want %d, %r"
                                % (w, rnd, got[4], R.command("GET", k), 1000 - n, want))
    report("kept state strings: 10 window ends, counts 30..120", problems)


def test_concurrency():
    """lua/concurrency.lua at chosen times: the same sequence and figures
    as test_concurrency in tests/unit/test_limiter_local.c."""
    key = "cc:" + CALLER
    pol = "0 concurrency 3 %d 0 0" % SEC
    na, nb, nc = "A" * 22, "B" * 22, "C" * 22

    def check(now, cost, nonce=None, dry="0"):
        argv = [str(now), dry, str(cost), pol] + ([nonce] if nonce else [])
        return invoke(R, [key], argv)

    def lease(op, now, member, timeout=0):
        return invoke(R, [key], [str(now), op, member, str(timeout)])

    ms = SEC // 1000
    eq(check(T0, 1, na), [T0, 1, 1, 3, 2, SEC, 0, 0, 0], "concurrency: first lease")
    eq(R.command("ZSCORE", key, "1:" + na), str(T0 + SEC), "the lease: member units:nonce, "
       "scored by its expiry")
    eq(check(T0 + 100 * ms, 2, nb)[2:], [1, 3, 0, SEC, 0, 0, 0], "a cost of 2 holds two units")
    eq(check(T0 + 200 * ms, 1, nc)[2:], [0, 3, 0, 900 * ms, 800 * ms, 0, 0],
       "full: retry when the earliest lease expires")
    eq(check(T0 + 200 * ms, 3, nc)[2:], [0, 3, 0, 900 * ms, 900 * ms, 0, 0],
       "cost 3: retry when both have expired")
    eq(check(T0 + 200 * ms, 4, nc)[2:], [0, 3, 0, 900 * ms, -1, 0, 1], "cost over the limit")
    eq(R.command("ZCARD", key), 2, "denials took no lease")
    eq(lease("r", T0 + 300 * ms, "2:" + na), [T0 + 300 * ms, 0, 0],
       "another cost with the same nonce is unknown")
    eq(lease("r", T0 + 300 * ms, "1:" + na), [T0 + 300 * ms, 1, 0], "release")
    eq(lease("r", T0 + 300 * ms, "1:" + na), [T0 + 300 * ms, 0, 0], "release again: unknown")
    eq(check(T0 + 300 * ms, 1, na)[2:], [1, 3, 0, SEC, 0, 0, 0], "its unit is free again")
    eq(lease("n", T0 + 500 * ms, "2:" + nb, SEC), [T0 + 500 * ms, 1, T0 + 1500 * ms],
       "renew: a lease timeout from now")
    eq(check(T0 + 1200 * ms, 1, nc)[2:], [0, 3, 0, 300 * ms, 100 * ms, 0, 0],
       "before the first lease expires: still full")
    eq(check(T0 + 1350 * ms, 1, nc)[2:], [1, 3, 0, SEC, 0, 0, 0],
       "the lease taken at 300 ms has expired; the renewed holds")
    eq(lease("r", T0 + 1600 * ms, "2:" + nb), [T0 + 1600 * ms, 2, 0],
       "release after expiry: expired, nothing freed")
    eq(lease("n", T0 + 1600 * ms, "2:" + nb, SEC), [T0 + 1600 * ms, 2, 0],
       "renew after expiry: expired, not renewed")
    eq(check(T0 + 5 * SEC, 1, None, "1")[2:], [1, 3, 2, SEC, 0, 0, 0],
       "all expired: a dry run sees everything free")
    e = None
    try:
        check(T0 + 5 * SEC, 1)
    except harness.RedisError as x:
        e = x.message
    ok(e is not None and "nonce" in e, "a real run without a nonce: an error reply")
    eq(R.command("ZCARD", key), 3, "tombstones and live leases until a commit trims them")
    check(T0 + 10 * SEC, 1, na)
    eq(R.command("ZCARD", key), 1, "a commit trims leases expired a lease timeout ago")
    R.command("DEL", key)


def test_abi_errors():
    def error_of(nkeys, *args):
        try:
            invoke(R, args[:nkeys], args[nkeys:])
        except harness.RedisError as e:
            return e.message
        return None

    e = error_of(1, "k", str(T0), "0", "1", "0 no_such_algorithm 5 1000 0 0")
    ok(e is not None and "unknown algorithm" in e, "unknown algorithm: an error reply")
    e = error_of(0, str(T0), "0", "1", "0 fixed_window 5 1000 0 0")
    ok(e is not None and "keys" in e, "too few KEYS: an error reply")
    e = error_of(2, "k", "k2", str(T0), "0", "1", "0 sliding_window_log 5 1000 0 0", "x")
    ok(e is not None, "extra ARGV: an error reply")
    e = error_of(1, "k", str(T0), "0", "1", "0 fixed_window 5 1000 0")
    ok(e is not None and "5 words per tier" in e, "a tier short of a setting: an error reply")
    e = error_of(1, "k", str(T0), "0", "1", "0 fixed_window 5 0 0 0")
    ok(e is not None and "must be integers" in e, "a window of 0: an error reply")
    e = error_of(1, "k", str(T0), "0", "-1", "0 fixed_window 5 1000 0 0")
    ok(e is not None and "ARGV[3]" in e, "a negative cost: an error reply")


def test_integer_division():
    """common.lua's exact division, at the edges of 2^53."""
    path = os.path.join(SRCDIR, "lua", "common.lua")
    with open(path) as f:
        common = f.read()
    body = common + """
bind_globals()
local out = {}
for i = 1, #ARGV, 2 do
    local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    out[#out + 1] = idiv(a, b)
    out[#out + 1] = idiv_ceil(a, b)
end
return out
"""
    rng = random.Random(3)
    big = 2 ** 53
    pairs = [(0, 1), (7, 2), (-7, 2), (6, 3), (-6, 3), (big, 1), (big, 3), (big - 1, 2), (-big, 7),
             (big, big), (big - 1, big), (1, big), (big - 1, 94906267), (big - 2, 3), (-(big - 1), 3)]
    for _ in range(300):
        b = rng.choice([rng.randrange(1, 1000), rng.randrange(1, 2 ** 30), rng.randrange(1, big)])
        a = rng.randrange(-big, big + 1)
        pairs.append((a, b))
    argv = [str(x) for p in pairs for x in p]
    got = R.command("EVAL", body, 0, *argv)
    want = [v for a, b in pairs for v in (a // b, -(-a // b))]
    bad = [(p, got[2 * i : 2 * i + 2], want[2 * i : 2 * i + 2]) for i, p in enumerate(pairs)
           if got[2 * i : 2 * i + 2] != want[2 * i : 2 * i + 2]]
    ok(not bad, "idiv/idiv_ceil exact on %d pairs up to 2^53" % len(pairs))
    for b in bad[:5]:
        diag("%r: got %r want %r" % b)


def test_all_keys_expire():
    keys, cursor = [], "0"
    while True:
        cursor, batch = R.command("SCAN", cursor, "COUNT", 1000)
        keys += batch
        if cursor == "0":
            break
    # -2: expired since SCAN, fine; -1: no expiry.
    forever = [k for k in keys if R.command("PTTL", k) == -1]
    ok(bool(keys) and not forever, "every key written (%d) has a TTL" % len(keys))
    if forever:
        diag("no TTL: %r" % forever[:10])


# ------------------------------------------------------------------ main

SERVER = None
SRCDIR = os.environ.get("RL_SRCDIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def load_library(script):
    """Loads $LOCAL_DRIVER --print-library with FUNCTION LOAD; checks its
    name and that it holds the very code of the EVAL script."""
    global FUNCTION
    driver = harness.find_program("LOCAL_DRIVER", os.path.join("tests", "unit", "local_driver"))
    if not driver:
        harness.bail_out("local_driver not found: build it (make check) or set LOCAL_DRIVER")
    lib = subprocess.run([driver, "--print-library"], stdout=subprocess.PIPE, check=True).stdout
    lines = lib.decode().split("\n")
    m = re.fullmatch(r"#!lua name=(ratelimitd_[0-9a-f]{16})", lines[0])
    ok(m, "library: first line #!lua name=ratelimitd_<16 hex>")
    FUNCTION = m.group(1) if m else "none"
    template = lib.decode().replace(FUNCTION, "@NAME@").encode()
    eq(FUNCTION, "ratelimitd_" + hashlib.sha1(template).hexdigest()[:16],
       "library: the name is the SHA1 of the library without its name")
    body = script.decode().split("\n")
    eq(lines[1:-2], body[:-2], "library: the same code as the EVAL script")
    eq(lines[-2], "redis.register_function{function_name = '%s', callback = decide_any}" % FUNCTION,
       "library: registers decide_any as the function of the same name")
    eq(R.command("FUNCTION", "LOAD", "REPLACE", lib), FUNCTION, "FUNCTION LOAD REPLACE of the library")
    eq(R.command("FUNCTION", "LOAD", "REPLACE", lib), FUNCTION, "FUNCTION LOAD REPLACE again: same name")


def run_suite():
    test_algorithms()
    test_writes()
    test_limit_lowered()
    test_reload()
    test_window_changed()
    test_shadow()
    test_log_members()
    test_gcra_equals_token_bucket()
    test_leaky_delays()
    test_redis_time()
    test_kept_strings()
    test_concurrency()
    test_abi_errors()


def main():
    global R, SHA, SERVER, CALLER
    if harness.find_program("REDIS_SERVER", "redis-server") is None:
        harness.skip_all("redis-server not found (Debian package redis-server)")
    exe = os.environ.get("RATELIMITD")
    if not exe:
        harness.bail_out("set RATELIMITD to the built daemon")
    script = subprocess.run([exe, "--print-script"], stdout=subprocess.PIPE, check=True).stdout
    SERVER = harness.RedisServer().start()
    R = SERVER.client()
    SHA = R.command("SCRIPT", "LOAD", script)
    ok(re.fullmatch(r"[0-9a-f]{40}", SHA), "SCRIPT LOAD of $RATELIMITD --print-script")
    load_library(script)

    started = time.monotonic()
    test_integer_division()
    for CALLER in ("fcall", "evalsha"):
        run_suite()
    CALLER = "both"
    a, b = REPLIES.get("fcall", []), REPLIES.get("evalsha", [])
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    ok(len(a) > 1000 and len(a) == len(b) and first is None,
       "FCALL and EVALSHA: identical replies to %d and %d identical requests" % (len(a), len(b)))
    if first is not None:
        diag("request %d: fcall %r, evalsha %r" % (first, a[first], b[first]))
    test_all_keys_expire()
    diag("%.1f s" % (time.monotonic() - started))


if __name__ == "__main__":
    harness.run(main)
