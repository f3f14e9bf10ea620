#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""run.py: fault injection you can watch. Starts a private redis-server and
the daemon (failure_mode open, redis.timeout 100ms), keeps 8 clients sending
checks, injects one fault at a time and prints a table:

  fault | checks sent | answered | errors | degraded | wrong admissions | recovery

- answered: HTTP answers received (200/429); errors: anything else
  (exceptions, 5xx); degraded: answered by failure_mode while Redis could not
  decide.
- wrong admissions: non-degraded "allowed" answers past the limit of the
  key (limit 50 per key per hour; each fault uses fresh keys). A fault that
  loses Redis's data (restart with no data) resets the counters: admissions
  past the limit are then the documented effect, not a bug, and shown as such.
- recovery: from the end of the fault to the first decision from Redis.

Usage: tests/faults/run.py   (after a build; RATELIMITD and REDIS_SERVER may
point elsewhere). Exits 1 if any fault had errors or wrong admissions.
"""
import os
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
os.environ.setdefault("RATELIMITD", os.path.join(HERE, "..", "..", "ratelimitd"))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

LIMIT = 50
CLIENTS = 8
POLICY = """policies:
  api:
    failure_mode: open
    tiers:
      - {name: hour, algorithm: fixed_window, limit: %d, window: 1h}
""" % LIMIT


class Load:
    """CLIENTS threads sending checks over `keys` keys until stopped."""

    def __init__(self, d, tag, keys):
        self.d, self.tag, self.keys = d, tag, keys
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.sent = self.answered = self.errors = self.degraded = 0
        self.allowed = {}  # key -> non-degraded allowed answers
        self.first_decided_after = None
        self.fault_end = None
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(CLIENTS)]

    def run(self, i):
        n = 0
        while not self.stop.is_set():
            key = "%s-%d" % (self.tag, (i * 7 + n) % self.keys)
            n += 1
            try:
                r = self.d.check("api", key, timeout=5)
                ok = r.status in (200, 429)
                degraded = bool(r.json and r.json.get("degraded"))
                allowed = r.status == 200 and not degraded
            except OSError:
                ok, degraded, allowed = False, False, False
            now = time.monotonic()
            with self.lock:
                self.sent += 1
                self.answered += ok
                self.errors += not ok
                self.degraded += degraded
                if allowed:
                    self.allowed[key] = self.allowed.get(key, 0) + 1
                if (ok and not degraded and self.fault_end is not None
                        and self.first_decided_after is None and now >= self.fault_end):
                    self.first_decided_after = now - self.fault_end
            time.sleep(0.002)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        deadline = time.monotonic() + 10
        while self.first_decided_after is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def wrong(self):
        return sum(max(0, n - LIMIT) for n in self.allowed.values())


def fault_kill_restart(redis, d, r):
    redis.proc.send_signal(signal.SIGKILL)
    redis.proc.wait()
    time.sleep(1.0)
    redis.restart()


def fault_pause(redis, d, r):
    redis.proc.send_signal(signal.SIGSTOP)
    time.sleep(2.0)
    redis.proc.send_signal(signal.SIGCONT)


def fault_script_flush(redis, d, r):
    for _ in range(5):
        r.command("SCRIPT", "FLUSH")
        time.sleep(0.2)


def fault_client_kill(redis, d, r):
    for _ in range(3):
        r.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        time.sleep(0.3)


def fault_oom(redis, d, r):
    r.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
    r.command("CONFIG", "SET", "maxmemory", "1")
    time.sleep(1.0)
    r.command("CONFIG", "SET", "maxmemory", "0")


# (name, fault, loses data, keys). 20 keys reach their limit during the run,
# so an admission past it shows; 2000 keys keep every check writing (a
# denied check writes nothing, and so never meets an OOM error).
FAULTS = [
    ("Redis SIGKILL, restarted 1 s later (data lost)", fault_kill_restart, True, 20),
    ("Redis paused (SIGSTOP) 2 s", fault_pause, False, 20),
    ("SCRIPT FLUSH x5 under load", fault_script_flush, False, 20),
    ("CLIENT KILL of the daemon's connection x3", fault_client_kill, False, 20),
    ("Redis at maxmemory, noeviction, 1 s", fault_oom, False, 2000),
]


def main():
    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, POLICY, timeout="100ms").start()
    rows = []
    bad = False
    for i, (name, fault, loses_data, keys) in enumerate(FAULTS):
        r = redis.client()
        with Load(d, "f%d" % i, keys) as load:
            time.sleep(0.5)
            fault(redis, d, r)
            load.fault_end = time.monotonic()
        wrong = load.wrong()
        rec = load.first_decided_after
        rows.append((name, load.sent, load.answered, load.errors, load.degraded,
                     "%d%s" % (wrong, " (counters lost)" if loses_data and wrong else ""),
                     "%.2f s" % rec if rec is not None else "none in 10 s"))
        bad |= load.errors > 0 or (wrong > 0 and not loses_data) or rec is None
        r.close()
    d.stop()
    head = ("fault", "checks sent", "answered", "errors", "degraded", "wrong admissions",
            "recovery")
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    line = lambda row: "| " + " | ".join(str(v).ljust(w) for v, w in zip(row, widths)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
