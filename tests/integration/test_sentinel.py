# SPDX-License-Identifier: Apache-2.0
"""test_sentinel.py: the daemon finds its Redis through Sentinel and follows
failovers. A master, a replica and three sentinels (quorum 2,
down-after-milliseconds 1000, failover-timeout 3000) on loopback ports in
a temp dir, and the daemon with redis.sentinel; then, under a load of
checks:
  (a) a forced failover (SENTINEL FAILOVER): the daemon follows;
  (b) the master killed (SIGKILL): the daemon follows, and what the
      asynchronous replication lost is measured as admissions beyond the
      limit;
  (c) the master demoted behind the sentinels' back: READONLY replies make
      the daemon ask the sentinels again.
Before these: sentinels that hang, do not know the master or are not
there are passed over; none answering gives failure_mode answers; the
sentinels' password (requirepass), the environment's winning.
Every answer during a switch is a decided answer or the policy's
failure_mode answer (closed: 503 backend_unavailable), within the timeout
plus slack. The windows and the loss are printed as TAP comments."""
import http.client
import json
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

MASTER = "mymaster"
SENTINEL_PASSWORD = "s3ntinel"  # the sentinels' requirepass
TIMEOUT_S = 0.2  # the daemon's redis.timeout
SLACK_S = 1.0  # an answer later than TIMEOUT_S + SLACK_S is a hang
LIMIT_B = 3000  # the limit of the key killed under load in (b)

POLICY = """policies:
  closed:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1000000, window: 1h}
  bounded:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: fixed_window, limit: %d, window: 1h}
""" % LIMIT_B


class SentinelDaemon(Daemon):
    """A Daemon whose redis section names sentinels: the URL's host:port is
    not used in sentinel mode."""

    def __init__(self, sentinel_ports, password=None, policy=None):
        policy = policy or POLICY
        self.sentinel_ports = sentinel_ports
        self.sentinel_password = password
        super().__init__("redis://127.0.0.1:1/0", policy, timeout="%dms" % (TIMEOUT_S * 1000),
                         admin=True)

    def write_config(self, policy, timeout="200ms", clock="redis", extra="", prefix="rl:"):
        addrs = ", ".join('"127.0.0.1:%d"' % p for p in self.sentinel_ports)
        text = (
            "listen: 127.0.0.1:%d\n"
            "admin_listen: 127.0.0.1:%d\n"
            "log_level: debug\n"
            "redis:\n"
            "  url: %s\n"
            "  timeout: %s\n"
            "  key_prefix: \"%s\"\n"
            "  sentinel:\n"
            "    addresses: [%s]\n"
            "    master_name: %s\n"
            "    password: %s\n"
            "clock: %s\n" % (self.port, self.admin_port, self.redis_url, timeout, prefix, addrs,
                             MASTER, self.sentinel_password or "null", clock)
        ) + extra + policy
        with open(self.config, "w") as f:
            f.write(text)


# ------------------------------------------------------------- deployment


def sentinel_argv():
    """How to start a sentinel: redis-sentinel, or redis-server --sentinel
    (the same binary in another mode); None when neither is there."""
    prog = harness.find_program("REDIS_SENTINEL", "redis-sentinel")
    if prog:
        return [prog]
    server = harness.find_program("REDIS_SERVER", "redis-server")
    return [server, "--sentinel"] if server else None


class Redis:
    """A redis-server on a loopback TCP port, optionally a replica."""

    def __init__(self, top, name):
        self.dir = os.path.join(top, name)
        os.mkdir(self.dir)
        self.port = harness.free_port()
        self.log = os.path.join(self.dir, "redis.log")
        self.proc = None

    def start(self, replicaof=None):
        argv = [harness.find_program("REDIS_SERVER", "redis-server"),
                "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", self.dir]
        argv += harness.module_args()
        if replicaof:
            argv += ["--replicaof", "127.0.0.1", str(replicaof)]
        self.proc = harness.spawn(argv, self.log)
        harness.wait_until(lambda: self.client().command("PING") == "PONG", 10,
                           what="redis on port %d" % self.port)
        return self

    def client(self):
        return harness.RedisClient(port=self.port, timeout=2.0)

    def cmd(self, *args):
        with self.client() as c:
            return c.command(*args)

    def role(self):
        return self.cmd("ROLE")[0]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


class Sentinel:
    """A sentinel monitoring MASTER at master_port, or nothing (it then
    answers nil for MASTER)."""

    def __init__(self, top, name, master_port):
        self.dir = os.path.join(top, name)
        os.mkdir(self.dir)
        self.port = harness.free_port()
        self.conf = os.path.join(self.dir, "sentinel.conf")
        with open(self.conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                    "requirepass %s\nsentinel sentinel-pass %s\n"
                    % (self.port, self.dir, SENTINEL_PASSWORD, SENTINEL_PASSWORD))
            if master_port:
                f.write("sentinel monitor %s 127.0.0.1 %d 2\n"
                        "sentinel down-after-milliseconds %s 1000\n"
                        "sentinel failover-timeout %s 3000\n"
                        % (MASTER, master_port, MASTER, MASTER))
        argv = sentinel_argv()
        # Both forms take the config file first.
        self.proc = harness.spawn([argv[0], self.conf] + argv[1:],
                                  os.path.join(self.dir, "sentinel.log"))
        harness.wait_until(lambda: self.cmd("PING") == "PONG", 10,
                           what="sentinel on port %d" % self.port)

    def cmd(self, *args):
        with harness.RedisClient(port=self.port, timeout=2.0) as c:
            c.command("AUTH", SENTINEL_PASSWORD)
            return c.command(*args)

    def master_port(self):
        return int(self.cmd("SENTINEL", "get-master-addr-by-name", MASTER)[1])


def blackhole():
    """A port that accepts connections (the kernel completes them: listen
    backlog) and never answers: a hung sentinel."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    harness.at_exit(sock.close)
    return sock.getsockname()[1]


def fields(flat):
    """A sentinel's flat [k1, v1, k2, v2...] as a dict."""
    return dict(zip(flat[0::2], flat[1::2]))


def sentinels_settled(sentinels, want_master, replicas):
    """Every sentinel names want_master, knows the other sentinels, and sees
    every port of replicas as a replica with its link up. Raises (for
    wait_until's message) what is not so yet."""
    for s in sentinels:
        if s.master_port() != want_master:
            raise AssertionError("sentinel %d names %d" % (s.port, s.master_port()))
        if len(s.cmd("SENTINEL", "sentinels", MASTER)) != len(sentinels) - 1:
            raise AssertionError("sentinel %d does not know the others yet" % s.port)
        seen = {int(fields(r)["port"]): fields(r) for r in s.cmd("SENTINEL", "replicas", MASTER)}
        for port in replicas:
            r = seen.get(port)
            if not r or r["flags"] != "slave" or r.get("master-link-status") != "ok":
                raise AssertionError("sentinel %d sees replica %d as %r" % (
                    s.port, port, r and (r["flags"], r.get("master-link-status"))))
    return True


# ------------------------------------------------------------------- load


class Load:
    """Threads sending checks of (policy, key) on keep-alive connections
    until stop(); every answer recorded as (sent, answered, kind, allowed):
    kind "decided" (200/429 decided by Redis), "failure" (the closed
    failure_mode answer: 503 backend_unavailable) or "other" (anything
    else: an error, a dropped connection, a timeout)."""

    def __init__(self, d, policy, key, threads=3):
        self.d, self.policy, self.key = d, policy, key
        self.records = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        # Daemon threads: a test that bails out must not wait for them.
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _one(self, conn):
        body = json.dumps({"policy": self.policy, "key": self.key})
        conn.request("POST", "/check", body=body)
        r = conn.getresponse()
        data = json.loads(r.read() or b"null") or {}
        if r.status in (200, 429) and not data.get("degraded"):
            return "decided", r.status == 200
        if r.status == 503 and data.get("error") == "backend_unavailable":
            return "failure", False
        return "other:%d" % r.status, False

    def _run(self):
        conn = None
        while not self.stopping.is_set():
            t0 = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.d.port, timeout=5)
                kind, allowed = self._one(conn)
            except (OSError, http.client.HTTPException, ValueError) as e:
                kind, allowed = "other:%s" % type(e).__name__, False
                conn.close()
                conn = None
            t1 = time.monotonic()
            with self.lock:
                self.records.append((t0, t1, kind, allowed))
            if kind != "decided":
                time.sleep(0.005)  # failure answers come at once: no busy loop
        if conn:
            conn.close()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(10)
        self.records.sort()
        return self.records

    def allowed(self):
        with self.lock:
            return sum(1 for r in self.records if r[3])

    def decided_since(self, t):
        with self.lock:
            return sum(1 for r in self.records if r[0] >= t and r[2] == "decided")


def window(records):
    """(seconds from the first undecided answer to the first decided answer
    after it, number of undecided answers); (0, 0) when all were decided."""
    first = next((r for r in records if r[2] != "decided"), None)
    if first is None:
        return 0.0, 0
    again = next((r for r in records if r[1] > first[1] and r[2] == "decided"), None)
    end = again[1] if again else records[-1][1]
    return end - first[1], sum(1 for r in records if r[2] != "decided")


def check_answers(records, what):
    others = [r[2] for r in records if r[2] not in ("decided", "failure")]
    harness.eq(others[:5], [], "%s: every answer decided or failure_mode (%d answers)"
               % (what, len(records)))
    slowest = max(r[1] - r[0] for r in records)
    harness.ok(slowest < TIMEOUT_S + SLACK_S, "%s: no hang, slowest answer %.3f s"
               % (what, slowest))
    w, n = window(records)
    harness.diag("%s: window %.3f s from the first undecided to the first decided-again "
                 "answer; %d undecided answers of %d" % (what, w, n, len(records)))
    return w


def failovers_metric(d, port):
    text = d.admin("/metrics").body.decode()
    m = re.search(r'ratelimitd_redis_node_failovers_total\{node="127\.0\.0\.1:%d"\} (\d+)'
                  % port, text)
    return int(m.group(1)) if m else 0


# ------------------------------------------------------------------ tests


def test_found(d, master):
    """The daemon's list starts with a hung sentinel, one that does not know
    the master and a closed port: it moves past each to a good one."""
    res = d.check("closed", "start")
    harness.eq((res.status, res.json.get("degraded")), (200, None),
               "a check is decided on the master the sentinels name")
    harness.eq(harness.fixed_window_count(master.client(), "rl:{closed:start}:t"), "1",
               "its counter is on that master")
    logs = d.logs()
    harness.ok("redis sentinel: master is at" in logs, "the master's address is logged")
    harness.ok(re.search(r'did not answer"? sentinel=\S+ reason="no answer in time"', logs),
               "a sentinel that does not answer is given up after the query deadline")
    harness.ok("redis sentinel does not know the master" in logs,
               "a sentinel that answers nil is skipped (logged)")


def test_password(ports):
    """The sentinels' password: a wrong one finds nothing; the environment's
    wins over the policy file's."""
    d = SentinelDaemon(ports, password="wrong").start(wait_ready=False)
    harness.wait_until(lambda: "redis sentinel unreachable" in d.logs(), 10,
                       what="the daemon with a wrong password to give up a round")
    harness.eq(d.admin("/readyz").status, 503, "a wrong sentinel password: not ready")
    d.stop()
    d = SentinelDaemon(ports, password="wrong")
    d.start(env={"RATELIMITD_SENTINEL_PASSWORD": SENTINEL_PASSWORD})
    harness.eq(d.check("closed", "pw").status, 200,
               "RATELIMITD_SENTINEL_PASSWORD wins over redis.sentinel.password")
    d.stop()


def test_unreachable(top, dead_ports):
    """No sentinel answers: failure_mode answers, /readyz 503, logged."""
    d = SentinelDaemon(dead_ports).start(wait_ready=False)
    harness.wait_until(lambda: "redis sentinel unreachable" in d.logs(), 10,
                       what="the daemon to give up a round")
    res = d.check("closed", "u")
    harness.eq((res.status, res.json.get("error")), (503, "backend_unavailable"),
               "no sentinel answers: checks get the failure_mode answer")
    harness.eq(d.admin("/readyz").status, 503, "and /readyz is 503")
    harness.eq(d.stop(), 0, "a daemon with no sentinel answering exits cleanly")


def test_forced_failover(d, sentinels, old, new):
    load = Load(d, "closed", "a")
    time.sleep(0.5)
    t_failover = time.monotonic()
    harness.wait_until(lambda: sentinels[0].cmd("SENTINEL", "FAILOVER", MASTER) == "OK", 10,
                       interval=0.2, what="SENTINEL FAILOVER to be accepted")
    harness.wait_until(lambda: sentinels[0].master_port() == new.port, 15,
                       what="the sentinels to name the replica")
    harness.wait_until(lambda: "redis sentinel: master switched" in d.logs(), 10,
                       what="the daemon to hear of the switch")
    t_switched = time.monotonic()
    harness.wait_until(lambda: load.decided_since(t_switched) >= 50, 10,
                       what="decisions after the switch")
    time.sleep(0.3)
    records = load.stop()
    check_answers(records, "SENTINEL FAILOVER")
    harness.eq(new.role(), "master", "the replica is now the master")
    before = int(harness.fixed_window_count(new.client(), "rl:{closed:a}:t"))
    for _ in range(5):
        d.check("closed", "a")
    after = int(harness.fixed_window_count(new.client(), "rl:{closed:a}:t"))
    harness.eq(after - before, 5, "the daemon now counts on the new master")
    harness.ok(failovers_metric(d, new.port) >= 1,
               "ratelimitd_redis_node_failovers_total counts the switch on the new master")
    return t_failover


def test_master_killed(d, sentinels, old, new):
    """old is the master now; new its replica."""
    load = Load(d, "bounded", "b")
    harness.wait_until(lambda: load.allowed() >= LIMIT_B // 3, 20, interval=0.005,
                       what="admissions before the kill")
    at_kill = load.allowed()
    # Below the limit, so that the answers after the kill need Redis (a
    # denied key would be answered by the deny cache).
    harness.ok(at_kill < LIMIT_B, "killed under load, %d admissions in" % at_kill)
    t_kill = time.monotonic()
    old.kill()
    harness.wait_until(lambda: sentinels[0].master_port() == new.port, 20, interval=0.01,
                       what="the sentinels to promote the replica")
    t_promoted = time.monotonic()
    harness.diag("master killed: a sentinel named the new master %.3f s after the kill"
                 % (t_promoted - t_kill))
    # Until the key is exhausted on the new master: decided 429s.
    harness.wait_until(lambda: any(r[0] >= t_promoted and r[2] == "decided" and not r[3]
                                   for r in list(load.records)), 20,
                       what="the limit to be reached on the new master")
    time.sleep(0.3)
    records = load.stop()
    check_answers(records, "master killed (SIGKILL)")
    again = next((r for r in records if r[1] >= t_promoted and r[2] == "decided"), None)
    harness.diag("master killed: decided again %.3f s after a sentinel first named the new "
                 "master (the rest of the window is Sentinel's: down-after-milliseconds 1000, "
                 "then the election and the promotion)"
                 % ((again[1] - t_promoted) if again else -1))
    allowed = sum(1 for r in records if r[3])
    counted = int(harness.fixed_window_count(new.client(), "rl:{bounded:b}:t") or 0)
    harness.eq(counted, LIMIT_B, "the new master reached the limit")
    # Allowed answers beyond the limit: admissions the old master counted
    # that never reached the replica. Fewer allowed answers than the limit
    # are checks applied by Redis but answered per failure_mode (their
    # reply lost with the connection, or past the deadline).
    harness.diag("master killed: %d allowed before the kill; %d allowed answers in all against "
                 "a limit of %d: %d admissions beyond the limit, allowed by counters the replica "
                 "had not received" % (at_kill, allowed, LIMIT_B, max(0, allowed - LIMIT_B)))
    harness.ok(allowed - LIMIT_B <= at_kill,
               "the loss is bounded by what the old master had counted")


def test_readonly(d, sentinels, master, replica):
    """master and replica swap roles behind the sentinels' back: the
    daemon's connection to master gets READONLY and it asks again."""
    harness.eq(d.check("closed", "c").status, 200, "decided before the swap")
    load = Load(d, "closed", "c", threads=2)
    time.sleep(0.2)
    replica.cmd("REPLICAOF", "NO", "ONE")
    master.cmd("REPLICAOF", "127.0.0.1", str(replica.port))
    try:
        harness.wait_until(lambda: "READONLY" in d.logs(), 5,
                           what="the daemon to meet READONLY")
        harness.wait_until(lambda: re.search(r"redis sentinel: asking for the master[^\n]*"
                                             r"reason=\"READONLY", d.logs()), 5,
                           what="the daemon to ask the sentinels again")
        harness.ok(True, "a READONLY reply makes the daemon ask the sentinels again")
        time.sleep(0.5)
    finally:
        # Back as the sentinels know it.
        master.cmd("REPLICAOF", "NO", "ONE")
        replica.cmd("REPLICAOF", "127.0.0.1", str(master.port))
    t_back = time.monotonic()
    harness.wait_until(lambda: load.decided_since(t_back) >= 20, 15,
                       what="decisions once the master is back")
    records = load.stop()
    check_answers(records, "READONLY")


def main():
    if not harness.find_program("REDIS_SERVER", "redis-server"):
        harness.skip_all("redis-server not installed")
    if not sentinel_argv():
        harness.skip_all("redis-sentinel not installed")
    top = harness.make_tempdir("rl-sentinel-")
    a = Redis(top, "a").start()
    b = Redis(top, "b").start(replicaof=a.port)
    sentinels = [Sentinel(top, "s%d" % i, a.port) for i in range(3)]
    harness.wait_until(lambda: sentinels_settled(sentinels, a.port, [b.port]), 30, interval=0.2,
                       what="the sentinels to know each other and the replica")

    hung, closed_port = blackhole(), harness.free_port()
    test_unreachable(top, [hung, closed_port])
    stranger = Sentinel(top, "stranger", None)
    test_password([s.port for s in sentinels])
    d = SentinelDaemon([hung, stranger.port, closed_port] + [s.port for s in sentinels],
                       password=SENTINEL_PASSWORD).start()
    harness.at_exit(lambda: harness.failed_count() and harness.diag(
        "daemon log (sentinel lines):\n" + "\n".join(
            line for line in d.logs().splitlines() if "sentinel" in line or "master" in line)))
    test_found(d, a)

    t_failover = test_forced_failover(d, sentinels, a, b)
    harness.wait_until(lambda: sentinels_settled(sentinels, b.port, [a.port]), 30, interval=0.2,
                       what="the old master to follow the new one")
    # A sentinel does not fail the same master over again within twice the
    # failover-timeout of the last attempt.
    time.sleep(max(0.0, t_failover + 6.5 - time.monotonic()))
    test_master_killed(d, sentinels, b, a)

    # b comes back as a replica of the new master a.
    b.start(replicaof=a.port)
    harness.wait_until(lambda: sentinels_settled(sentinels, a.port, [b.port]), 30, interval=0.2,
                       what="the restarted master to be a replica")
    test_readonly(d, sentinels, a, b)
    harness.eq(d.stop(), 0, "the daemon exits cleanly")


if __name__ == "__main__":
    harness.run(main)
