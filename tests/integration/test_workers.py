# SPDX-License-Identifier: Apache-2.0
"""test_workers.py: `workers: 2` against real daemons.

- Reload under load (Redis and `backend: memory`): client threads keep
  checking over many keep-alive connections while SIGHUPs change a limit;
  every answer is a 200 or 429 with a JSON body (no error, no dropped
  connection), and after each reload a fresh key checked over fresh
  connections (spread over both workers by SO_REUSEPORT) admits exactly the
  new limit, every answer naming it.
- Exact limits across workers: `backend: memory` and `failure_mode: local`
  with Redis down, concurrent checks of one key over connections on both
  workers admit exactly the limit, for every algorithm.
- Drain: SIGTERM while checks wait for Redis on both workers: each gets its
  answer once Redis answers, and the daemon exits 0.
- max_connections and max_inflight are process-wide, also after a reload.

"Both workers": connections are spread by the kernel's hash of their
addresses; 16 connections all landing on one of two workers has a chance
of 2^-15, and the reload test also checks that both threads used CPU.
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import ALGORITHMS, Daemon, hammer  # noqa: E402

NO_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1
CONNS = 16


def reload_policy(limit):
    return ("policies:\n"
            "  api: {tiers: [{name: t, algorithm: fixed_window, limit: %d, window: 1h}]}\n"
            "  load: {tiers: [{name: t, algorithm: fixed_window, limit: 50, window: 1h}]}\n"
            % limit)


def one_check(d, policy, key):
    """One check on a connection of its own: (status, json)."""
    r = d.check(policy, key)
    return r.status, r.json


def thread_cpu_ticks(pid):
    """utime + stime of each thread of pid."""
    ticks = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks[tid] = int(fields[11]) + int(fields[12])
    return ticks


def load_client(d, stop, results, i):
    """Checks over four keep-alive connections in turn until stop is set;
    records each answer's status (or what went wrong)."""
    conns = [d.connection() for _ in range(4)]
    n = 0
    while not stop.is_set():
        c = conns[n % len(conns)]
        n += 1
        try:
            c.request("POST", "/check", body='{"policy":"load","key":"k%d"}' % (i % 3))
            r = c.getresponse()
            body = r.read()
            ok = r.status in (200, 429) and b'"allowed"' in body
            results.append(r.status if ok else "bad %d %r" % (r.status, body[:100]))
        except Exception as e:  # a dropped connection
            results.append(repr(e))
    for c in conns:
        c.close()


def test_reload_under_load(name, redis_url, extra):
    limits = [5, 9, 3, 12, 7]
    d = Daemon(redis_url, reload_policy(20), extra="workers: 2\n" + extra,
               prefix="w%s:" % name).start()
    before = thread_cpu_ticks(d.proc.pid)
    stop = threading.Event()
    results = []
    threads = [threading.Thread(target=load_client, args=(d, stop, results, i))
               for i in range(6)]
    for t in threads:
        t.start()
    try:
        for n, limit in enumerate(limits):
            d.write_config(reload_policy(limit), extra="workers: 2\n" + extra,
                           prefix="w%s:" % name)
            d.send_signal(signal.SIGHUP)
            harness.wait_until(lambda: d.logs().count("policies reloaded") == n + 1, 10,
                               what="reload %d" % (n + 1))
            # The main loop logs once it has posted the snapshot; worker 1
            # takes it on its own loop a moment later.
            time.sleep(0.1)
            answers = [one_check(d, "api", "fresh%d" % n) for _ in range(max(CONNS, limit + 4))]
            allowed = sum(1 for s, _ in answers if s == 200)
            named = set(j.get("limit") if j else None for _, j in answers)
            harness.ok(allowed == limit and named == {limit}
                       and all(s in (200, 429) for s, _ in answers),
                       "%s: after reload %d (limit %d), %d checks of a fresh key on fresh "
                       "connections admit %d, every answer naming limit %r"
                       % (name, n + 1, limit, len(answers), allowed, sorted(named, key=str)))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    bad = [x for x in results if x not in (200, 429)]
    harness.ok(len(results) > 100 and not bad,
               "%s: %d checks on 24 keep-alive connections during %d reloads, %d errors or "
               "dropped connections %r" % (name, len(results), len(limits), len(bad), bad[:3]))
    after = thread_cpu_ticks(d.proc.pid)
    busy = [tid for tid in after if after[tid] > before.get(tid, 0)]
    harness.ok(len(after) == 2 and len(busy) == 2,
               "%s: two threads (%d), both served (%d used CPU)" % (name, len(after), len(busy)))
    harness.eq(d.stop(), 0, "%s: exits 0" % name)


LIMIT = 100


def exact_policy(failure_mode):
    return "policies:\n" + "".join(
        "  %s: {failure_mode: %s, tiers: [{name: t, algorithm: %s, limit: %d, window: 1h%s}]}\n"
        % (a, failure_mode, a, LIMIT, extra) for a, extra in ALGORITHMS.items())


def test_exact(name, redis_url, extra, failure_mode, wait_ready):
    d = Daemon(redis_url, exact_policy(failure_mode), extra="workers: 2\n" + extra)
    d.start(wait_ready=wait_ready)
    if not wait_ready:
        r = d.check("fixed_window", "probe")
        harness.eq((r.status, r.json.get("local")), (200, True),
                   "%s: Redis down, decided locally" % name)
    for alg in ALGORITHMS:
        counts = hammer(d, alg, clients=60, per_client=5)
        harness.eq((counts[200], counts["other"]), (LIMIT, 0),
                   "%s, %s: exactly %d of 300 concurrent checks on 60 connections admitted"
                   % (name, alg, LIMIT))
    harness.eq(d.stop(), 0, "%s: exits 0" % name)


def pending_checks(d, n, results):
    """n checks, each on its own connection and thread; answers appended
    to results as (status, json or None) or the exception's repr."""
    def one():
        try:
            r = d.check("open", "drain")
            results.append((r.status, r.json))
        except Exception as e:
            results.append(repr(e))
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


OPEN = """policies:
  open: {tiers: [{name: t, algorithm: fixed_window, limit: 1000000, window: 1h}]}
"""


def test_drain(redis):
    d = Daemon("unix:" + redis.socket_path, OPEN, timeout="3s", extra="workers: 2\n",
               admin=True).start()
    results = []
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        threads = pending_checks(d, CONNS, results)
        harness.wait_until(lambda: b"ratelimitd_checks_in_flight %d" % CONNS
                           in d.admin("/metrics").body, 5, what="%d checks in flight" % CONNS)
        d.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        harness.ok(d.proc.poll() is None and not results,
                   "SIGTERM with %d checks waiting on two workers: still running" % CONNS)
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    for t in threads:
        t.join(10)
    decided = [r for r in results if isinstance(r, tuple) and r[0] == 200
               and not r[1].get("degraded")]
    harness.eq(len(decided), CONNS, "every check in flight got its answer from Redis %r"
               % [r for r in results if r not in decided][:3])
    harness.eq(d.stop(), 0, "the drain ends with exit 0")


def test_max_connections(redis):
    extra = "workers: 2\nmax_connections: 16\n"
    d = Daemon("unix:" + redis.socket_path, OPEN, extra=extra, admin=True).start()

    def open_conn():
        c = d.connection()
        c.request("POST", "/check", '{"policy":"open","key":"c"}')
        r = c.getresponse()
        return c, r.status, r.read()

    conns = [open_conn() for _ in range(16)]
    harness.eq([s for _, s, _ in conns], [200] * 16,
               "workers 2, max_connections 16: 16 connections (spread over both) served")
    c, status, body = open_conn()
    harness.ok(status == 503 and b"too_many_connections" in body,
               "the 17th gets 503 too_many_connections: the limit is process-wide (%d)" % status)
    c.close()
    for c, _, _ in conns[:4]:
        c.close()
    time.sleep(0.2)
    more = [open_conn() for _ in range(4)]
    harness.eq([s for _, s, _ in more], [200] * 4, "once 4 close, 4 new ones are served")

    d.write_config(OPEN, extra="workers: 2\nmax_connections: 20\n")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "policies reloaded" in d.logs(), 10, what="the reload")
    time.sleep(0.1)
    later = [open_conn() for _ in range(4)]
    harness.eq([s for _, s, _ in later], [200] * 4,
               "reloaded to 20: four more connections served on either worker")
    c, status, _ = open_conn()
    harness.eq(status, 503, "and the 21st is refused")
    c.close()
    for c, _, _ in conns[4:] + more + later:
        c.close()
    harness.eq(d.stop(), 0, "exits 0")


def test_max_inflight(redis):
    extra = "workers: 2\nmax_inflight: %d\noverload: reject\n"
    d = Daemon("unix:" + redis.socket_path, OPEN, timeout="5s", extra=extra % 4,
               admin=True).start()
    results = []
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        threads = pending_checks(d, 12, results)
        harness.wait_until(lambda: len(results) >= 8, 5, what="8 answers")
        time.sleep(0.3)
        harness.eq(sorted((s, j.get("error")) for s, j in results), [(503, "overloaded")] * 8,
                   "workers 2, max_inflight 4: of 12 checks on 12 connections, 4 wait for "
                   "Redis and 8 are answered at once (process-wide)")
        d.write_config(OPEN, timeout="5s", extra=extra % 6)
        d.send_signal(signal.SIGHUP)
        harness.wait_until(lambda: "policies reloaded" in d.logs(), 10, what="the reload")
        time.sleep(0.1)
        threads += pending_checks(d, 4, results)
        harness.wait_until(lambda: len(results) >= 10, 5, what="2 more answers")
        time.sleep(0.3)
        harness.eq(len(results), 10, "reloaded to 6: of 4 more checks, 2 wait and 2 are "
                   "answered at once")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    for t in threads:
        t.join(10)
    harness.eq(sorted(s for s, _ in results), [200] * 6 + [503] * 10,
               "the 6 that waited are decided once Redis answers")
    r = d.check("open", "after")
    harness.eq(r.status, 200, "and the count went back down")
    harness.eq(d.stop(), 0, "exits 0")


def main():
    redis = harness.RedisServer().start()
    test_reload_under_load("redis", "unix:" + redis.socket_path, "")
    test_reload_under_load("memory", NO_REDIS, "backend: memory\n")
    test_exact("memory", NO_REDIS, "backend: memory\n", "closed", True)
    test_exact("failure_mode local", NO_REDIS, "", "local", False)
    test_drain(redis)
    test_max_connections(redis)
    test_max_inflight(redis)


harness.run(main)
