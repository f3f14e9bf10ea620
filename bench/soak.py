# SPDX-License-Identifier: Apache-2.0
"""soak.py: the soak of issue 31 (bench/soak.sh is its entry; bench/README.md
says how to run it, docs/benchmarks.md "Reliability" what a run showed).

Two daemons (2 workers each, one policy but for listen) share one redis-server; each
daemon's listening socket is held here, as systemd holds
ratelimitd.socket (tests/integration/supervisor.py), so that either can be
restarted with no connection refused. Clients on kept-alive connections
(tests/integration/restart_load.py's, paced) send POST /check at a fixed
rate, half of them on 4 hot keys, half spread over 10 000 keys. A warm-up
minute with no fault (the latency baseline), a priming minute with each
fault once (the memory baseline: see below), then every minute one fault
in turn, made in the minute's first seconds:

  redis-restart  redis-server stopped (SIGTERM) and started again; its
                 append-only file (fsync at every write) keeps the counters,
                 so a restart is not a rate-limit reset
  redis-pause    redis-server stopped 2 s (SIGSTOP, SIGCONT)
  reload         the hot limit changed (20 <-> 25 per 2 s) and SIGHUP
  usr2           a USR2 hand-over of each daemon
  activation     each daemon stopped (SIGTERM) and started again on the
                 held socket (a socket-activated restart)
  kill-conns     200 client connections reset (RST) mid-request

One row a minute: RSS (KiB) and open descriptors (less TCP connections) of
each daemon at the minute's end, requests, allowed, denied, degraded
(503, what failure_mode: closed answers when Redis cannot decide, inside a
fault window), failed (anything else: a reset, a timeout, a refused
connection, another status, or a 503 outside a fault window), p50 and p99
of the minute's answers (ms), p99 outside the fault window, and
over-admissions. The model: fixed_window, each key's window of 2 s aligned
to the daemon's clock (the window an answer belongs to is given by its
reset_ms); an over-admission is a 200 past the limit in one key's window
(the larger of the two limits for a window a reload overlaps). It is exact
under every fault here: one Redis decides for both daemons, the daemons
keep no counter of their own, and Redis keeps its counters over a restart.
The deny cache is off (deny_cache: false): it can only deny, and it would
hide a lost counter (a Redis restarted without its data is an
over-admission here, with it a key already denied stays denied locally
until its window ends).

RSS and descriptors are those of the process serving at the sample (after
a hand-over or a restart, a new one): the bound is on what an operator
sees, the daemon's footprint after an hour of faults. The first time a
process meets a fault it takes memory it keeps for the next one (glibc's
heap keeps what 200 connections or a Redis outage's queued checks freed):
+4 to +7 % once, then flat. A leak grows with every fault instead, so the
RSS bound is taken from the priming minute, after each fault has happened
once (the processes a hand-over or a restart makes come first in it, so
the serving ones have met every other fault), and the growth since the
warm-up minute is printed beside it.

Exit 1 if: RSS at the last minute >= 5 % above the priming minute's (per
daemon), descriptors above the warm-up minute's, any failed request outside
a fault window (the fault minute's first --fault-window seconds; the whole
priming minute), any
over-admission, or (unless --p99-not-gating) a minute's p99 outside its
fault window > 1.5x the warm-up minute's. With --tap, the verdicts as TAP
lines too (tools/test.sh counts them)."""
import argparse
import ctypes
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("RATELIMITD", os.path.join(HERE, "..", "ratelimitd"))
import harness  # noqa: E402
from restart_load import HEADERS, Load  # noqa: E402
from supervisor import bound, descriptors, spawn_with  # noqa: E402

FAULTS = ["redis-restart", "redis-pause", "reload", "usr2", "activation", "kill-conns"]
WINDOW_S = 2
LIMITS = (20, 25)  # the hot policy's limit, before and after each reload
HOT_KEYS = 4
SPREAD_KEYS = 10000
CONFIG = ("workers: 2\nlisten: 127.0.0.1:%d\nclock: redis\n"
          "redis: {url: \"unix:%s\", timeout: 1s}\n"
          "policies:\n  p: {failure_mode: closed, deny_cache: false, tiers: [{name: t, "
          "algorithm: fixed_window, limit: %d, window: %ds}]}\n")
PR_SET_CHILD_SUBREAPER = 36


class SoakLoad(Load):
    """restart_load's kept-alive clients (a connection the daemon closes
    while idle is sent again on a fresh one), paced to rate requests per
    second in all, each answer kept as (start, seconds, outcome, key,
    window): outcome 200, 429, 503 or "failed"."""

    def __init__(self, port, clients, rate, t0):
        super().__init__(port, fresh=0, kept=clients)
        self.gap = clients / rate if rate else 0.0
        self.t0, self.records, self.mine = t0, [], threading.local()

    def _one(self, conn):
        me = self.mine
        if self.gap:
            me.next = max(getattr(me, "next", 0.0) + self.gap, time.monotonic() - 1.0)
            time.sleep(max(0.0, me.next - time.monotonic()))
        key = ("hot-%d" % random.randrange(HOT_KEYS) if random.random() < 0.5
               else "s-%d" % random.randrange(SPREAD_KEYS))
        me.start, me.key, me.window = time.time(), key, None
        conn.request("POST", "/check", body=json.dumps({"policy": "p", "key": key}).encode(),
                     headers=HEADERS)
        r = conn.getresponse()
        body = r.read()
        if r.status == 200:
            # The window's end, from the middle of the exchange.
            mid = (me.start + time.time()) / 2
            me.window = round((mid * 1000 + json.loads(body)["reset_ms"]) / (WINDOW_S * 1000))
        return r.status

    def _count(self, what, reason=None):
        if what != "reconnected":  # a reconnection is counted by its outcome
            with self.lock:
                self.records.append((self.mine.start - self.t0, time.time() - self.mine.start,
                                     what, self.mine.key, self.mine.window))

    def taken(self, before):
        """The records so far; those started before `before` (seconds from
        t0) dropped from here on, so that an hour's records are not all
        kept."""
        with self.lock:
            out = self.records
            self.records = [r for r in out if r[0] >= before]
        return out

    def _outcome(self, call):
        self.mine.start, self.mine.key, self.mine.window = time.time(), None, None
        try:
            status = call()
        except Exception:  # every error (a reset, a timeout, a refusal) is a failure
            self._count("failed")
            return
        self._count(status if status in (200, 429, 503) else "failed")


class Daemon:
    """One daemon behind its held socket; pid is the process serving now
    (after a hand-over, the new one)."""

    def __init__(self, d, name, soak):
        self.port = harness.free_port()
        self.config = os.path.join(d, name + ".yaml")
        self.log = os.path.join(d, name + ".log")
        soak.write_config(self)
        self.sock = bound(self.port)
        self.pid = None
        self.start()

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def start(self):
        n = self.text().count("ratelimitd started") if self.pid else 0
        self.pid = spawn_with([self.sock], ["listen"], self.config, self.log).pid
        harness.wait_until(lambda: self.text().count("ratelimitd started") > n, timeout=60,
                           what="daemon on port %d started" % self.port)

    def stop(self):
        os.kill(self.pid, signal.SIGTERM)
        wait_exit(self.pid)

    def usr2(self):
        n = len(re.findall(r'ready; draining" new_pid=(\d+)', self.text()))
        os.kill(self.pid, signal.SIGUSR2)
        try:
            harness.wait_until(lambda: len(re.findall(r'ready; draining" new_pid=(\d+)',
                                                      self.text())) > n, timeout=90,
                               what="the hand-over of %d" % self.pid)
        except TimeoutError:
            sys.stderr.write(harness.tail(self.log, 3000))
            raise
        old = self.pid
        self.pid = int(re.findall(r'ready; draining" new_pid=(\d+)', self.text())[-1])
        wait_exit(old)

    def reload(self):
        n = self.text().count("policies reloaded")
        os.kill(self.pid, signal.SIGHUP)
        return lambda: self.text().count("policies reloaded") > n

    def sample(self):
        with open("/proc/%d/status" % self.pid) as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        return rss, descriptors(self.pid)


def wait_exit(pid, timeout=90):
    """pid, our child or (a hand-over's) reparented to us, reaped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.02)
    raise TimeoutError("process %d did not exit" % pid)


def kill_connections(daemons, n=200):
    """n connections (half to each daemon), each sent part of a request
    (half a body, or headers only), then reset."""
    conns = []
    for i in range(n):
        c = socket.create_connection(("127.0.0.1", daemons[i % 2].port), timeout=10)
        body = json.dumps({"policy": "p", "key": "hot-0"})
        head = ("POST /check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % len(body))
        c.sendall((head + body[:len(body) // 2] if i % 4 else head[:20]).encode())
        conns.append(c)
    for c in conns:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()


class Soak:
    def __init__(self, args):
        self.args, self.dir = args, harness.make_tempdir("rl-soak-")
        # Hand-overs' new processes are reparented to us when the old exit.
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.redis = harness.RedisServer(extra_args=["--appendonly", "yes",
                                                     "--appendfsync", "always"]).start()
        self.limit_now = 0
        self.daemons = [Daemon(self.dir, n, self) for n in ("a", "b")]
        harness.at_exit(self.stop_daemons)
        self.reloads = []  # (sent, every daemon reloaded): wall-clock seconds

    def write_config(self, d):
        """d's policy file: the same but for its listen (a hand-over
        matches the passed socket by address)."""
        with open(d.config + ".tmp", "w") as f:
            f.write(CONFIG % (d.port, self.redis.socket_path, LIMITS[self.limit_now], WINDOW_S))
        os.rename(d.config + ".tmp", d.config)

    def stop_daemons(self):
        for d in self.daemons:
            try:
                d.stop()
            except (OSError, TimeoutError):
                pass

    def fault(self, name):
        if name == "redis-restart":
            self.redis.restart(timeout=30)
        elif name == "redis-pause":
            os.kill(self.redis.proc.pid, signal.SIGSTOP)
            time.sleep(2)  # the fault itself: Redis gone 2 s
            os.kill(self.redis.proc.pid, signal.SIGCONT)
        elif name == "reload":
            self.limit_now ^= 1
            for d in self.daemons:
                self.write_config(d)
            sent = time.time()
            done = [d.reload() for d in self.daemons]
            harness.wait_until(lambda: all(f() for f in done), timeout=30, what="the reloads")
            self.reloads.append((sent, time.time()))
        elif name == "usr2":
            for d in self.daemons:
                d.usr2()
        elif name == "activation":
            for d in self.daemons:
                d.stop()
                d.start()
        elif name == "kill-conns":
            kill_connections(self.daemons)

    def limit(self, window):
        """The largest limit that was in force during window (its end, in
        windows): any a reload sent before its end and not done before
        its start may have been."""
        start, end = (window - 1) * WINDOW_S, window * WINDOW_S
        lo = sum(1 for _, done in self.reloads if done < start)
        hi = sum(1 for sent, _ in self.reloads if sent <= end)
        return max(LIMITS[k % 2] for k in range(lo, hi + 1))


def measure_capacity(soak, clients, seconds=10):
    t0 = time.time()
    loads = [SoakLoad(d.port, clients, 0, t0).start() for d in soak.daemons]
    time.sleep(seconds)  # the measurement's length, not a synchronisation
    n = 0
    for load in loads:
        load.stop()
        n += len(load.records)
    return n / seconds


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] * 1000


def over_admissions(soak, records, first, last):
    """200s past the limit in the (key, window) pairs whose window ends in
    [first, last) (wall-clock seconds): each window is counted in the
    minute it ends in, from every answer it had."""
    counts = {}
    for _, _, outcome, key, window in records:
        if outcome == 200 and first <= window * WINDOW_S < last:
            counts[(key, window)] = counts.get((key, window), 0) + 1
    return sum(max(0, n - soak.limit(w)) for (_, w), n in counts.items())


def minute_row(soak, m, fault, records, samples, t0):
    a = [r for r in records if m * 60 <= r[0] < (m + 1) * 60]
    span = 60 if fault == "prime" else soak.args.fault_window
    in_window = lambda r: fault != "-" and r[0] < m * 60 + span
    answered = sorted(r[1] for r in a if r[2] in (200, 429, 503))
    steady = sorted(r[1] for r in a if r[2] in (200, 429, 503) and not in_window(r))
    degraded = sum(1 for r in a if r[2] == 503 and in_window(r))
    failed_in = sum(1 for r in a if r[2] in ("failed", 503) and in_window(r)) - degraded
    failed_out = sum(1 for r in a if r[2] in ("failed", 503) and not in_window(r))
    return [m, fault] + [x for s in samples for x in s] + [
        len(a), sum(1 for r in a if r[2] == 200), sum(1 for r in a if r[2] == 429), degraded,
        failed_in, failed_out, percentile(answered, 0.5), percentile(answered, 0.99),
        percentile(steady, 0.99),
        over_admissions(soak, records, t0 + m * 60, t0 + (m + 1) * 60)]


COLUMNS = ["minute", "fault", "rss_a_kib", "fds_a", "rss_b_kib", "fds_b", "requests",
           "allowed", "denied", "degraded", "failed_in_window", "failed_outside", "p50_ms",
           "p99_ms", "p99_steady_ms", "over"]


def fmt(v):
    return "%.2f" % v if isinstance(v, float) else str(v)


def verdicts(rows, args):
    """(passed, what) for each exit criterion, from the minutes' rows."""
    first, primed, last = rows[0], rows[1], rows[-1]
    out = []
    for name, rss, fds in (("a", 2, 3), ("b", 4, 5)):
        growth = (last[rss] - primed[rss]) * 100.0 / primed[rss]
        out.append((growth < 5, "daemon %s: RSS %d -> %d KiB after the priming minute (%+.1f "
                    "%%, bound < 5 %%; %+.1f %% since the warm-up minute's %d)"
                    % (name, primed[rss], last[rss], growth,
                       (last[rss] - first[rss]) * 100.0 / first[rss], first[rss])))
        out.append((last[fds] <= first[fds], "daemon %s: descriptors %d -> %d (bound: not "
                    "above the warm-up minute's)" % (name, first[fds], last[fds])))
    out.append((sum(r[11] for r in rows) == 0, "%d failed requests outside fault windows "
                "(%d inside)" % (sum(r[11] for r in rows), sum(r[10] for r in rows))))
    out.append((sum(r[15] for r in rows) == 0, "%d over-admissions" % sum(r[15] for r in rows)))
    worst = max(r[14] for r in rows[2:])
    ok = worst <= 1.5 * first[14]
    out.append((ok or args.p99_not_gating, "p99 outside fault windows at most %.2f ms, "
                "warm-up %.2f ms (bound 1.5x)%s" % (worst, first[14], "" if not
                args.p99_not_gating else ": reported, not gating")))
    return out


def until(t):
    """Waits for wall-clock time t: the soak's schedule, not a
    synchronisation."""
    while time.time() < t:
        time.sleep(min(0.05, max(0.0, t - time.time())))


def prime(soak, faults, start):
    """Each fault once, spread over the minute from start: those that
    make new processes first, so that the processes serving at its end
    have met every other fault."""
    order = sorted(faults, key=lambda f: f not in ("usr2", "activation"))
    for i, name in enumerate(order):
        until(start + i * 50.0 / len(order))
        soak.fault(name)


def run(args):
    soak = Soak(args)
    if not args.rate:
        args.rate = measure_capacity(soak, args.clients) / 2
        print("# capacity %.0f checks/s (10 s, %d kept-alive clients per daemon); load at "
              "half: %.0f/s" % (args.rate * 2, args.clients, args.rate), flush=True)
    t0 = time.time()
    loads = [SoakLoad(d.port, args.clients, args.rate / 2, t0).start() for d in soak.daemons]
    faults = args.faults.split(",")
    print("\t".join(COLUMNS), flush=True)
    rows = []
    with open(args.data, "w") as data:
        data.write("# " + "\t".join(COLUMNS) + "\n")
        samples = []

        def row(m):
            # Emitted a minute late: the minute's answers are all in by then
            # (the clients' timeout is 10 s), and the next fault on time.
            fault = "-" if m == 0 else "prime" if m == 1 else faults[(m - 2) % len(faults)]
            records = [r for load in loads for r in load.taken((m - 1) * 60)]
            rows.append(minute_row(soak, m, fault, records, samples[m], t0))
            line = "\t".join(fmt(v) for v in rows[-1])
            print(line, flush=True)
            data.write(line + "\n")
            data.flush()

        for m in range(args.minutes + 2):
            until(t0 + m * 60)
            if m == 1:
                prime(soak, faults, t0 + 60)
            elif m:
                soak.fault(faults[(m - 2) % len(faults)])
            until(t0 + (m + 1) * 60 - 1)
            samples.append([d.sample() for d in soak.daemons])
            if m:
                row(m - 1)
        until(t0 + (args.minutes + 2) * 60 + 11)
        row(args.minutes + 1)
    for load in loads:
        load.stop()
    results = verdicts(rows, args)
    for i, (ok, what) in enumerate(results):
        print("%s %d - %s" % ("ok" if ok else "not ok", i + 1, what) if args.tap
              else "# %s: %s" % ("pass" if ok else "FAIL", what))
    if args.tap:
        print("1..%d" % len(results))
    return 0 if all(ok for ok, _ in results) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=int, default=60, help="fault minutes after the warm-up and priming minutes")
    ap.add_argument("--faults", default=",".join(FAULTS), help="in turn: " + ",".join(FAULTS))
    ap.add_argument("--rate", type=float, default=0, help="checks/s (default: half the "
                    "capacity measured at start)")
    ap.add_argument("--clients", type=int, default=8, help="kept-alive clients per daemon")
    ap.add_argument("--fault-window", type=int, default=20,
                    help="seconds at the start of a fault minute a failure is allowed in")
    ap.add_argument("--data", default="soak.tsv", help="the rows, for bench/soak.gp")
    ap.add_argument("--p99-not-gating", action="store_true")
    ap.add_argument("--tap", action="store_true")
    args = ap.parse_args()
    bad = [f for f in args.faults.split(",") if f not in FAULTS]
    if bad or args.minutes < 1:
        ap.error("unknown fault %s" % bad if bad else "--minutes must be at least 1")
    sys.exit(run(args))


if __name__ == "__main__":
    main()
