# SPDX-License-Identifier: Apache-2.0
"""test_local_leases.py: exact local leases of hot keys (`lease:`,
src/core/local_lease.h) against a real redis-server.

Three daemons share one Redis; concurrent clients hammer one hot key on
every daemon at once, for each algorithm that leases (fixed_window, a
calendar window, token_bucket, gcra): the admitted total never exceeds the
limit (the bucket's capacity plus its refill over the run) and falls short
of it by no more than the stranded bound (daemons x block size), and every
daemon took leases. Then the leases' life: a reload that changes the policy
gives the block back (Redis's count is then exactly the admitted checks), a
reset drops the blocks everywhere (admissions after it stay within the
limit), a daemon killed with SIGKILL loses its block (never spent twice),
a Redis restart drops the blocks, a SIGTERM drain gives them back. A hot
allowed key costs Redis a few calls per hundred checks (INFO
commandstats). `lease:` on an algorithm that cannot lease is refused by
-t at its line; `backend: memory` accepts and ignores it.

test_cluster.py imports the helpers to run the same checks on a Redis
Cluster: `redis` below is then anything with a client() method (the master
of the key in question)."""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

LIMIT = 400
CAP = LIMIT // 16  # lease: auto's largest block (LOCAL_LEASE_CAP_SHARE)
POLICY = """policies:
  fw: {lease: auto, tiers: [{name: t, algorithm: fixed_window, limit: 400, window: 30s}]}
  cal: {lease: auto, tiers: [{name: t, algorithm: fixed_window, limit: 400, calendar: day}]}
  tb: {lease: auto, tiers: [{name: t, algorithm: token_bucket, limit: 400, window: 1h}]}
  gc: {lease: auto, tiers: [{name: t, algorithm: gcra, limit: 400, window: 1h}]}
  multi: {lease: auto, tiers: [{name: a, algorithm: fixed_window, limit: 400, window: 30s},
                               {name: b, algorithm: token_bucket, limit: 300, window: 1h}]}
  hot: {lease: 500, tiers: [{name: t, algorithm: fixed_window, limit: 100000000, window: 1h}]}
  fixed: {lease: 20, tiers: [{name: t, algorithm: fixed_window, limit: 100, window: 1h}]}
"""
# A bucket refills limit per hour: 400 / 3600 s, a unit every 9 s.
REFILL_PER_S = {"tb": 400 / 3600.0, "gc": 400 / 3600.0, "multi": 0}
# The policies whose limit is per window of that many seconds (fixed_window
# 30s): short, so that a block leased near a window's end is exercised.
WINDOW_S = {"fw": 30, "multi": 30}


def metric(d, name, policy):
    m = promtext.parse(d.admin("/metrics").body.decode())
    return promtext.value(m, name, policy=policy)


def lease_metrics(daemons, policy):
    out = {}
    for k in ("local_leases_taken_total", "local_lease_units_leased_total",
              "local_lease_units_returned_total", "local_lease_units_stranded_total"):
        out[k] = sum(metric(d, "ratelimitd_" + k, policy) for d in daemons)
    return out


def hammer(daemons, policy, key, per_daemon, clients=6):
    """clients keep-alive connections per daemon, per_daemon checks each
    daemon, all at once; returns the number allowed (others: 429)."""
    counts = {"allowed": 0, "other": 0}
    lock = threading.Lock()
    go = threading.Event()
    body = '{"policy": "%s", "key": "%s"}' % (policy, key)

    def client(d, n):
        conn = d.connection()
        go.wait()
        allowed = other = 0
        for _ in range(n):
            conn.request("POST", "/check", body=body)
            r = conn.getresponse()
            r.read()
            if r.status == 200:
                allowed += 1
            elif r.status != 429:
                other += 1
        conn.close()
        with lock:
            counts["allowed"] += allowed
            counts["other"] += other

    threads = [threading.Thread(target=client, args=(d, per_daemon // clients))
               for d in daemons for _ in range(clients)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(120)
    harness.eq(counts["other"], 0, "%s/%s: every answer is 200 or 429" % (policy, key))
    return counts["allowed"]


def exactness(daemons, policies=("fw", "cal", "tb", "gc", "multi")):
    def run(policy, key):
        start = time.monotonic()
        allowed = hammer(daemons, policy, key, per_daemon=360)
        return allowed, time.monotonic() - start

    for policy in policies:
        # A run across a window's end would be allowed a second limit: a
        # slow box (valgrind) runs again in one window, on a fresh key.
        if policy in WINDOW_S:
            allowed, elapsed = harness.in_one_window(
                WINDOW_S[policy], lambda fresh: run(policy, "k-" + fresh), "%s's run" % policy)
        else:
            allowed, elapsed = run(policy, "k")
        limit = 300 if policy == "multi" else LIMIT
        ceiling = limit + int(REFILL_PER_S.get(policy, 0) * elapsed) + 1
        harness.ok(allowed <= ceiling, "%s: admitted %d <= %d across 3 daemons" %
                   (policy, allowed, ceiling))
        bound = 3 * CAP  # one block per daemon (1 worker each), at most CAP
        harness.ok(allowed >= limit - bound, "%s: admitted %d >= limit %d - stranded bound %d" %
                   (policy, allowed, limit, bound))
        m = lease_metrics(daemons, policy)
        harness.ok(all(metric(d, "ratelimitd_local_leases_taken_total", policy) > 0
                       for d in daemons), "%s: every daemon took leases: %r" % (policy, m))
        harness.ok(m["local_lease_units_leased_total"] >= m["local_lease_units_returned_total"]
                   + m["local_lease_units_stranded_total"],
                   "%s: no more returned and stranded than leased" % policy)


def redis_calls(redis):
    return script_calls(redis.client().command("INFO", "commandstats"))


def script_calls(info):
    """FCALL and EVALSHA calls in the text of INFO commandstats."""
    total = 0
    for line in info.splitlines():
        if line.startswith(("cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:")):
            total += int(line.split("calls=")[1].split(",")[0])
    return total


def calls_per_check(calls_now, daemons):
    """calls_now(): the script calls Redis has served so far."""
    before = calls_now()
    allowed = hammer(daemons, "hot", "h", per_daemon=1800)
    calls = calls_now() - before
    harness.eq(allowed, 5400, "hot: every check of the allowed hot key allowed")
    harness.ok(calls <= 0.05 * allowed, "hot: %d Redis calls for %d checks (<= 5%%)" %
               (calls, allowed))


def count(redis, policy, key, tier="t"):
    v = harness.fixed_window_count(redis.client(), "rl:{%s:%s}:%s" % (policy, key, tier))
    return int(v) if v else 0


def take_blocks(daemons, key):
    """Checks of key on each daemon from 6 clients at once until it holds a
    block of `fixed` (lease: 20; the key is hot after 8 checks within
    100 ms): returns how many were allowed."""
    allowed = 0
    for d in daemons:
        before = metric(d, "ratelimitd_local_leases_taken_total", "fixed")
        for _ in range(3):
            allowed += hammer([d], "fixed", key, per_daemon=12)
            if metric(d, "ratelimitd_local_leases_taken_total", "fixed") > before:
                break
        harness.ok(metric(d, "ratelimitd_local_leases_taken_total", "fixed") > before,
                   "%s: the daemon took a block" % key)
    return allowed


def until_denied(daemons, key):
    """Checks key on every daemon until each has been denied 3 times in a
    row; returns how many were allowed."""
    allowed = 0
    for d in daemons:
        denied = 0
        for _ in range(400):
            if d.check("fixed", key).status == 200:
                allowed += 1
                denied = 0
            else:
                denied += 1
                if denied == 3:
                    break
    return allowed


def reload_gives_back(redis, d, extra):
    allowed = take_blocks([d], "rl")
    harness.ok(count(redis, "fixed", "rl") > allowed, "reload: a block is held (Redis counts "
               "%d for %d admitted)" % (count(redis, "fixed", "rl"), allowed))
    before = metric(d, "ratelimitd_local_lease_units_returned_total", "fixed")
    d.write_config(POLICY.replace("limit: 100,", "limit: 101,"), timeout="2s", extra=extra)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: metric(d, "ratelimitd_local_lease_units_returned_total",
                                      "fixed") > before, what="the block given back")
    harness.eq(count(redis, "fixed", "rl"), allowed,
               "reload that changes the policy: the block is given back (count == admitted)")
    d.write_config(POLICY, timeout="2s", extra=extra)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "limit: 100," in open(d.config).read(), what="config back")
    time.sleep(0.5)


def reset_drops(redis, daemons):
    take_blocks(daemons, "rs")
    before = [metric(d, "ratelimitd_local_lease_units_stranded_total", "fixed") for d in daemons]
    r = daemons[0].admin("/v1/keys/fixed/rs", method="DELETE")
    harness.eq(r.status, 200, "reset answered 200")
    harness.wait_until(lambda: all(metric(d, "ratelimitd_local_lease_units_stranded_total",
                                          "fixed") > b for d, b in zip(daemons, before)),
                       what="every daemon dropped its block")
    allowed = until_denied(daemons, "rs")
    harness.ok(allowed <= 100, "reset: admitted after it %d <= 100 (old blocks dropped)" %
               allowed)
    harness.ok(allowed >= 100 - 3 * 20, "reset: admitted after it %d >= 100 - 3 x 20" % allowed)


def kill_loses_block(redis, daemons):
    allowed = take_blocks(daemons, "kill")
    daemons[2].proc.send_signal(signal.SIGKILL)
    daemons[2].proc.wait()
    allowed += until_denied(daemons[:2], "kill")
    harness.ok(allowed <= 100, "SIGKILL: admitted %d <= 100 (the lost block is never spent)"
               % allowed)
    harness.ok(allowed >= 100 - 3 * 20, "SIGKILL: admitted %d >= 100 - 3 x 20" % allowed)
    harness.eq(count(redis, "fixed", "kill"), 100, "SIGKILL: Redis counted the whole limit")


def redis_restart_drops(redis, daemons):
    take_blocks(daemons, "rr")
    before = [metric(d, "ratelimitd_local_lease_units_stranded_total", "fixed") for d in daemons]
    redis.restart()
    harness.wait_until(lambda: all(d.admin("/readyz").status == 200 for d in daemons),
                       timeout=20, what="daemons ready again")
    harness.wait_until(lambda: all(metric(d, "ratelimitd_local_lease_units_stranded_total",
                                          "fixed") > b for d, b in zip(daemons, before)),
                       timeout=20, what="every daemon dropped its block")
    allowed = until_denied(daemons, "rr")
    harness.ok(allowed <= 100, "Redis restart: admitted after it %d <= 100" % allowed)


def drain_gives_back(redis, daemons):
    allowed = take_blocks(daemons, "dr")
    harness.ok(count(redis, "fixed", "dr") > allowed, "drain: blocks are held")
    for d in daemons:
        harness.eq(d.stop(), 0, "daemon exits 0")
    harness.eq(count(redis, "fixed", "dr"), allowed,
               "SIGTERM drain: every block given back (count == admitted)")


def refused():
    tmp = harness.make_tempdir()
    path = os.path.join(tmp, "bad.yaml")
    with open(path, "w") as f:
        f.write("redis: {url: \"redis://127.0.0.1:1\"}\npolicies:\n"
                "  p:\n    lease: auto\n"
                "    tiers: [{name: t, algorithm: sliding_window_log, limit: 5, window: 1s}]\n")
    p = subprocess.run([BINARY, "-t", "-c", path], capture_output=True, text=True)
    harness.ok(p.returncode != 0 and "bad.yaml:4:12" in p.stderr and "cannot be leased" in
               p.stderr, "-t refuses lease: on sliding_window_log at its line: %r" % p.stderr)
    with open(path, "w") as f:
        f.write("redis: {url: \"redis://127.0.0.1:1\"}\npolicies:\n"
                "  p: {lease: 0, tiers: [{name: t, algorithm: gcra, limit: 5, window: 1s}]}\n")
    p = subprocess.run([BINARY, "-t", "-c", path], capture_output=True, text=True)
    harness.ok(p.returncode != 0 and "bad.yaml:3:14" in p.stderr,
               "-t refuses lease: 0 at its line: %r" % p.stderr)


def memory_ignores():
    d = Daemon("redis://127.0.0.1:1/0", POLICY, extra="backend: memory\n", admin=True).start()
    allowed = sum(d.check("fixed", "m").status == 200 for _ in range(120))
    harness.eq(allowed, 100, "backend: memory: lease: accepted, the limit exact")
    text = d.admin("/metrics").body.decode()
    harness.ok("ratelimitd_local_lease" not in text, "backend: memory: no local lease series")
    harness.eq(d.stop(), 0, "memory daemon exits 0")


def daemon(redis, extra):
    return Daemon("unix:" + redis.socket_path, POLICY, timeout="2s", admin=True,
                  extra=extra).start()


def script_modes(redis):
    """The script's take (L<want>) and give-back (G<taken>) modes, called
    directly with chosen times."""
    src = subprocess.run([BINARY, "--print-script"], capture_output=True, text=True).stdout
    c = redis.client()

    def call(keys, mode, now, *checks):
        return c.command("EVAL", src, len(keys), *keys, str(now), mode, *checks)

    w = 1000000
    t0 = 1700000000 * w + 100  # 100 µs into a window of 1 s
    fw = ("0 fixed_window 10 %d 0 0" % w)
    r = call(["lf"], "L5", t0, "1", fw)
    harness.eq((r[1], r[-2], r[-1]), (1, 5, t0 - 100 + w),
               "take: 5 units granted, until the window's end")
    r = call(["lf"], "L100", t0 + 1, "2", fw)
    harness.eq((r[1], r[-2], r[4]), (1, 5, 0), "take: no more than the window has left")
    r = call(["lf"], "L5", t0 + 2, "1", fw)
    harness.eq((r[1], r[-2], r[-1]), (0, 0, 0), "take: a denied check takes nothing")
    r = call(["lf"], "G%d" % t0, t0 + 3, "3", fw)
    harness.eq((r[-2], harness.fixed_window_count(c, "lf")), (3, "7"),
               "give back: into the same window")
    r = call(["lf"], "G%d" % t0, t0 + w, "3", fw)
    harness.eq(r[-2], 0, "give back: never into a later window")
    harness.eq(harness.fixed_window_count(c, "lf"), "7", "give back: a later window untouched")
    tb = "0 token_bucket 10 %d 0 0" % (60 * w)
    r = call(["lt"], "L4", t0, "1", tb)
    harness.eq((r[1], r[-2], r[-1]), (1, 4, t0 + w),
               "take (token_bucket): consumed now, spent within 1 s")
    two = "0 fixed_window 10 %d 0 0 token_bucket 3 %d 0 0" % (w, 60 * w)
    r = call(["m1", "m2"], "L8", t0, "1", two)
    harness.eq(r[-2], 3, "take: every tier at once, as many as the tightest has left")
    for bad, args, why in (
            (["ls", "ls:seq"], ("1", "0 sliding_window_log 10 %d 0 0" % w), "cannot be leased"),
            (["a", "b"], ("1", fw, "1", fw), "exactly one check")):
        try:
            call(bad, "L5", t0, *args)
            harness.ok(False, "take refused: %s" % why)
        except harness.RedisError as e:
            harness.ok(why in str(e), "take refused: %s (%s)" % (why, e))


def main():
    refused()
    memory_ignores()
    redis = harness.RedisServer().start()
    extra = ""
    script_modes(redis)
    daemons = [daemon(redis, extra) for _ in range(3)]
    exactness(daemons)
    calls_per_check(lambda: redis_calls(redis), daemons)
    reload_gives_back(redis, daemons[0], extra)
    reset_drops(redis, daemons)
    drain_gives_back(redis, [daemons[1]])
    daemons[1] = daemon(redis, extra)
    redis_restart_drops(redis, daemons)
    kill_loses_block(redis, daemons)
    for d in daemons[:2]:
        harness.eq(d.stop(), 0, "daemon exits 0")


if __name__ == "__main__":
    harness.run(main)
