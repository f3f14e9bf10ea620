# SPDX-License-Identifier: Apache-2.0
"""test_redis_faults.py: Redis going away, hanging and coming back, under
both failure modes; the deadline; SIGTERM draining checks in flight."""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

POLICY = """policies:
  open:
    failure_mode: open
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1000, window: 1h}
  closed:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1000, window: 1h}
  local:
    failure_mode: local
    tiers:
      - {name: burst, algorithm: token_bucket, limit: 1, window: 1h, burst: 3}
      - {name: t, algorithm: fixed_window, limit: 1000, window: 1h}
"""


def timed_check(d, policy, key):
    t0 = time.monotonic()
    res = d.check(policy, key)
    return res, time.monotonic() - t0


def test_redis_killed(redis, d):
    harness.eq(d.check("open", "k").status, 200, "decided while Redis is up")
    redis.proc.send_signal(signal.SIGKILL)
    redis.proc.wait()
    res, took = timed_check(d, "open", "k")
    harness.eq((res.status, res.json.get("allowed"), res.json.get("degraded")), (200, True, True),
               "Redis killed, failure_mode open: 200 allowed degraded")
    harness.ok(took < 1.0, "answered at once (%.3f s)" % took)
    res, took = timed_check(d, "closed", "k")
    harness.eq((res.status, res.json.get("allowed"), res.json.get("error"),
                res.headers.get("retry-after")), (503, False, "backend_unavailable", "1"),
               "failure_mode closed: 503 backend_unavailable with Retry-After: 1")
    harness.eq(d.request("GET", "/readyz").status, 503, "/readyz is 503 while Redis is down")
    local = [d.check("local", "k") for _ in range(4)]
    harness.eq([(r.status, r.json.get("degraded"), r.json.get("local")) for r in local],
               [(200, True, True)] * 3 + [(429, True, True)],
               "failure_mode local: decided in memory with the policy's algorithms (burst 3)")
    harness.eq([r.json["remaining"] for r in local[:3]], [2, 1, 0],
               "with the same figures as Redis would give")
    harness.ok(local[3].headers.get("retry-after") is not None, "and Retry-After on the 429")
    harness.eq(d.check(checks=[{"policy": "local", "key": "k"}, {"policy": "closed", "key": "k"}]
                       ).status, 503, "a request mixing local and closed gets closed's 503")
    mixed = d.check(checks=[{"policy": "local", "key": "m"}, {"policy": "open", "key": "m"}])
    harness.eq((mixed.status, mixed.json.get("local")), (200, True),
               "a request mixing local and open is decided locally")
    harness.eq(d.request("GET", "/healthz").status, 200, "/healthz stays 200")

    redis.restart()
    harness.wait_until(lambda: d.request("GET", "/readyz").status == 200, 10,
                       what="the daemon to reconnect")
    res = d.check("closed", "k")
    harness.eq((res.status, res.json.get("degraded"), res.json.get("remaining")), (200, None, 999),
               "after Redis restarts (empty) the daemon reconnected and reloaded the script")
    res = d.check("local", "k")
    harness.eq((res.status, res.json.get("local"), res.json["checks"][0]["tiers"][0]["remaining"]),
               (200, None, 2), "local policies are decided by Redis again (its own counters)")


def test_redis_hangs(redis, d):
    r = redis.client()
    harness.eq(d.check("open", "hang").status, 200, "decided before the hang")
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        res, took = timed_check(d, "open", "hang")
        harness.eq((res.status, res.json.get("degraded")), (200, True),
                   "Redis stopped (SIGSTOP), open: degraded at the deadline")
        harness.ok(0.15 <= took < 1.0, "answered at the 200 ms deadline (%.3f s)" % took)
        res, took = timed_check(d, "closed", "hang")
        harness.eq(res.status, 503, "closed: 503 at the deadline")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    # The late replies to the two timed-out checks arrive now and must be
    # dropped without harm; the counter shows they were counted by Redis.
    harness.wait_until(lambda: d.check("open", "hang2").json.get("degraded") is None, 5,
                       what="decisions after SIGCONT")
    res = d.check("open", "hang")
    harness.eq((res.status, res.json.get("degraded")), (200, None), "normal answers afterwards")
    harness.ok(int(harness.fixed_window_count(r, "rl:{open:hang}:t")) >= 3,
               "the late request was applied by Redis (the effect of a timeout: counted, "
               "answered degraded)")


def test_circuit_breaker(redis, d):
    """A hung Redis: after a few deadlines the connection is dropped and
    checks are answered at once, until Redis answers again."""
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        slow = [timed_check(d, "open", "cb")[1] for _ in range(3)]
        harness.ok(all(0.15 <= t < 1.0 for t in slow),
                   "the first checks wait for the deadline: %s" % ["%.3f" % t for t in slow])
        fast = [timed_check(d, "open", "cb") for _ in range(20)]
        harness.ok(all(r.json.get("degraded") and t < 0.1 for r, t in fast),
                   "then the circuit is open: answered at once (slowest %.3f s)"
                   % max(t for _, t in fast))
        res, took = timed_check(d, "closed", "cb")
        harness.eq((res.status, took < 0.1), (503, True), "closed policies: 503 at once")
        harness.eq(d.admin("/readyz").status, 503, "/readyz is 503 while the circuit is open")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    harness.wait_until(lambda: d.admin("/readyz").status == 200, 10,
                       what="the circuit to close")
    res = d.check("open", "cb")
    harness.eq((res.status, res.json.get("degraded")), (200, None),
               "Redis answers again: the circuit closes, decisions resume")
    harness.ok("redis connection dropped" in d.logs(), "the hung connection was dropped (logged)")


def test_flush_under_load(redis, d):
    """SCRIPT FLUSH while 8 clients send checks: every answer is a decision
    from Redis (NOSCRIPT reloaded and retried), none degraded."""
    import threading
    r = redis.client()
    stop = threading.Event()
    answers = []

    def client(i):
        while not stop.is_set():
            try:
                answers.append(d.check("open", "flush-%d" % i).json.get("degraded"))
            except OSError as e:
                answers.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for _ in range(10):
        r.command("SCRIPT", "FLUSH")
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(10)
    harness.ok(len(answers) > 50 and all(a is None for a in answers),
               "10 SCRIPT FLUSHes under load: %d checks, all decided by Redis (%r)"
               % (len(answers), [a for a in answers if a is not None][:3]))


def test_client_kill(redis, d):
    r = redis.client()
    killed = int(r.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))
    harness.ok(killed >= 1, "CLIENT KILL closed the daemon's connection (%d)" % killed)
    harness.wait_until(lambda: d.check("open", "kill").json.get("degraded") is None, 10,
                       what="decisions after CLIENT KILL")
    harness.ok(True, "the daemon reconnected by itself after CLIENT KILL")


def test_oom(redis, d):
    r = redis.client()
    r.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
    r.command("CONFIG", "SET", "maxmemory", "1")
    try:
        res = d.check("open", "oom")
        harness.eq((res.status, res.json.get("degraded")), (200, True),
                   "Redis at maxmemory (OOM from the script), open: degraded")
        res = d.check("closed", "oom")
        harness.eq(res.status, 503, "closed: 503")
    finally:
        r.command("CONFIG", "SET", "maxmemory", "0")
    res = d.check("open", "oom")
    harness.eq((res.status, res.json.get("degraded")), (200, None), "memory back: decided again")
    harness.ok("OOM" in d.logs(), "the Redis error is logged")


def test_drain_after_reset(redis, d):
    """A client that resets its connection before its answer is written must
    not make a later drain wait."""
    import socket
    import struct
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        s = socket.create_connection(("127.0.0.1", d.port))
        body = b'{"policy":"open","key":"rst"}'
        s.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        time.sleep(0.2)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        time.sleep(0.3)
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    harness.wait_until(lambda: d.check("open", "rst2").json.get("degraded") is None, 10,
                       what="decisions after SIGCONT")
    t0 = time.monotonic()
    code = d.stop(timeout=10)
    took = time.monotonic() - t0
    harness.ok(code == 0 and took < 2.0,
               "a connection reset before its answer does not hold up the drain (%.2f s)" % took)


def test_select_fails():
    """A db the server does not have: never ready, nothing written to db 0."""
    port = harness.free_port()
    redis = harness.RedisServer(extra_args=["--port", str(port), "--bind", "127.0.0.1"]).start()
    d = Daemon("redis://127.0.0.1:%d/99" % port, POLICY).start(wait_ready=False)
    res = d.check("open", "db")
    harness.eq((res.status, res.json.get("degraded")), (200, True),
               "SELECT of a missing db: not ready, failure_mode answers")
    harness.eq(d.admin("/readyz").status, 503, "and /readyz says so")
    harness.eq(redis.client().command("DBSIZE"), 0, "nothing was written to db 0")
    harness.wait_until(lambda: "DB index is out of range" in d.logs(), 10,
                       what="the SELECT error's log")
    harness.ok(True, "the SELECT error is logged")
    harness.eq(d.stop(), 0, "exits 0")
    redis.stop()


def test_drain(redis, d):
    results = []
    redis.proc.send_signal(signal.SIGSTOP)
    t = threading.Thread(target=lambda: results.append(d.check("closed", "drain", timeout=10)))
    t.start()
    time.sleep(0.3)
    d.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    harness.ok(d.proc.poll() is None, "SIGTERM waits for the check in flight")
    refused = False
    try:
        d.request("GET", "/healthz", timeout=1)
    except OSError:
        refused = True
    harness.ok(refused, "and no longer accepts connections")
    redis.proc.send_signal(signal.SIGCONT)
    t.join(10)
    harness.ok(results and results[0].status == 200 and results[0].json.get("degraded") is None,
               "the check in flight is answered from Redis: %r" % results)
    harness.eq(d.stop(timeout=5), 0, "then the daemon exits 0")


def main():
    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="200ms").start()
    test_redis_killed(redis, d)
    test_redis_hangs(redis, d)
    test_circuit_breaker(redis, d)
    test_flush_under_load(redis, d)
    test_client_kill(redis, d)
    test_oom(redis, d)
    test_drain_after_reset(redis, d)
    test_select_fails()
    d2 = Daemon("unix:" + redis.socket_path, POLICY, timeout="5s").start()
    test_drain(redis, d2)


harness.run(main)
