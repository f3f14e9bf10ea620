#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_module_daemon.py: the daemon's redis.module (auto, on, off) against
private redis-servers with and without ratelimitd.so ($RATELIMITD_MODULE):

(a) auto on a Redis with the module: decisions go through
    ratelimitd.check (INFO commandstats: its calls grow, FCALL's do not)
    and answer what a Functions-only run (off, a Redis without the module)
    answers; a sliding_window_log policy and a fixed_window tier past
    2^53 µs (10 M an hour) go to the module too, and batch together with
    the others; /metrics
    ratelimitd_redis_decision_path{path="module"} 1, /readyz decides_by
    module; off on the same Redis never calls ratelimitd.check (not even
    the probe) and says functions; on against a Redis without it: never
    ready, /readyz 503 with a detail that names the node, failure_mode
    closed answers 503 and open answers degraded;
(b) a Cluster whose masters have the module on some nodes only (MODULE
    LOAD before the daemon starts): each master takes its own path (its
    commandstats, its metric series), every check is answered with the
    figures one Redis gives;
(c) the node restarted without the module, then with it again; and
    through Sentinel, SENTINEL FAILOVER from a master with the module to
    its replica without it, and back: the daemon switches to the Functions
    and back, each key's count carried over, and once ready again every
    check is answered;
(d) a rolling enable: MODULE LOAD on the running node is taken at the next
    reconnection (CLIENT KILL here); MODULE UNLOAD under a connected daemon
    (auto) costs no check: the call is sent again by FCALL;
(e) an ACL user refused ratelimitd.check (NOPERM): auto decides by the
    Functions with every check answered; on is unavailable, and says the
    ACL is why.
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import redis_cluster  # noqa: E402
import test_sentinel  # noqa: E402
from daemon import ClusterDaemon, Daemon, hammer, metric  # noqa: E402
from harness import eq, ok  # noqa: E402
from test_module import module_under_test  # noqa: E402

POLICY = """policies:
  tb:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: token_bucket, limit: 5, window: 1h}
  fw:
    failure_mode: closed
    tiers:
      - {name: a, algorithm: gcra, limit: 4, window: 1h}
      - {name: b, algorithm: leaky_bucket, limit: 3, window: 1h, burst: 3}
  log:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: sliding_window_log, limit: 3, window: 1h}
  open:
    failure_mode: open
    tiers:
      - {name: t, algorithm: token_bucket, limit: 5, window: 1h}
  tbbig:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: token_bucket, limit: 100000, window: 1h}
  logbig:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: sliding_window_log, limit: 100000, window: 1h}
  huge:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: fixed_window, limit: 10000000, window: 1h}
"""

# (policy, key) per check: enough of each to reach a denial.
STREAM = [("tb", "k1")] * 7 + [("fw", "k2")] * 6 + [("tb", "k3")] * 2


class ModuleDaemon(Daemon):
    """A daemon with redis.module set (None: the default, auto)."""

    def __init__(self, redis_url, mode, **kw):
        self.mode = mode
        super().__init__(redis_url, POLICY, **kw)

    def redis_where(self):
        line = "" if self.mode is None else "  module: %s\n" % self.mode
        return super().redis_where() + line


class ModuleClusterDaemon(ClusterDaemon):
    def redis_where(self):
        return super().redis_where() + "  module: auto\n"


def redis(module, with_module):
    args = ["--enable-module-command", "yes", "--enable-debug-command", "local"]
    return harness.RedisServer(extra_args=args + (["--loadmodule", module] if with_module
                                                  else [])).start()


def cmdstat(client, command):
    """INFO commandstats' calls of command (0 when absent)."""
    info = client.command("INFO", "commandstats")
    for line in info.splitlines():
        if line.startswith("cmdstat_%s:" % command):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def path_of(d, node):
    """"module", "functions", or None, by the node's decision_path series."""
    for path in ("module", "functions"):
        if metric(d, "ratelimitd_redis_decision_path", node=node, path=path) == 1:
            return path
    return None


def answers(d, stream, prefix=""):
    """Each check's (status, allowed, remaining per tier)."""
    out = []
    for policy, key in stream:
        r = d.check(policy, prefix + key)
        tiers = tuple(t.get("remaining") for c in r.json.get("checks", [])
                      for t in c.get("tiers", []))
        out.append((r.status, r.json.get("allowed"), r.json.get("remaining"), tiers))
    return out


def unix_node(server):
    return "unix:" + server.socket_path


def test_auto_off_on(module):
    with_mod, without = redis(module, True), redis(module, False)
    c = with_mod.client()
    # Two workers: the path series is every worker's word on the node.
    d = ModuleDaemon("unix:" + with_mod.socket_path, None, extra="workers: 2\n").start()
    node = unix_node(with_mod)
    harness.wait_until(lambda: path_of(d, node) == "module", what="auto: the module's path")
    mod0, fcall0 = cmdstat(c, "ratelimitd.check"), cmdstat(c, "fcall")
    got = answers(d, STREAM)
    eq(cmdstat(c, "ratelimitd.check") - mod0 >= 1, True,
       "(a) auto on a Redis with the module: ratelimitd.check calls grow")
    eq(cmdstat(c, "fcall"), fcall0, "(a) and FCALL's do not")
    eq(metric(d, "ratelimitd_redis_decision_path", node=node, path="functions"), 0,
       "(a) decision_path functions 0")
    ready = d.admin("/readyz")
    eq((ready.status, ready.json.get("decides_by")), (200, "module"),
       "(a) /readyz: ready, decides_by module")
    started = [ln for ln in d.logs().splitlines() if "ratelimitd started" in ln]
    ok(started and "redis_module=auto" in started[0], "(a) the start line says redis_module=auto")
    loaded = [ln for ln in d.logs().splitlines() if "redis code loaded" in ln]
    ok(loaded and "target=%s" % node in loaded[0] and "decides_by=module" in loaded[0],
       "(a) the node's code-loaded line says decides_by=module")
    log0 = cmdstat(c, "ratelimitd.check")
    r = [d.check("log", "l").status for _ in range(4)]
    eq(r, [200, 200, 200, 429], "(a) sliding_window_log on a module node: decided")
    eq(cmdstat(c, "ratelimitd.check") - log0 >= 1, True, "(a) by the module")
    huge0 = cmdstat(c, "ratelimitd.check")
    r = d.check("huge", "h")
    eq((r.status, r.json.get("remaining")), (200, 9999999),
       "(a) a fixed_window of 10 M an hour (past 2^53 µs) on a module node: decided")
    eq(cmdstat(c, "ratelimitd.check") - huge0, 1, "(a) by the module")
    eq(cmdstat(c, "fcall"), fcall0, "(a) and never by FCALL")
    # A bucket and a log at once: batches of both, one command.
    counts = {}
    runs = [threading.Thread(target=lambda p=p: counts.__setitem__(p, hammer(d, p, key="h")))
            for p in ("tbbig", "logbig")]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    eq((counts["tbbig"], counts["logbig"]), ({200: 300, 429: 0, "other": 0},) * 2,
       "(a) a bucket and a log at once: every check allowed")
    batched = metric(d, "ratelimitd_redis_batch_size_count") - metric(
        d, "ratelimitd_redis_batch_size_bucket", le="1")
    ok(batched > 0, "(a) some of them batched (%d calls of several)" % batched)
    d.stop()

    ref = ModuleDaemon("unix:" + without.socket_path, "off").start()
    want = answers(ref, STREAM)
    eq(got, want, "(a) the module's answers equal a Functions-only run's (%d checks)"
       % len(STREAM))
    ref.stop()

    c.command("FLUSHALL")
    c.command("CONFIG", "RESETSTAT")
    off = ModuleDaemon("unix:" + with_mod.socket_path, "off").start()
    harness.wait_until(lambda: path_of(off, node) == "functions", what="off: the Functions' path")
    eq(answers(off, STREAM), want, "(a) off on a Redis with the module: the same answers")
    eq(cmdstat(c, "ratelimitd.check"), 0, "(a) off never calls ratelimitd.check, not even to ask")
    ok(cmdstat(c, "fcall") >= 1, "(a) off: the checks by FCALL")
    eq(off.admin("/readyz").json.get("decides_by"), "functions", "(a) off: decides_by functions")
    off.stop()

    on = ModuleDaemon("unix:" + without.socket_path, "on").start(wait_ready=False)
    bare = unix_node(without)

    def unready_named():
        r = on.admin("/readyz")
        return r.status == 503 and bare in (r.json.get("detail") or "")

    harness.wait_until(unready_named, what="on, no module: /readyz names the node")
    r = on.admin("/readyz")
    eq(r.json.get("reason"), "redis_unavailable", "(a) on without the module: redis_unavailable")
    ok("ratelimitd.check" in r.json["detail"] and "redis.module: on" in r.json["detail"],
       "(a) and says why: %s" % r.json["detail"])
    closed = on.check("tb", "x")
    eq((closed.status, closed.json.get("error")), (503, "backend_unavailable"),
       "(a) on without the module: failure_mode closed answers 503")
    opened = on.check("open", "x")
    eq((opened.status, opened.json.get("degraded")), (200, True),
       "(a) on without the module: failure_mode open answers degraded")
    ok(metric(on, "ratelimitd_redis_node_up", node=bare) == 0, "(a) on: node_up 0")
    on.stop()
    with_mod.stop()
    without.stop()


def test_mixed_cluster(module):
    if not redis_cluster.supported():
        harness.skip("(b) " + redis_cluster.why_unsupported())
        return
    cl = redis_cluster.RedisCluster(nmasters=3, replicas=0,
                                    extra_args=["--enable-module-command", "yes"])
    ports = cl.start()
    with_mod = ports[:2]
    for p in with_mod:
        cl.command(p, "MODULE", "LOAD", module)
    d = ModuleClusterDaemon(cl.seeds(), POLICY).start()
    for p in ports:
        want = "module" if p in with_mod else "functions"
        harness.wait_until(lambda: path_of(d, "127.0.0.1:%d" % p) == want,
                           what="node %d's path %s" % (p, want))
        ok(True, "(b) 127.0.0.1:%d decides by %s" % (p, want))
    eq(d.admin("/readyz").json.get("decides_by"), "module,functions",
       "(b) /readyz: decides_by module,functions")
    before = {p: (cmdstat(cl.client(p), "ratelimitd.check"), cmdstat(cl.client(p), "fcall"))
              for p in ports}
    # Keys on every master, each stream's answers as one Redis gives them.
    keys, n = {}, 0
    while len(keys) < len(ports):
        k = "m%d" % n
        keys.setdefault(cl.node_for_key("rl:{tb:%s}:t" % k), k)
        n += 1
    want = [(200, True, 4 - i, (4 - i,)) for i in range(5)] + [(429, False, 0, (0,))]
    for p, k in sorted(keys.items()):
        eq(answers(d, [("tb", k)] * 6), want, "(b) node %d: every check answered right" % p)
    for p in ports:
        mod, fc = (cmdstat(cl.client(p), "ratelimitd.check") - before[p][0],
                   cmdstat(cl.client(p), "fcall") - before[p][1])
        if p in with_mod:
            ok(mod >= 1 and fc == 0, "(b) node %d (module): ratelimitd.check %d, FCALL %d"
               % (p, mod, fc))
        else:
            ok(mod == 0 and fc >= 1, "(b) node %d (no module): ratelimitd.check %d, FCALL %d"
               % (p, mod, fc))
    d.stop()
    cl.stop()


def test_switch_and_rolling(module):
    server = redis(module, True)
    node = unix_node(server)
    d = ModuleDaemon("unix:" + server.socket_path, "auto", timeout="10s").start()
    harness.wait_until(lambda: path_of(d, node) == "module", what="the module's path")
    eq(answers(d, [("tb", "s")] * 2), [(200, True, 4, (4,)), (200, True, 3, (3,))],
       "(c) by the module")
    # The node comes back without the module (a failover to a replica
    # without it is the same to the daemon: a new connection, a new probe).
    server.argv = [a for a in server.argv if a not in ("--loadmodule", module)]
    server.restart()
    harness.wait_until(lambda: d.admin("/readyz").status == 200, what="ready again")
    eq(path_of(d, node), "functions", "(c) restarted without the module: the Functions")
    c = server.client()
    eq([d.check("tb", "s%d" % i).status for i in range(5)], [200] * 5,
       "(c) every check answered after the switch")
    eq((cmdstat(c, "ratelimitd.check"), cmdstat(c, "fcall") >= 5), (0, True),
       "(c) by FCALL (the probe's refusal is no call)")
    # (d) a rolling enable: MODULE LOAD on the running node...
    c.command("MODULE", "LOAD", module)
    eq(d.check("tb", "r").status, 200, "(d) after MODULE LOAD: answered")
    eq(path_of(d, node), "functions", "(d) still the Functions until the next reconnection")
    c.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    harness.wait_until(lambda: path_of(d, node) == "module", what="the module after reconnecting")
    mod0 = cmdstat(c, "ratelimitd.check")
    eq(answers(d, [("tb", "r")]), [(200, True, 3, (3,))], "(d) reconnected: the same key's count")
    ok(cmdstat(c, "ratelimitd.check") > mod0, "(d) by the module")
    # MODULE UNLOAD under the connected daemon: the call comes back as an
    # unknown command, and goes again by FCALL.
    c.command("MODULE", "UNLOAD", "ratelimitd")
    # Many calls (and batches) in flight meet the unload at once: each is
    # sent again. The server's sleep only gathers them (it ends well within
    # redis.timeout); the answers do not depend on how many it gathers.
    sleeper = threading.Thread(target=lambda: server.client().command("DEBUG", "SLEEP", "2"))
    sleeper.start()
    eq(hammer(d, "tbbig", key="u"), {200: 300, 429: 0, "other": 0},
       "(d) MODULE UNLOAD under 100 clients at once: every check answered")
    sleeper.join()
    eq(answers(d, [("tb", "r")]), [(200, True, 2, (2,))],
       "(d) MODULE UNLOAD while connected: the check still answered")
    eq(path_of(d, node), "functions", "(d) and the node decides by the Functions")
    d.stop()
    server.stop()


def test_sentinel_failover(module):
    """(c) through Sentinel: a master with the module, its replica
    without; SENTINEL FAILOVER to the replica, and back."""
    if not test_sentinel.sentinel_argv():
        harness.skip("(c) sentinel: redis-sentinel not installed")
        return
    top = harness.make_tempdir("rl-modsentinel-")
    os.environ["RL_TEST_LOADMODULE"] = module  # the master's alone
    a = test_sentinel.Redis(top, "a").start()
    del os.environ["RL_TEST_LOADMODULE"]
    b = test_sentinel.Redis(top, "b").start(replicaof=a.port)
    sentinels = [test_sentinel.Sentinel(top, "s%d" % i, a.port) for i in range(3)]
    harness.wait_until(lambda: test_sentinel.sentinels_settled(sentinels, a.port, [b.port]), 30,
                       interval=0.2, what="the sentinels to know each other and the replica")
    d = test_sentinel.SentinelDaemon([s.port for s in sentinels],
                                     password=test_sentinel.SENTINEL_PASSWORD,
                                     policy=POLICY).start()
    node_a, node_b = "127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port
    harness.wait_until(lambda: path_of(d, node_a) == "module", what="the master's module")
    eq(answers(d, [("tb", "f")] * 2), [(200, True, 4, (4,)), (200, True, 3, (3,))],
       "(c) sentinel: decided by the master's module")

    def fail_over(frm, to, path):
        # Sentinel promotes a replica without waiting for it to have the
        # master's last writes: wait for them, so the counts carry over.
        harness.wait_until(lambda: frm.cmd("WAIT", "1", "1000") >= 1, 30,
                           what="the replica to have the master's writes (WAIT)")
        harness.wait_until(lambda: sentinels[0].cmd("SENTINEL", "FAILOVER",
                                                    test_sentinel.MASTER) == "OK",
                           30, interval=0.2, what="SENTINEL FAILOVER to be accepted")
        node = "127.0.0.1:%d" % to.port
        harness.wait_until(lambda: path_of(d, node) == path, 20,
                           what="the daemon on %s by %s" % (node, path))

    fail_over(a, b, "functions")
    eq(answers(d, [("tb", "f")] * 2), [(200, True, 2, (2,)), (200, True, 1, (1,))],
       "(c) failed over to the replica without the module: the Functions, the same count")
    eq(cmdstat(b.client(), "ratelimitd.check"), 0, "(c) the new master is never sent the module")
    harness.wait_until(lambda: test_sentinel.sentinels_settled(sentinels, b.port, [a.port]), 30,
                       interval=0.2, what="the old master to follow the new one")
    # A sentinel fails a master over again only after twice its
    # failover-timeout (3 s): SENTINEL FAILOVER is refused until then.
    fail_over(b, a, "module")
    eq(answers(d, [("tb", "f")] * 2), [(200, True, 0, (0,)), (429, False, 0, (0,))],
       "(c) and back to the master with the module: the module, the same count")
    d.stop()


def test_acl(module):
    server = redis(module, True)
    c = server.client()
    # The daemon's user (default here: a unix: URL has no credentials).
    c.command("ACL", "SETUSER", "default", "-ratelimitd.check")
    url = "unix:" + server.socket_path
    node = unix_node(server)
    d = ModuleDaemon(url, "auto").start()
    harness.wait_until(lambda: path_of(d, node) == "functions", what="the Functions' path")
    eq([d.check("tb", "acl").status for _ in range(3)], [200] * 3,
       "(e) a user refused ratelimitd.check, auto: the Functions decide, every check answered")
    d.stop()
    on = ModuleDaemon(url, "on").start(wait_ready=False)

    def refused():
        r = on.admin("/readyz")
        return r.status == 503 and "ACL" in (r.json.get("detail") or "")

    harness.wait_until(refused, what="on: /readyz says the ACL refuses ratelimitd.check")
    ok(True, "(e) on: unavailable, /readyz says the ACL refuses it")
    on.stop()
    server.stop()


def main():
    # Which Redis has the module is this test's to say, whatever the run's
    # RL_TEST_LOADMODULE (test_with_module.py).
    os.environ.pop("RL_TEST_LOADMODULE", None)
    module = module_under_test()
    test_auto_off_on(module)
    test_mixed_cluster(module)
    test_switch_and_rolling(module)
    test_sentinel_failover(module)
    test_acl(module)


if __name__ == "__main__":
    harness.run(main)
