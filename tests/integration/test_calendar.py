#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_calendar.py: calendar windows (fixed_window with `calendar:`)
through the whole daemon, at chosen dates.

The daemon runs under Debian's libfaketime with a frozen clock read from a
file (FAKETIME_TIMESTAMP_FILE, reread on every call), so a test sets the
date and time to the second: one second before a boundary, the boundary,
and the window after it. Cases: both DST changes of Europe/Berlin and
America/New_York (days of 23 and 25 hours), Asia/Kolkata's half-hour offset,
a billing anchor of the 31st in months of 28, 29 and 30 days, a month that
holds a DST change, a Sunday-first week across one, the year's end.
Every X-RateLimit-Reset, RateLimit t=, Retry-After and reset_ms must be
the boundary python3's zoneinfo gives, RateLimit-Policy must have no w=,
and the answers must be the same with `backend: memory` and with Redis
(`clock: local`, the daemon's faked clock sent to the script).

Under `clock: redis` the script takes Redis TIME (redis-server does not
run under libfaketime: its jemalloc recurses into clock_gettime), so the
script's choice among the bounds it is sent is tested against the real
TIME: the daemon's window, the one before, the one after, and clocks a
whole window apart (an error, never a guess). Also: a window of another
length that ends at the same instant never shares a count, and `-t`
refuses an unknown zone and misplaced calendar fields with file:line:col.
"""

import datetime as dt
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calendar_oracle  # noqa: E402
import harness  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

SEC = 1_000_000
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/faketime/libfaketime.so.1")

# name: (unit, zone, anchor_day, week_start)
TIERS = {
    "berlin_day": ("day", "Europe/Berlin", 0, None),
    "ny_day": ("day", "America/New_York", 0, None),
    "kolkata_day": ("day", "Asia/Kolkata", 0, None),
    "bill31": ("month", "UTC", 31, None),
    "berlin_month": ("month", "Europe/Berlin", 0, None),
    "ny_year": ("year", "America/New_York", 0, None),
    "berlin_week_sun": ("week", "Europe/Berlin", 0, "sunday"),
}
LIMIT = 2

# (policy, the last second of a window in UTC): each case checks that
# second, then the boundary one second later.
CASES = [
    ("berlin_day", "2024-03-30T22:59:59"),  # the next day has 23 hours
    ("berlin_day", "2024-10-26T21:59:59"),  # the next day has 25 hours
    ("ny_day", "2024-03-10T04:59:59"),
    ("ny_day", "2024-11-03T03:59:59"),
    ("kolkata_day", "2024-05-01T18:29:59"),  # +05:30
    ("bill31", "2024-02-28T23:59:59"),  # Jan 31 - Feb 29 (leap), then to Mar 31
    ("bill31", "2023-02-27T23:59:59"),  # Jan 31 - Feb 28
    ("bill31", "2024-04-29T23:59:59"),  # Mar 31 - Apr 30, then to May 31
    ("berlin_month", "2024-02-29T22:59:59"),  # then March, 31 days less an hour
    ("berlin_month", "2024-10-31T22:59:59"),  # October had 31 days and an hour
    ("berlin_week_sun", "2024-10-26T21:59:59"),  # a Sunday-first week across the change
    ("ny_year", "2025-01-01T04:59:59"),
]


def policy_yaml():
    out = ["policies:"]
    for name, (unit, zone, anchor, week) in TIERS.items():
        out.append("  %s:" % name)
        # The deny cache times a denial on the monotonic clock, which
        # libfaketime leaves alone while the test jumps the date.
        out.append("    deny_cache: false")
        out.append("    tiers:")
        out.append("      - name: t")
        out.append("        algorithm: fixed_window")
        out.append("        limit: %d" % LIMIT)
        out.append("        calendar: %s" % unit)
        if zone != "UTC":
            out.append("        timezone: %s" % zone)
        if anchor:
            out.append("        anchor_day: %d" % anchor)
        if week:
            out.append("        week_start: %s" % week)
    return "\n".join(out) + "\n"


def window(name, t):
    """[start, end) in seconds of the window holding instant t (seconds),
    by python3's zoneinfo."""
    unit, zone, anchor, week = TIERS[name]
    return calendar_oracle.window(unit, zone, anchor, week, t)


def utc(s):
    return int(dt.datetime.fromisoformat(s + "+00:00").timestamp())


class Clock:
    """The frozen date the faked daemon reads, from a file."""

    def __init__(self, lib):
        self.path = os.path.join(harness.make_tempdir(), "faketime")
        self.lib = lib
        self.set(utc("2024-01-01T00:00:00"))

    def set(self, t):
        with open(self.path + ".tmp", "w") as f:
            f.write(dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))
        os.rename(self.path + ".tmp", self.path)

    def env(self):
        # Under an ASan build (make distcheck), libfaketime is preloaded
        # ahead of ASan's runtime, which ASan refuses unless told this order
        # is meant.
        asan = ":".join(x for x in (os.environ.get("ASAN_OPTIONS"), "verify_asan_link_order=0")
                        if x)
        return {"LD_PRELOAD": self.lib, "FAKETIME_TIMESTAMP_FILE": self.path,
                "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1", "TZ": "UTC",
                "ASAN_OPTIONS": asan}


def figures(r):
    """What one answer says of when its window ends, in seconds."""
    h = r.headers
    rl = dict(p.split("=", 1) for p in h.get("ratelimit", "").split(";")[1:])
    return dict(status=r.status, reset=int(h.get("x-ratelimit-reset", -1)),
                t=int(rl.get("t", -1)), retry_after=int(h.get("retry-after", -1)),
                reset_ms=r.json["reset_ms"], remaining=r.json["remaining"])


def run_cases(d, clock, label):
    """Every case on daemon d; returns the answers, for comparing backends."""
    seen = []
    for i, (name, last) in enumerate(CASES):
        key = "k%d" % i
        t = utc(last)
        start, end = window(name, t)
        harness.eq(end, t + 1, "%s: %s %s is the last second of its window (zoneinfo)"
                   % (label, name, last))
        clock.set(t)
        got = [figures(d.check(name, key)) for _ in range(LIMIT + 1)]
        harness.eq(got, [dict(status=200, reset=1, t=1, retry_after=-1, reset_ms=1000,
                              remaining=LIMIT - 1),
                         dict(status=200, reset=1, t=1, retry_after=-1, reset_ms=1000,
                              remaining=0),
                         dict(status=429, reset=1, t=1, retry_after=1, reset_ms=1000,
                              remaining=0)],
                   "%s: %s at %s: %d allowed, then denied until the boundary 1 s away"
                   % (label, name, last, LIMIT))
        r = d.check(name, key)
        harness.ok("w=" not in r.headers.get("ratelimit-policy", "w=")
                   and r.headers.get("ratelimit-policy") == '"%s";q=%d' % (name, LIMIT),
                   "%s: RateLimit-Policy %r has no w= for a calendar tier"
                   % (label, r.headers.get("ratelimit-policy")))
        clock.set(end)
        nstart, nend = window(name, end)
        span = nend - end
        r = figures(d.check(name, key))
        harness.eq(r, dict(status=200, reset=span, t=span, retry_after=-1, reset_ms=span * 1000,
                           remaining=LIMIT - 1),
                   "%s: %s at the boundary: a new window of %d s (%.2f days)"
                   % (label, name, span, span / 86400))
        seen.append((got, r))
    return seen


ENVOY_POLICY = """\
policies:
  unused: {tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1s}]}
domains:
  - domain: d
    descriptors:
      - {key: month, rate_limit: {unit: month, requests_per_unit: 3}}
      - {key: year, rate_limit: {unit: year, requests_per_unit: 3}}
      - {key: day, rate_limit: {unit: day, requests_per_unit: 3}}
"""


def envoy_reset(d, key, limit=None):
    desc = {"entries": [{"key": key, "value": "v"}]}
    if limit:
        desc["limit"] = {"requests_per_unit": 3, "unit": limit}
    r = d.request("POST", "/json", '{"domain":"d","descriptors":[%s]}'
                  % json.dumps(desc))
    st = r.json["statuses"][0]
    return st["currentLimit"]["unit"], int(st["durationUntilReset"].rstrip("s"))


def check_envoy_units(clock):
    """envoy_calendar_units: MONTH and YEAR as calendar spans in UTC; off,
    30 and 365 days from the epoch, as envoyproxy/ratelimit."""
    t = utc("2024-02-10T12:00:00")
    clock.set(t)
    for on in (False, True):
        d = Daemon("redis://127.0.0.1:1/0", ENVOY_POLICY, clock="local",
                   extra="backend: memory\nenvoy_calendar_units: %s\n"
                   % ("true" if on else "false"), admin=True).start(env=clock.env())
        month_end = utc("2024-03-01T00:00:00") if on else (t // (30 * 86400) + 1) * 30 * 86400
        year_end = utc("2025-01-01T00:00:00") if on else (t // (365 * 86400) + 1) * 365 * 86400
        day_end = utc("2024-02-11T00:00:00")
        what = "envoy_calendar_units: %s" % ("true" if on else "false")
        harness.eq([envoy_reset(d, "month"), envoy_reset(d, "year"), envoy_reset(d, "day"),
                    envoy_reset(d, "day", limit="MONTH")],
                   [("MONTH", month_end - t), ("YEAR", year_end - t), ("DAY", day_end - t),
                    ("MONTH", month_end - t)],
                   "%s: MONTH, YEAR, DAY and a per-request MONTH reset at %s"
                   % (what, "the 1st, January 1, midnight" if on else "30 and 365 days from the epoch"))
        dump = d.admin("/rlconfig?format=json").json
        tiers = {lim["key"]: lim["policy"]["tiers"][0] for lim in dump["domains"][0]["limits"]}
        harness.eq([tiers[k].get("calendar") for k in ("d.month", "d.year", "d.day")],
                   [{"unit": "month", "timezone": "UTC", "anchor_day": 1, "week_start": "monday"},
                    {"unit": "year", "timezone": "UTC", "anchor_day": 1, "week_start": "monday"},
                    None] if on else [None, None, None],
                   "%s: /rlconfig shows the calendar of MONTH and YEAR" % what)
        d.stop()
    bad = os.path.join(harness.make_tempdir(), "bad.yaml")
    with open(bad, "w") as f:
        f.write("backend: memory\nenvoy_calendar_units: true\n" + ENVOY_POLICY.split("domains:")[0]
                + "domains:\n  - domain: d\n"
                "    descriptors:\n      - {key: m, rate_limit: {unit: month, "
                "requests_per_unit: 3, unit_multiplier: 2}}\n")
    p = subprocess.run([BINARY, "-t", "-c", bad], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    harness.ok(p.returncode != 0 and "unit_multiplier 2 with a calendar MONTH" in p.stderr,
               "a unit_multiplier with a calendar MONTH is refused: %s" % p.stderr.strip())


def check_script_picks(server):
    """The script under clock: redis: bounds around Redis TIME."""
    script = subprocess.run([BINARY, "--print-script"], stdout=subprocess.PIPE,
                            check=True).stdout
    c = server.client()
    sha = c.command("SCRIPT", "LOAD", script)

    def call(key, bounds, cost=1, limit=5):
        pol = "0 calendar_window %d %s 0 0" % (limit, ":".join(str(b) for b in bounds))
        return c.command("EVALSHA", sha, 1, key, "", "0", str(cost), pol)

    sec, usec = c.command("TIME")
    now = int(sec) * SEC + int(usec)
    H = 3600 * SEC
    # The daemon's window holds Redis's now.
    r = call("cal:cur", [now - 2 * H, now - H, now + H, now + 2 * H])
    harness.eq((r[1], r[4], r[5]), (1, 4, now + H - r[0]),
               "clock: redis: now in the daemon's window: reset at its end")
    # Redis is behind the daemon, which already crossed into the next window.
    r = call("cal:prev", [now - H, now + 10 * SEC, now + H, now + 2 * H])
    harness.eq((r[1], r[5]), (1, now + 10 * SEC - r[0]),
               "Redis behind the daemon's boundary: the window before, ending there")
    # Redis is ahead: the daemon's window already ended.
    r = call("cal:next", [now - 2 * H, now - H, now - 10 * SEC, now + H])
    harness.eq((r[1], r[5]), (1, now + H - r[0]),
               "Redis past the daemon's boundary: the next window, ending at its end")
    try:
        call("cal:far", [now + H, now + 2 * H, now + 3 * H, now + 4 * H])
        harness.ok(False, "clocks a window apart: an error")
    except harness.RedisError as e:
        harness.ok("clocks a window apart" in e.message, "clocks a window apart: %s" % e.message)
    # Two windows that end together but start apart never share a count.
    b1 = [now - 3 * H, now - 2 * H, now + H, now + 2 * H]
    b2 = [now - 2 * H, now - H, now + H, now + 2 * H]
    for _ in range(3):
        call("cal:len", b1, limit=3)
    r1 = call("cal:len", b1, limit=3)
    r2 = call("cal:len", b2, limit=3)
    harness.eq((r1[1], r2[1], r2[4]), (0, 1, 2),
               "a window of another length ending at the same instant starts from 0")
    v = c.command("GET", "cal:len")
    harness.eq(v, "w:%d:%d:1" % (b2[1], b2[2]), "the count names its window's start and end")
    pttl = c.command("PTTL", "cal:len")
    # PXAT: the end rounded up to its ms (absolute), against the remaining
    # time's floor here: up to 2 ms above the 1 s slack, never below it.
    harness.ok(0 < pttl - (now + H - r2[0]) // 1000 <= 1002,
               "it expires at the window's end plus the 1 s slack (PTTL %d ms)" % pttl)
    for bad in ("1:2:3", "5:4:3:2", "a:b:c:d"):
        try:
            c.command("EVALSHA", sha, 1, "cal:bad", "", "0", "1",
                      "0 calendar_window 5 %s 0 0" % bad)
            harness.ok(False, "bounds %r refused" % bad)
        except harness.RedisError as e:
            harness.ok("ratelimitd:" in e.message, "bounds %r refused: %s" % (bad, e.message))


def check_config_errors(tmp):
    cases = [
        ("calendar: day\n        timezone: Europe/Berlyn",
         ':9:19: policies.p.tiers[0].timezone: unknown time zone "Europe/Berlyn"'),
        ("calendar: week\n        anchor_day: 31",
         ":9:21: policies.p.tiers[0].anchor_day: only calendar: month takes one"),
        ("calendar: month\n        anchor_day: 32",
         ":9:21: policies.p.tiers[0].anchor_day: "),
        ("calendar: day\n        week_start: sunday",
         ":9:21: policies.p.tiers[0].week_start: only calendar: week takes one"),
        ("calendar: day\n        window: 1d",
         ":9:17: policies.p.tiers[0].window: give window or calendar, not both"),
        ("window: 1d\n        timezone: UTC",
         ":9:19: policies.p.tiers[0].timezone: only a calendar tier takes one"),
        ("calendar: fortnight", ':8:19: policies.p.tiers[0].calendar: unknown calendar'),
        ("calendar: day\n        timezone: ../../etc/passwd",
         ":9:19: policies.p.tiers[0].timezone: \"../../etc/passwd\" is not a time zone name"),
    ]
    for i, (fields, want) in enumerate(cases):
        path = os.path.join(tmp, "bad%d.yaml" % i)
        with open(path, "w") as f:
            f.write("backend: memory\npolicies:\n  p:\n    tiers:\n      - name: t\n"
                    "        algorithm: fixed_window\n        limit: 5\n        %s\n" % fields)
        p = subprocess.run([BINARY, "-t", "-c", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        harness.ok(p.returncode != 0 and (path + want) in p.stderr,
                   "-t refuses %r: %s" % (fields.replace("\n        ", "; "), p.stderr.strip()))
    path = os.path.join(tmp, "gcra.yaml")
    with open(path, "w") as f:
        f.write("backend: memory\npolicies:\n  p:\n    tiers:\n      - name: t\n"
                "        algorithm: gcra\n        limit: 5\n        calendar: day\n")
    p = subprocess.run([BINARY, "-t", "-c", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    harness.ok(p.returncode != 0 and
               ":8:19: policies.p.tiers[0].calendar: only fixed_window takes one, not gcra"
               in p.stderr, "-t refuses a calendar on gcra: %s" % p.stderr.strip())


def main():
    tmp = harness.make_tempdir()
    check_config_errors(tmp)
    if harness.find_program("REDIS_SERVER", "redis-server") is None:
        harness.skip_all("redis-server not found (Debian package redis-server)")
    server = harness.RedisServer().start()
    check_script_picks(server)

    lib = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
    if lib is None:
        harness.skip("libfaketime not found (Debian package faketime): no dated cases")
        return
    clock = Clock(lib)
    mem = Daemon("redis://127.0.0.1:1/0", policy_yaml(), clock="local",
                 extra="backend: memory\nheaders: both\n").start(env=clock.env())
    a = run_cases(mem, clock, "memory")
    mem.stop()
    red = Daemon("unix:" + server.socket_path, policy_yaml(), clock="local",
                 extra="headers: both\n").start(env=clock.env())
    b = run_cases(red, clock, "redis")
    red.stop()
    harness.eq(a, b, "the memory backend and Redis give the same answers")
    check_envoy_units(clock)

    # clock: redis at the real date: a UTC day's reset is the next midnight.
    d = Daemon("unix:" + server.socket_path, "policies:\n  utc_day: {tiers: [{name: t, "
               "algorithm: fixed_window, limit: 5, calendar: day}]}\n", clock="redis").start()
    before = time.time()
    r = d.check("utc_day", "k")
    after = time.time()
    want = (int(before) // 86400 + 1) * 86400
    harness.ok(r.status == 200 and want - after - 1 <= r.json["reset_ms"] / 1000
               <= want - before + 1,
               "clock: redis: reset_ms %d ends at the next UTC midnight" % r.json["reset_ms"])
    d.stop()


if __name__ == "__main__":
    harness.run(main)
