#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_local_diff.py: the in-memory algorithms (src/limiter/limiter_local.c) against
the Lua script, request for request.

The same pseudo-random sequences (fixed seeds) of requests (time, key, cost,
dry_run, several checks, reports: POST /report's charges with no decision,
past the limit, and refunds where the algorithm takes them) go to both:
- the C implementation, through tests/unit/local_driver ($LOCAL_DRIVER),
  which reads JSON lines and prints every tier's figures and the expiry of
  every key it holds;
- the script the daemon carries ($RATELIMITD --print-script), loaded into a
  private redis-server and called with EVALSHA exactly as src/backend/redis/scripts.c
  builds the call (KEYS and ARGV built here, now_us in ARGV[1]).
Every request must get the same decision and the same figures from both.

Expiry. Redis expires keys on its own clock, the driver on now_us. So that
the two can be compared, each key's expiry is read (PEXPIRETIME) right
after every call and then removed (PERSIST): Redis never drops state, while
the C store drops it when its expiry (same rounding as the script's
PEXPIRE/PX) passes on now_us. Identical figures across gaps longer than the
windows then show that every expiry is late enough and that an expired key
behaves as absent; and each key written must get the same expiry in both:
PEXPIRETIME - (C expiry - now_us) / 1000 must be the Redis time (ms) of the
call, between a TIME before it and a TIME after it.

Times advance irregularly (same µs, µs steps around emission intervals,
window boundaries, gaps past windows and past the 1 s expiry slack); one
family of scenarios also steps the clock back by less than a second (a
clock behind another daemon's), which the scripts handle explicitly.

Calendar windows (fixed_window with `calendar:`) run last, on a time line
of their own through 2024 into 2025 that visits, to the µs, the boundaries
around month ends of 28, 29, 30 and 31 days, a billing anchor of the 31st,
both daylight saving changes of Europe/Berlin and America/New_York,
Asia/Kolkata's half-hour offset, a Sunday-first week and the year's end.
Their ARGV carries the bounds the daemon computes (local_driver prints the
settings strings scripts_build_call makes); beside C against Lua, every
reset and retry_us of a calendar tier must end at the boundary that
python3's zoneinfo gives, an oracle independent of src/lib/tzif.c.
"""

import datetime as dt

import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calendar_oracle  # noqa: E402
import harness  # noqa: E402
from harness import diag, eq, ok  # noqa: E402

PREFIX = "rl-diff:"
MS = 1000
SEC = 1_000_000
FIELDS = ("allowed", "limit", "remaining", "reset_us", "retry_us", "delay_us", "reason")
SAFE = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:@/+=,!;")
HOSTILE_KEYS = ["a{b}", "x y", "%25", "ключ", "*", "rl-diff:{p:k}:t", "a\r\nb", ";,!", "~"]

# Reads each written key's expiry, then removes it, and reads the time.
EXPIRY_PROBE = """
local r = {}
for i, k in ipairs(KEYS) do
    r[i] = redis.call('PEXPIRETIME', k)
    if r[i] >= 0 then redis.call('PERSIST', k) end
end
local t = redis.call('TIME')
r[#r + 1] = t[1]
r[#r + 1] = t[2]
return r
"""

# --------------------------------------------------------------- policies


def tier(name, algorithm, limit, window_ms, burst=0, precision_ms=0):
    return dict(name=name, algorithm=algorithm, limit=limit, window_us=window_ms * MS,
                burst=burst, precision_us=precision_ms * MS)


POLICIES = {}


def policy(name, tiers, shadow=False):
    POLICIES[name] = dict(name=name, tiers=tiers, shadow=shadow)
    return name


def capacity(t):
    if t["algorithm"] in ("token_bucket", "gcra"):
        return t["burst"] or t["limit"]
    if t["algorithm"] == "leaky_bucket":
        return t["burst"] + 1
    return t["limit"]


SINGLE = {
    "fixed_window": [(5, 1000), (3, 7), (100, 60000)],
    "sliding_window_log": [(5, 1000), (4, 3), (50, 10000)],
    "sliding_window_counter": [(10, 1000), (3, 5), (1000, 60000)],
    "sliding_window_buckets": [(10, 1000, 100), (5, 6, 1), (20, 60000, 1000)],
    "token_bucket": [(5, 1000, 10), (7, 3, 0), (1, 1000, 3), (1000000, 3600000, 0)],
    "gcra": [(5, 1000, 10), (7, 3, 0), (1, 1000, 3), (1000000, 3600000, 0)],
    "leaky_bucket": [(5, 1000, 3), (7, 3, 0), (3, 10, 5)],
}

# concurrency: (limit, lease_timeout_ms); its window_us is the lease timeout.
CONCURRENCY = [(3, 1000), (1, 7), (20, 60000)]
for i, p in enumerate(CONCURRENCY):
    policy("concurrency_%d" % i, [tier("t", "concurrency", p[0], p[1])])
policy("multi_lease", [
    tier("fw", "fixed_window", 6, 50),
    tier("cc", "concurrency", 3, 30),
    tier("tb", "token_bucket", 4, 10, burst=5),
])

for alg, sets in SINGLE.items():
    for i, p in enumerate(sets):
        if alg == "sliding_window_buckets":
            t = tier("t", alg, p[0], p[1], precision_ms=p[2])
        elif alg in ("token_bucket", "gcra", "leaky_bucket"):
            t = tier("t", alg, p[0], p[1], burst=p[2])
        else:
            t = tier("t", alg, p[0], p[1])
        policy("%s_%d" % (alg, i), [t])

policy("multi_a", [
    tier("burst", "token_bucket", 10, 1000, burst=20),
    tier("log", "sliding_window_log", 30, 5000),
    tier("minute", "fixed_window", 50, 60000),
])
policy("multi_b", [
    tier("g", "gcra", 3, 10),
    tier("lb", "leaky_bucket", 2, 5, burst=2),
    tier("swc", "sliding_window_counter", 10, 50),
    tier("swb", "sliding_window_buckets", 15, 100, precision_ms=10),
])
policy("multi_all", [
    tier("fw", "fixed_window", 8, 20),
    tier("log", "sliding_window_log", 6, 15),
    tier("swc", "sliding_window_counter", 9, 25),
    tier("swb", "sliding_window_buckets", 7, 30, precision_ms=5),
    tier("tb", "token_bucket", 4, 10, burst=6),
    tier("gcra", "gcra", 5, 12, burst=2),
    tier("lb", "leaky_bucket", 3, 9, burst=1),
])
policy("shadow_a", [
    tier("fw", "fixed_window", 3, 10),
    tier("tb", "token_bucket", 2, 5),
], shadow=True)
policy("shadow_b", [tier("log", "sliding_window_log", 2, 8)], shadow=True)


# Calendar tiers: (unit, zone, anchor_day, week_start) beside the usual
# fields; window_us is unused (the daemon sends bounds).
def cal_tier(name, limit, unit, zone="UTC", anchor=0, week_start=None):
    t = tier(name, "fixed_window", limit, 0)
    t.update(calendar=unit, timezone=zone, anchor_day=anchor, week_start=week_start)
    return t


CALENDAR = [
    policy("cal_day_berlin", [cal_tier("d", 5, "day", "Europe/Berlin")]),
    policy("cal_day_ny", [cal_tier("d", 4, "day", "America/New_York")]),
    policy("cal_day_kolkata", [cal_tier("d", 3, "day", "Asia/Kolkata")]),
    policy("cal_week_ny", [cal_tier("w", 6, "week", "America/New_York", week_start="sunday")]),
    policy("cal_month_utc", [cal_tier("m", 5, "month")]),
    policy("cal_month_31", [cal_tier("m", 4, "month", "Europe/Berlin", anchor=31)]),
    policy("cal_month_kolkata", [cal_tier("m", 4, "month", "Asia/Kolkata", anchor=30)]),
    policy("cal_year", [cal_tier("y", 7, "year", "Europe/Berlin")]),
    policy("cal_multi", [cal_tier("day", 3, "day", "America/New_York"),
                         cal_tier("month", 8, "month", "America/New_York", anchor=15),
                         tier("second", "fixed_window", 2, 1000)]),
]


def py_window(t, now_us):
    """The calendar window [start, end) in µs by python3's zoneinfo."""
    start, end = calendar_oracle.window(t["calendar"], t["timezone"], t["anchor_day"],
                                        t["week_start"], now_us // SEC)
    return start * SEC, end * SEC


def calendar_timeline(rng):
    """Instants (µs, ascending) at and around every calendar boundary near
    the dates that matter, with a few in between."""
    dates = ["2024-02-27", "2024-02-28", "2024-02-29", "2024-03-01", "2024-03-09", "2024-03-10",
             "2024-03-30", "2024-03-31", "2024-04-29", "2024-04-30", "2024-05-01", "2024-05-30",
             "2024-05-31", "2024-10-26", "2024-10-27", "2024-11-02", "2024-11-03",
             "2024-12-31", "2025-01-01", "2025-02-27", "2025-02-28", "2025-03-01"]
    bounds = set()
    for d in dates:
        base = int(dt.datetime.fromisoformat(d + "T12:00:00+00:00").timestamp()) * SEC
        for p in CALENDAR:
            for t in POLICIES[p]["tiers"]:
                if t.get("calendar"):
                    for off in (-36, -12, 0, 12, 36):
                        bounds.update(py_window(t, base + off * 3600 * SEC))
    times = set()
    for b in bounds:
        for d in (-SEC, -1, 0, 1, 1, 2, SEC // 2, 3 * SEC):
            times.add(b + d)
        times.add(b + rng.randint(1, 20 * 3600) * SEC)
    return sorted(times)


def calendar_scenario(seed):
    rng = random.Random(seed)
    keys = ["c%d" % seed, "d%d" % seed]
    out = []
    for now in calendar_timeline(rng):
        for _ in range(rng.randint(1, 2)):
            pols = rng.sample(CALENDAR, rng.randint(1, 2))
            checks = [(p, rng.choice(keys), random_cost(rng, min(capacity(t) for t in
                                                                 POLICIES[p]["tiers"])))
                      for p in pols]
            r = rng.random()
            if r < 0.15:  # a report (POST /report), a refund when negative
                checks = [(p, k, rng.randint(-3, 5)) for p, k, _ in checks]
                out.append((now, "report", checks, None))
            else:
                out.append((now, r < 0.25, checks, None))
    return out


def yaml_text():
    out = ["redis:", "  key_prefix: \"%s\"" % PREFIX, "policies:"]
    for p in POLICIES.values():
        out.append("  %s:" % p["name"])
        out.append("    shadow: %s" % ("true" if p["shadow"] else "false"))
        out.append("    tiers:")
        for t in p["tiers"]:
            out.append("      - name: %s" % t["name"])
            out.append("        algorithm: %s" % t["algorithm"])
            out.append("        limit: %d" % t["limit"])
            if t.get("calendar"):
                out.append("        calendar: %s" % t["calendar"])
                out.append("        timezone: %s" % t["timezone"])
                if t["anchor_day"]:
                    out.append("        anchor_day: %d" % t["anchor_day"])
                if t["week_start"]:
                    out.append("        week_start: %s" % t["week_start"])
            else:
                out.append("        %s: %dms" % ("lease_timeout" if t["algorithm"] == "concurrency"
                                                   else "window", t["window_us"] // MS))
            if t["burst"]:
                out.append("        burst: %d" % t["burst"])
            if t["precision_us"]:
                out.append("        precision: %dms" % (t["precision_us"] // MS))
    return "\n".join(out) + "\n"


# --------------------------------------------------------- the script ABI


def redis_key(pol, key, tier_name, suffix=None):
    """policy_redis_key: <prefix>{<policy>:<encoded key>}:<tier>[:<suffix>]."""
    enc = "".join(chr(b) if b in SAFE else "%%%02X" % b for b in key.encode("utf-8"))
    k = "%s{%s:%s}:%s" % (PREFIX, pol, enc, tier_name)
    return k + ":" + suffix if suffix else k


def nonce_of(i):
    """The lease nonce of request i: 22 base64url characters."""
    return ("n%021d" % i)[-22:]


def takes_leases(dry, checks):
    """check.c gives a nonce to a real request with a concurrency tier."""
    return not dry and any(t["algorithm"] == "concurrency"
                           for p, _, _ in checks for t in POLICIES[p]["tiers"])


REFUNDS = ("fixed_window", "token_bucket", "gcra", "leaky_bucket")  # policy_algorithm_refunds


def script_call(now, dry, checks, nonce=None):
    """KEYS and ARGV as scripts_build_call builds them (dry "report": a
    report, SCRIPTS_REPORT)."""
    keys, argv = [], [str(now), "3" if dry == "report" else "1" if dry else "0"]
    for pol, key, cost in checks:
        p = POLICIES[pol]
        words = ["1" if p["shadow"] else "0"]
        for t in p["tiers"]:
            keys.append(redis_key(pol, key, t["name"]))
            if t["algorithm"] == "sliding_window_log":
                keys.append(redis_key(pol, key, t["name"], "seq"))
            words += [t["algorithm"], str(t["limit"]), str(t["window_us"]), str(t["burst"]),
                      str(t["precision_us"])]
        argv += [str(cost), " ".join(words)]
    if nonce:
        argv.append(nonce)
    return keys, argv


# ------------------------------------------------------------ the sequences


class Clock:
    """One time line for the whole test. Mostly forward, irregular."""

    def __init__(self):
        self.now = 1_700_000_000_000_000
        self.max_seen = self.now

    def advance(self, rng, tiers, skew=False):
        W = max(t["window_us"] for t in tiers)
        w = rng.choice(tiers)["window_us"]
        step = max(1, min(-(-t["window_us"] // t["limit"]) for t in tiers))
        r = rng.random()
        if r < 0.15:
            pass  # the same µs
        elif r < 0.50:
            self.now += rng.randint(1, 2 * step)
        elif r < 0.72:
            self.now += rng.randint(1, max(1, w // 4))
        elif r < 0.84:
            # At a window (or bucket) boundary, or one µs either side.
            t = rng.choice(tiers)
            unit = t["precision_us"] or t["window_us"]
            self.now = (self.now // unit + 1) * unit + rng.choice((-1, 0, 0, 1))
        elif r < 0.94:
            self.now += rng.randint(w, 2 * W)  # past a window
        else:
            self.now += rng.randint(2 * W, 3 * W + 2 * SEC)  # past the slack too
        self.max_seen = max(self.max_seen, self.now)
        if skew and rng.random() < 0.12:
            # A clock behind: less than the 1 s of slack behind the latest
            # time seen, so that a key this clock finds expired (the C side)
            # and one Redis still holds (PERSISTed) mean the same.
            self.now = self.max_seen - rng.randint(1, 999_999)
        elif self.now < self.max_seen:
            self.now = self.max_seen
        return self.now


def random_cost(rng, cap):
    r = rng.random()
    if r < 0.06:
        return 0
    if r < 0.50:
        return 1
    if r < 0.82:
        return rng.randint(1, max(1, min(cap, 12)))
    if r < 0.90:
        return rng.randint(1, cap)
    if r < 0.95:
        return cap
    return cap + rng.randint(1, 3)


def report_cost(rng, pol):
    """A report's cost: up to 3 capacities (past the limit), or a refund
    where every tier of pol takes one."""
    tiers = POLICIES[pol]["tiers"]
    cap = min(capacity(t) for t in tiers)
    if all(t["algorithm"] in REFUNDS for t in tiers) and rng.random() < 0.4:
        return -rng.randint(1, 2 * cap)
    return rng.randint(0, 3 * cap)


def scenario(seed, policies, n, keys, max_checks=1, skew=False, clock=None, reports=0.0):
    """n requests as (now, dry, [(policy, key, cost)...], nonce), dry
    "report" for a report (a share `reports` of them), and with
    concurrency tiers releases as (now, None, [lease...], None): a lease
    (policy, key, tier, units, nonce) of an earlier request (taken or not,
    released already or not, expired or not) or a forged one."""
    rng = random.Random(seed)
    tiers = [t for p in policies for t in POLICIES[p]["tiers"]]
    out, asked = [], []
    for _ in range(n):
        now = clock.advance(rng, tiers, skew)
        if asked and rng.random() < 0.3:
            leases = []
            for _ in range(rng.randint(1, 3)):
                # Mostly a recent one: still held, so that releases free.
                recent = asked[-4:] if rng.random() < 0.7 else asked
                pol, key, tname, units, nonce = rng.choice(recent)
                r = rng.random()
                if r < 0.1:
                    units += 1  # forged: another cost
                elif r < 0.2:
                    nonce = nonce_of(rng.randint(0, 10 ** 6))  # forged: another nonce
                leases.append((pol, key, tname, units, nonce))
            out.append((now, None, leases, None))
            continue
        nchecks = rng.randint(1, max_checks)
        pairs = set()
        checks = []
        while len(checks) < nchecks:
            pol, key = rng.choice(policies), rng.choice(keys)
            if (pol, key) in pairs:  # check_json.c merges duplicates: never sent
                continue
            pairs.add((pol, key))
            cap = min(capacity(t) for t in POLICIES[pol]["tiers"])
            checks.append((pol, key, random_cost(rng, cap)))
        if reports and rng.random() < reports:
            out.append((now, "report", [(p, k, report_cost(rng, p)) for p, k, _ in checks],
                        None))
            continue
        dry = rng.random() < 0.1
        nonce = nonce_of(seed * 100000 + len(out)) if takes_leases(dry, checks) else None
        for pol, key, cost in checks:
            for t in POLICIES[pol]["tiers"]:
                if nonce and t["algorithm"] == "concurrency" and cost > 0:
                    asked.append((pol, key, t["name"], cost, nonce))
        out.append((now, dry, checks, nonce))
    return out


# --------------------------------------------------------------- the runner


class Diff:
    def __init__(self, redis, sha, probe_sha, driver):
        self.r, self.sha, self.probe, self.driver = redis, sha, probe_sha, driver
        self.expiry = {}  # key -> the C expiry last seen (µs, -1 none)
        self.max_seen = 0  # the latest now_us so far
        # How much of the ground the sequences covered.
        self.stats = dict.fromkeys(("allowed", "denied", "dry", "report", "refund",
                                    "cost_exceeds", "retry",
                                    "delay", "expiry_compared", "stale_in_redis", "released",
                                    "calendar_boundary"), 0)

    def local(self, now, dry, checks, nonce=None):
        req = {"now_us": now, "dry_run": dry is True, "report": dry == "report",
               "checks": [{"policy": p, "key": k, "cost": c} for p, k, c in checks]}
        if nonce:
            req["nonce"] = nonce
        self.driver.stdin.write(json.dumps(req) + "\n")
        self.driver.stdin.flush()
        line = self.driver.stdout.readline()
        if not line:
            raise RuntimeError("local_driver exited (status %s)" % self.driver.poll())
        return json.loads(line)

    def release(self, now, leases):
        """Releases leases on both; returns a list of differences."""
        self.max_seen = max(self.max_seen, now)
        req = {"now_us": now, "release": [dict(policy=p, key=k, tier=t, units=u, nonce=n)
                                          for p, k, t, u, n in leases]}
        self.driver.stdin.write(json.dumps(req) + "\n")
        self.driver.stdin.flush()
        loc = json.loads(self.driver.stdout.readline())
        keys = [redis_key(p, k, t) for p, k, t, _, _ in leases]
        argv = [str(now), "r"]
        for _, _, _, u, n in leases:
            argv += ["%d:%s" % (u, n), "0"]
        lua = self.r.command("EVALSHA", self.sha, len(keys), *keys, *argv)
        probe = self.r.command("EVALSHA", self.probe, len(keys), *keys)
        diffs = []
        self.stats["released"] += sum(1 for x in loc["outcomes"] if x == 1)
        for i, (key, exp) in enumerate(loc["keys"]):
            got, want = lua[1 + 2 * i], loc["outcomes"][i]
            prev = self.expiry.get(key)
            # Redis holds every key (PERSISTed), the C store drops one
            # whose expiry passed (-1 since): a tombstone there is nothing
            # here.
            gone = prev is not None and prev < now
            if got != want and not (gone and got == 2 and want == 0):
                diffs.append("%s: release lua %r, C %r" % (key, got, want))
            pe = probe[i]
            self.expiry[key] = exp
            if pe == -2 and exp != -1 and not gone:
                diffs.append("%s: emptied in Redis, C expiry %d" % (key, exp))
            elif pe >= 0:
                diffs.append("%s: a release set an expiry in Redis" % key)
        return diffs

    def one(self, now, dry, checks, nonce=None):
        """Runs one request on both; returns a list of differences."""
        if dry is None:
            return self.release(now, checks)
        self.max_seen = max(self.max_seen, now)
        keys, argv = script_call(now, dry, checks, nonce)
        loc = self.local(now, dry, checks, nonce)
        diffs = []
        for i, (pol, _, _) in enumerate(checks):
            if any(t.get("calendar") for t in POLICIES[pol]["tiers"]):
                # the bounds come from src/lib/calendar.c, checked below
                argv[3 + 2 * i] = loc["policies"][i]
            elif loc["policies"][i] != argv[3 + 2 * i]:
                diffs.append("%s: C sends %r, expected %r" % (pol, loc["policies"][i],
                                                              argv[3 + 2 * i]))
        sec, usec = self.r.command("TIME")
        t0 = int(sec) * 1000 + int(usec) // 1000
        lua = self.r.command("EVALSHA", self.sha, len(keys), *keys, *argv)
        probe = self.r.command("EVALSHA", self.probe, len(keys), *keys)
        t1 = int(probe[-2]) * 1000 + int(probe[-1]) // 1000
        pexp = probe[:-2]

        if lua[0] != now:
            diffs.append("script now_us %r" % lua[0])
        if lua[1] != loc["allowed"]:
            diffs.append("request allowed: lua %r, C %r" % (lua[1], loc["allowed"]))
        flat = [v for t in loc["tiers"] for v in t]
        if lua[2:] != flat:
            tiers = [(p, t["name"]) for p, _, _ in checks for t in POLICIES[p]["tiers"]]
            for i, (pol, name) in enumerate(tiers):
                for f, a, b in zip(FIELDS, lua[2 + 7 * i: 9 + 7 * i], loc["tiers"][i]):
                    if a != b:
                        diffs.append("%s.%s %s: lua %r, C %r" % (pol, name, f, a, b))
        tiers = [t for p, _, _ in checks for t in POLICIES[p]["tiers"]]
        for t, fig in zip(tiers, loc["tiers"]):
            if not t.get("calendar"):
                continue
            start, end = py_window(t, now)
            for f, v in (("reset_us", fig[3]), ("retry_us", fig[4])):
                if v > 0 and now + v != end:
                    diffs.append("%s %s %s: ends at %d, zoneinfo's window [%d, %d)"
                                 % (t["calendar"], t["timezone"], f, now + v, start, end))
            self.stats["calendar_boundary"] += fig[3] > 0 and end - now <= 3 * SEC
        st = self.stats
        st["allowed" if lua[1] else "denied"] += 1
        st["dry"] += dry is True
        st["report"] += dry == "report"
        st["refund"] += dry == "report" and any(c < 0 for _, _, c in checks)
        for t in loc["tiers"]:
            st["cost_exceeds"] += t[6]
            st["retry"] += t[4] > 0
            st["delay"] += t[5] > 0
        names = [k for k, _ in loc["keys"]]
        if names != keys:
            diffs.append("keys: C %r, script %r" % (names, keys))
            return diffs
        for (key, exp), pe in zip(loc["keys"], pexp):
            prev = self.expiry.get(key)
            self.expiry[key] = exp
            if pe >= 0:  # written by this call: the same expiry
                st["expiry_compared"] += 1
                d = exp - now
                if exp < 0 or d % MS or not t0 <= pe - d // MS <= t1:
                    diffs.append("%s: Redis expires at %d ms (call at %d..%d ms), C in %d us"
                                 % (key, pe, t0, t1, d))
            elif pe == -1:  # exists, not written: the C side unchanged or expired
                st["stale_in_redis"] += exp == -1
                if exp != -1 and exp != prev:
                    diffs.append("%s: C expiry changed to %d (Redis key not written)" % (key, exp))
                if exp == -1 and prev not in (None, -1) and now <= prev and now == self.max_seen:
                    diffs.append("%s: C dropped a key that expires at %d > now" % (key, prev))
            else:  # never written
                if exp != -1 or prev not in (None, -1):
                    diffs.append("%s: absent in Redis, C expiry %r (was %r)" % (key, exp, prev))
        return diffs

    def run(self, name, requests):
        bad = []
        for i, (now, dry, checks, nonce) in enumerate(requests):
            d = self.one(now, dry, checks, nonce)
            if d:
                bad.append((i, now, dry, checks, d))
        if not ok(not bad, "%s: %d requests, identical decisions, figures and expiries"
                  % (name, len(requests))):
            for i, now, dry, checks, d in bad[:5]:
                diag("request %d now=%d dry=%r checks=%r" % (i, now, dry, checks))
                for line in d[:10]:
                    diag("  " + line)
            diag("%d of %d requests differ" % (len(bad), len(requests)))
        return len(requests)


# -------------------------------------------------------------------- main


def main():
    if harness.find_program("REDIS_SERVER", "redis-server") is None:
        harness.skip_all("redis-server not found (Debian package redis-server)")
    exe = os.environ.get("RATELIMITD")
    if not exe:
        harness.bail_out("set RATELIMITD to the built daemon")
    driver_path = harness.find_program("LOCAL_DRIVER", os.path.join("tests", "unit", "local_driver"))
    if not driver_path:
        harness.bail_out("local_driver not found: build it (make check) or set LOCAL_DRIVER")
    driver_path = os.path.abspath(driver_path)

    script = subprocess.run([exe, "--print-script"], stdout=subprocess.PIPE, check=True).stdout
    server = harness.RedisServer().start()
    r = server.client()
    sha = r.command("SCRIPT", "LOAD", script)
    probe = r.command("SCRIPT", "LOAD", EXPIRY_PROBE)

    tmp = harness.make_tempdir()
    conf = os.path.join(tmp, "policies.yaml")
    with open(conf, "w") as f:
        f.write(yaml_text())
    driver = subprocess.Popen([driver_path, conf], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, encoding="utf-8", errors="surrogateescape")
    harness.at_exit(lambda: harness.stop_process(driver))
    diff = Diff(r, sha, probe, driver)

    started = time.monotonic()
    clock = Clock()
    total = 0
    seed = 1000
    # Each algorithm alone, every parameter set, with its own keys.
    for alg, sets in SINGLE.items():
        for i in range(len(sets)):
            pol = "%s_%d" % (alg, i)
            seed += 1
            keys = ["k%d" % seed, "j%d" % seed, random.Random(seed).choice(HOSTILE_KEYS) + str(seed)]
            total += diff.run("%s (seed %d)" % (pol, seed),
                              scenario(seed, [pol], 220, keys, clock=clock))
    # Concurrency leases, taken and released, alone and beside rate tiers.
    for pols in (["concurrency_0"], ["concurrency_1"], ["concurrency_2"],
                 ["multi_lease", "concurrency_0"], ["multi_lease", "fixed_window_0", "shadow_b"]):
        seed += 1
        keys = ["c%d" % seed, HOSTILE_KEYS[seed % len(HOSTILE_KEYS)] + str(seed)]
        total += diff.run("%s (seed %d)" % ("+".join(pols), seed),
                          scenario(seed, pols, 400, keys, max_checks=2, clock=clock))
    # Multi-tier policies, several checks per request, shadow checks.
    mixes = [
        ["multi_a"],
        ["multi_b"],
        ["multi_all"],
        ["multi_a", "multi_b", "shadow_a"],
        ["multi_all", "shadow_a", "shadow_b", "fixed_window_1", "gcra_1"],
        ["leaky_bucket_1", "sliding_window_log_1", "sliding_window_buckets_1", "shadow_b"],
    ]
    for pols in mixes:
        seed += 1
        keys = ["m%d" % seed, "n%d" % seed, HOSTILE_KEYS[seed % len(HOSTILE_KEYS)] + str(seed)]
        total += diff.run("%s (seed %d)" % ("+".join(pols), seed),
                          scenario(seed, pols, 400, keys, max_checks=3, clock=clock))
    # A clock that sometimes steps back (less than a second: the scripts'
    # expiry slack, so that what the C store has dropped Redis would have
    # dropped too).
    for pols in (["fixed_window_1", "fixed_window_0"], ["sliding_window_log_0", "sliding_window_log_1"],
                 ["sliding_window_counter_0", "sliding_window_counter_1"],
                 ["sliding_window_buckets_0", "sliding_window_buckets_1"],
                 ["token_bucket_0", "token_bucket_1"], ["gcra_0", "gcra_1"],
                 ["leaky_bucket_0", "leaky_bucket_2"], ["multi_a", "shadow_a"]):
        seed += 1
        keys = ["s%d" % seed, "t%d" % seed]
        total += diff.run("clock behind: %s (seed %d)" % ("+".join(pols), seed),
                          scenario(seed, pols, 200, keys, max_checks=2, skew=True, clock=clock))
    # Reports (POST /report): charges past the limit, then checks that wait
    # the debt out, and refunds; every algorithm that takes them (not
    # concurrency: check_json.c refuses it), then several checks.
    for pols in [[p] for p in sorted(POLICIES) if not POLICIES[p]["shadow"]
                 and p.endswith(("_0", "_1")) and not p.startswith("concurrency")] + mixes:
        seed += 1
        keys = ["r%d" % seed, HOSTILE_KEYS[seed % len(HOSTILE_KEYS)] + str(seed)]
        total += diff.run("reports: %s (seed %d)" % ("+".join(pols), seed),
                          scenario(seed, pols, 150, keys, max_checks=min(3, len(pols) * len(keys)),
                                   clock=clock, reports=0.3))
    # Calendar windows, on their own time line (after the one above).
    seed += 1
    total += diff.run("calendar windows (seed %d)" % seed, calendar_scenario(seed))
    driver.stdin.close()
    eq(driver.wait(10), 0, "local_driver exits 0")
    diag("%d requests in %.1f s" % (total, time.monotonic() - started))
    diag(", ".join("%s %d" % kv for kv in diff.stats.items()))
    ok(all(diff.stats.values()), "the sequences reach every case counted above")


if __name__ == "__main__":
    harness.run(main)
