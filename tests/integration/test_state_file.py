# SPDX-License-Identifier: Apache-2.0
"""test_state_file.py: `state_file:`, the in-memory counters kept across a
stop (src/backend/memory_state.c, src/limiter/store_file.c).

The daemon runs under libfaketime with a frozen wall clock (test_calendar's
Clock), so that nothing is spent or refilled by time between two answers
unless the test moves the clock. Cases: every algorithm's figures (the 7
and calendar_window) and a concurrency lease equal after a SIGTERM and a
start, the lease still releasable and never counted twice; a 60 s window
continued across a 30 s outage (7 of 10 used 20 s in: 3 left, ending at
the same wall time); entries expired during the outage dropped; the
failure_mode local store (Redis down) carried too; the file 0600; periodic
writes (metrics) of a 6 MB image, read in a loop meanwhile: always whole;
kill -9 the moment a write's temporary appears, until 3 writes are cut:
the old file read whole each time; truncated, corrupted, foreign-version,
empty, foreign and missing files: a warning and an empty start; a
directory that takes no file: an error at start."""
import json
import os
import signal
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import ALGORITHMS, Daemon, metric  # noqa: E402
from test_calendar import FAKETIME_LIBS, Clock, utc  # noqa: E402

NO_REDIS = "redis://127.0.0.1:1/0"
LIMIT = 10
POLICIES = dict(
    {a: "algorithm: %s, limit: %d, window: 60s%s" % (a, LIMIT, extra.replace("1m", "5s"))
     for a, extra in ALGORITHMS.items()},
    calendar="algorithm: fixed_window, limit: %d, calendar: day" % LIMIT,
    conc="algorithm: concurrency, limit: %d, lease_timeout: 1h" % LIMIT)
POLICY = "policies:\n" + "".join(
    "  %s: {deny_cache: false, tiers: [{name: t, %s}]}\n" % (p, t) for p, t in POLICIES.items()) + (
    # 16 tiers: one check is 16 entries, one request of 64 checks 1024.
    "  wide: {deny_cache: false, tiers: [%s]}\n" % ", ".join(
        "{name: t%d, algorithm: fixed_window, limit: 9, window: 1h}" % i for i in range(16)))
# 20 s into a minute: a 60 s fixed window then has 40 s to run.
T0 = utc("2025-03-01T10:00:20")


def figures(d, policy, key="k"):
    """What a dry run says of policy's key: nothing spent by asking."""
    r = d.check(policy, key, cost=0, dry_run=True)
    return {f: r.json[f] for f in ("remaining", "reset_ms", "retry_after_ms")}


class StateDaemon(Daemon):
    """A daemon under the frozen clock whose log() is its last run's."""

    def __init__(self, clock, policy, extra):
        super().__init__(NO_REDIS, policy, extra=extra)
        self.clock, self.mark = clock, 0

    def start(self, wait_ready=True):
        self.mark = os.path.getsize(self.logfile) if os.path.exists(self.logfile) else 0
        return super().start(wait_ready=wait_ready, env=self.clock.env())

    def log(self):
        return self.logs()[self.mark:]


def memory_daemon(clock, state, extra=""):
    return StateDaemon(clock, POLICY, "backend: memory\nstate_file: %s\n%s" % (state, extra))


def restart(d):
    harness.eq(d.stop(), 0, "SIGTERM: exits 0")
    return d.start()


def every_algorithm(tmp, clock):
    state = os.path.join(tmp, "every", "state")
    os.mkdir(os.path.dirname(state))
    d = memory_daemon(clock, state).start()
    harness.ok("no state file: starting empty" in d.log(), "a missing file: an empty start")
    for p in POLICIES:
        r = d.check(p, "k", cost=7 if p != "conc" else 3)
        harness.eq(r.status, 200, "%s: spent" % p)
    lease = r.json["leases"][0]["id"]
    before = {p: figures(d, p) for p in POLICIES}
    d = restart(d)
    harness.eq(os.stat(state).st_mode & 0o777, 0o600, "the file is 0600")
    harness.ok("state file read" in d.log() and "keys=%d" % len(POLICIES) in d.log(),
               "the start reads every key")
    for p in POLICIES:
        harness.eq(figures(d, p), before[p], "%s: the same figures after the restart" % p)
    harness.eq(d.check("conc", "k", cost=8).status, 429,
               "the lease still holds its 3 units: 8 more are refused")
    r = d.request("POST", "/release", json.dumps({"leases": [lease]}))
    harness.eq(r.json["released"], 1, "the lease taken before the stop is released after it")
    harness.eq(figures(d, "conc")["remaining"], LIMIT, "and its units are free, once")
    r = d.request("POST", "/release", json.dumps({"leases": [lease]}))
    harness.eq(r.json["released"], 0, "releasing it again frees nothing")
    d.stop()


def outage(tmp, clock):
    state = os.path.join(tmp, "outage")
    d = memory_daemon(clock, state).start()
    d.check("fixed_window", "w", cost=7)
    harness.eq(figures(d, "fixed_window", "w")["reset_ms"], 40000, "the window ends in 40 s")
    harness.eq(d.stop(), 0, "stopped")
    clock.set(T0 + 30)
    d.start()
    harness.eq(figures(d, "fixed_window", "w"), {"remaining": 3, "reset_ms": 10000,
                                                  "retry_after_ms": 0},
               "after a 30 s outage: 3 left, the window ending at the same wall time")
    clock.set(T0 + 40)
    harness.eq(figures(d, "fixed_window", "w")["remaining"], LIMIT,
               "at the window's end the count starts afresh")
    clock.set(T0 + 39)
    d.check("sliding_window_log", "w", cost=4)
    harness.eq(d.stop(), 0, "stopped")
    clock.set(T0 + 39 + 2 * 3600)
    d.start()
    harness.ok("expired=" in d.log() and "keys=0" in d.log().split("state file read")[-1],
               "two hours later every entry has expired and is dropped on load")
    harness.eq(figures(d, "sliding_window_log", "w")["remaining"], LIMIT, "the log is empty")
    d.stop()
    clock.set(T0)


def fallback_store(tmp, clock):
    """failure_mode local with Redis down: the store that decides is the
    same one, and is kept the same way."""
    state = os.path.join(tmp, "fallback")
    policy = ("policies:\n  f: {failure_mode: local, deny_cache: false,"
              " tiers: [{name: t, algorithm: fixed_window, limit: %d, window: 1h}]}\n" % LIMIT)
    d = StateDaemon(clock, policy, "state_file: %s\n" % state)
    d.start(wait_ready=False)
    r = d.check("f", "k", cost=7)
    harness.eq((r.status, r.json.get("local")), (200, True), "decided locally, Redis down")
    harness.eq(d.stop(signal.SIGINT), 0, "SIGINT: exits 0")
    d.start(wait_ready=False)
    r = d.check("f", "k")
    harness.eq((r.json.get("local"), r.json["remaining"]), (True, 2),
               "the local store's count outlives the restart (SIGINT saves as SIGTERM does)")
    d.stop()


def ok_writes(d):
    return metric(d, "ratelimitd_state_file_writes_total", result="ok") or 0


def more_writes(d, n):
    """Waits for n more good writes than now (bounded)."""
    until = ok_writes(d) + n
    harness.wait_until(lambda: ok_writes(d) >= until, timeout=60, what="%d more writes" % n)


def whole_reads(d, state, writes):
    """Reads state in a loop while the daemon writes it `writes` more
    times (every 20 reads it asks how many; bounded by a minute): (reads,
    reads that were not one whole image of the current size)."""
    size = os.path.getsize(state)
    until, reads, bad = ok_writes(d) + writes, 0, 0
    deadline = time.monotonic() + 60
    while (reads % 20 or ok_writes(d) < until) and time.monotonic() < deadline:
        with open(state, "rb") as f:
            data = f.read()
        reads += 1
        bad += len(data) != size or not data.startswith(b"RLDSTATE")
    harness.ok(ok_writes(d) >= until, "%d writes while reading" % writes)
    return reads, bad


def kill_during_write(d, state):
    """SIGKILL the daemon as soon as a new temporary file appears beside
    state (a periodic write under way); whether it was left there, i.e.
    the kill cut the write (a finished one renames it away)."""
    where, base = os.path.split(state)
    before = set(os.listdir(where))
    deadline = time.monotonic() + 30
    new = []
    while not new and time.monotonic() < deadline:
        new = [n for n in os.listdir(where) if n.startswith(base + ".") and n not in before]
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    return int(bool(new) and os.path.exists(os.path.join(where, new[0])))


def periodic_and_kill9(tmp, clock):
    state = os.path.join(tmp, "periodic")
    d = memory_daemon(clock, state, "state_interval: 50ms\nlocal_max_keys: 100000\n"
                      "max_body: 65536\n").start()
    d.check("fixed_window", "k", cost=6)
    # About 5 MB of image (20 480 entries of 250-byte keys): a write then
    # lasts long enough that a file rewritten in place is seen part-written.
    wide = [d.check(checks=[{"policy": "wide", "key": "%03d-%03d-%s" % (r, i, "x" * 240)}
                            for i in range(64)]).status for r in range(20)]
    harness.eq(wide, [200] * 20, "20 requests of 64 checks of 16 tiers")
    # Two writes begun after the last change: the file now holds it all.
    more_writes(d, 2)
    size = metric(d, "ratelimitd_state_file_last_write_bytes")
    harness.ok(size == os.path.getsize(state) and size > 20480 * 250,
               "the last write's size is reported: %s bytes" % size)
    harness.eq(metric(d, "ratelimitd_state_file_writes_total", result="error"), 0,
               "no failed write")
    reads, bad = whole_reads(d, state, 10)
    harness.eq(bad, 0, "%d reads during 10 writes: the file always a whole image" % reads)
    cut = bad = attempts = 0
    while cut < 3 and attempts < 40:
        attempts += 1
        cut += kill_during_write(d, state)
        d.start()
        bad += "state file unusable" in d.log() or figures(d, "fixed_window")["remaining"] != 4
    harness.eq(cut, 3, "3 writes cut by kill -9 (a temporary left beside the file; %d kills)"
               % attempts)
    harness.eq(bad, 0, "after each kill the old file is read whole, the count kept")
    d.stop()


def bad_files(tmp, clock):
    state = os.path.join(tmp, "bad")
    d = memory_daemon(clock, state).start()
    d.check("fixed_window", "k", cost=7)
    harness.eq(d.stop(), 0, "stopped")
    with open(state, "rb") as f:
        good = f.read()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40
    cases = {
        "truncated": good[:-5],
        "cut after the header": good[:40],
        "corrupted (a byte flipped)": bytes(flipped),
        "a foreign version": good[:8] + struct.pack("<I", 99) + good[12:],
        "empty": b"",
        "not a state file": b"hello, world\n" * 10,
    }
    for what, data in cases.items():
        with open(state, "wb") as f:
            f.write(data)
        d.start()
        log = d.log()
        harness.ok("state file unusable: starting empty" in log, "%s: a warning" % what)
        harness.eq(figures(d, "fixed_window")["remaining"], LIMIT, "%s: an empty start" % what)
        harness.eq(d.stop(), 0, "%s: serves and stops" % what)
    with open(state, "wb") as f:
        f.write(good)
    d.start()
    harness.eq(figures(d, "fixed_window")["remaining"], 3, "the good file, put back, is read")
    d.stop()


def unwritable(tmp, clock):
    plain = os.path.join(tmp, "a-file")
    open(plain, "w").close()
    d = memory_daemon(clock, os.path.join(plain, "state"))
    try:
        d.start()
        harness.ok(False, "a state_file whose directory takes no file: refused")
        d.stop()
    except RuntimeError:
        harness.eq(d.proc.returncode, 1, "a state_file whose directory takes no file: exit 1")
        harness.ok("state_file: cannot create a file beside" in d.log(), "and says why")


def main():
    lib = next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)
    if not lib:
        harness.skip_all("libfaketime not found (Debian package faketime)")
    tmp = harness.make_tempdir()
    clock = Clock(lib)
    clock.set(T0)
    every_algorithm(tmp, clock)
    outage(tmp, clock)
    fallback_store(tmp, clock)
    periodic_and_kill9(tmp, clock)
    bad_files(tmp, clock)
    unwritable(tmp, clock)


harness.run(main)
