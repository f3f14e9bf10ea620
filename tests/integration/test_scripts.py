#!/usr/bin/env python3
"""test_scripts.py: the rate-limit script, exactly as the daemon carries it
($RATELIMITD --print-script), against a private redis-server.

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
from harness import diag, eq, ok  # noqa: E402

SLACK_MS = 1000  # EXPIRY_SLACK_MS in lua/common.lua
T0 = 1_700_000_000_000_000  # µs; a multiple of every round window below
SEC = 1_000_000
FIELDS = ("allowed", "limit", "remaining", "reset_us", "retry_us", "delay_us", "reason")

R = None  # the RedisClient
SHA = None  # the script's SHA1

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
    """EVALSHA for one request; now is an int, or "" for Redis TIME."""
    keys, argv = [], [str(now), "1" if dry else "0", str(len(checks))]
    for c in checks:
        argv += ["1" if c.shadow else "0", str(c.cost), str(len(c.tiers))]
        for t in c.tiers:
            argv += t.argv
            keys += t.keys
    return (client or R).command("EVALSHA", SHA, len(keys), *keys, *argv)


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


def test_abi_errors():
    def error_of(*args):
        try:
            R.command("EVALSHA", SHA, *args)
        except harness.RedisError as e:
            return e.message
        return None

    e = error_of(1, "k", str(T0), "0", "1", "0", "1", "1", "no_such_algorithm", "5", "1000", "0", "0")
    ok(e is not None and "unknown algorithm" in e, "unknown algorithm: an error reply")
    e = error_of(0, str(T0), "0", "1", "0", "1", "1", "fixed_window", "5", "1000", "0", "0")
    ok(e is not None and "keys" in e, "too few KEYS: an error reply")
    e = error_of(2, "k", "k2", str(T0), "0", "1", "0", "1", "1", "sliding_window_log", "5", "1000", "0", "0", "x")
    ok(e is not None, "extra ARGV: an error reply")


def test_integer_division():
    """common.lua's exact division, at the edges of 2^53."""
    path = os.path.join(SRCDIR, "lua", "common.lua")
    with open(path) as f:
        common = f.read()
    body = common + """
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


def main():
    global R, SHA, SERVER
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

    started = time.monotonic()
    test_integer_division()
    test_algorithms()
    test_writes()
    test_limit_lowered()
    test_shadow()
    test_log_members()
    test_gcra_equals_token_bucket()
    test_leaky_delays()
    test_redis_time()
    test_abi_errors()
    test_all_keys_expire()
    diag("%.1f s" % (time.monotonic() - started))


if __name__ == "__main__":
    harness.run(main)
