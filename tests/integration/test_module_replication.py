#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_module_replication.py: what ratelimitd.so (src/module/) leaves in
replicas and in the AOF (TAP).

A master with the module and `appendonly yes`, on a loopback port; two
replicas (REPLICAOF), one with the module loaded and one without: a
replica must not need it, since the module replicates its effects (SET
with PXAT), never its own command. Then:

- a seeded stream of ratelimitd.check calls (test_module.py's generator:
  every algorithm the module decides, one or two tiers, several checks,
  shadow, dry runs, costs 0..capacity+1, single requests and batches;
  a quarter of them on the server's clock, ARGV[1] "");
- no full resync during it (the effects came down the replication
  stream), and both replicas reach the master's offset (bounded wait);
- every key equal on the master and both replicas: the same set of keys,
  each with the same value and the same absolute expiry (PEXPIRETIME, to
  the millisecond, since a SET's PX reaches replicas and the AOF as PXAT);
- the replica with the module counted no ratelimitd.check call (INFO
  commandstats): it ran the SETs, not the command;
- the AOF holds SETs and no ratelimitd.check;
- the master restarted from its AOF *without* the module has every key
  as before, value and expiry.

Keys whose expiry is within NEAR_MS of the comparison are left out of it
(counted in the test's description): Redis expires them by its own clock,
and one may go between two reads without any fault of the module.
"""

import glob
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import diag, eq, ok  # noqa: E402
from test_module import T0, batch_args, module_under_test, random_request  # noqa: E402

NEAR_MS = 5000
ROUNDS = 3
CALLS = 150  # a round's
NAMES = ["r%d" % i for i in range(30)]


def info(client, section):
    """INFO section as a dict of its "name:value" lines."""
    out = {}
    for line in client.command("INFO", section).splitlines():
        if ":" in line and not line.startswith("#"):
            name, value = line.split(":", 1)
            out[name] = value
    return out


def snapshot(client):
    """{key: (value, PEXPIRETIME)} of every key, read in one MULTI."""
    keys = sorted(client.command("KEYS", "*"))
    client.command("MULTI")
    for k in keys:
        client.command("DUMP", k)  # any type: bucket tiers are hashes
        client.command("PEXPIRETIME", k)
    got = client.command("EXEC")
    return {k: (got[2 * i], got[2 * i + 1]) for i, k in enumerate(keys)}


def compare(want, got, now_ms, what):
    """Every key of want and got equal in value and expiry, but those that
    expire within NEAR_MS of now_ms. Returns (keys compared, differences)."""
    def near(entry):
        return entry is not None and 0 <= entry[1] < now_ms + NEAR_MS

    compared, bad = 0, []
    for k in sorted(set(want) | set(got)):
        a, b = want.get(k), got.get(k)
        if near(a) or near(b):
            continue
        compared += 1
        if a != b:
            bad.append((k, a, b))
    if bad:
        diag("%s: %d keys differ, first: %r" % (what, len(bad), bad[:3]))
    return compared, bad


def run_stream(client, rnd, state):
    """CALLS seeded calls of ratelimitd.check, continuing state (the
    stream's clock); returns how many were decided."""
    decided = 0
    for _ in range(CALLS):
        state["now"] += rnd.choice((0, 1, 999, 250_000, 1_500_000, 7_000_000))
        reqs = [random_request(rnd, state["now"], NAMES) for _ in range(rnd.choice((1, 1, 2, 4)))]
        if rnd.random() < 0.25:  # Redis's clock: "" for now (calendar bounds stay the stream's)
            reqs = [(keys, [""] + argv[1:]) for keys, argv in reqs]
        if len(reqs) == 1 and rnd.random() < 0.5:
            keys, argv = reqs[0]
        else:
            keys, argv = batch_args(reqs)
        try:
            got = client.command("ratelimitd.check", len(keys), *keys, *argv)
        except harness.RedisError:
            continue  # a request the script refuses too (a calendar a window off)
        decided += isinstance(got, list)
    return decided


def server_now_ms(client):
    """The server's clock in ms (TIME): the one its expiries run on."""
    sec, usec = client.command("TIME")
    return int(sec) * 1000 + int(usec) // 1000


def offset_reached(replica, offset):
    return int(info(replica, "replication").get("slave_repl_offset", -1)) >= offset


def main():
    module = module_under_test()
    port = harness.free_port()
    master = harness.RedisServer(extra_args=[
        "--port", str(port), "--bind", "127.0.0.1", "--appendonly", "yes",
        "--loadmodule", module]).start()
    replicas = {
        "with the module": harness.RedisServer(extra_args=[
            "--replicaof", "127.0.0.1", str(port), "--loadmodule", module]).start(),
        "without the module": harness.RedisServer(extra_args=[
            "--replicaof", "127.0.0.1", str(port)]).start(),
    }
    m = master.client()
    rc = {name: s.client() for name, s in replicas.items()}
    for name, c in rc.items():
        harness.wait_until(lambda: info(c, "replication").get("master_link_status") == "up",
                           30, what="the replica %s to sync" % name)
    full_before = int(info(m, "stats")["sync_full"])

    rnd, state = random.Random(3030), {"now": T0 + 77}
    for round_ in range(1, ROUNDS + 1):
        what = "round %d: " % round_
        decided = run_stream(m, rnd, state)
        ok(decided > CALLS // 2, what + "the master decided %d of %d calls" % (decided, CALLS))
        offset = int(info(m, "replication")["master_repl_offset"])
        for name, c in rc.items():
            harness.wait_until(lambda: offset_reached(c, offset), 30,
                               what="the replica %s to reach offset %d" % (name, offset))
        eq(int(info(m, "stats")["sync_full"]), full_before,
           what + "no full resync: the replicas followed the replication stream")
        want = snapshot(m)
        for name, c in rc.items():
            compared, bad = compare(want, snapshot(c), server_now_ms(m), name)
            ok(not bad and compared > 0, what + "the replica %s: %d keys equal to the master's "
               "in value and PEXPIRETIME (of %d)" % (name, compared, len(want)))
    stats = rc["with the module"].command("INFO", "commandstats")
    ok("cmdstat_ratelimitd.check:" not in stats and "cmdstat_set:" in stats,
       "the replica with the module ran SETs, never ratelimitd.check")

    aof = b"".join(open(p, "rb").read()
                   for p in glob.glob(os.path.join(master.dir, "appendonlydir", "*.incr.aof")))
    ok(b"ratelimitd.check" not in aof.lower() and b"PXAT" in aof,
       "the AOF holds SET ... PXAT and no ratelimitd.check (%d bytes)" % len(aof))

    harness.module_sanitizers_clean(replicas["with the module"], "the replica with the module")
    before = snapshot(m)
    m.close()
    harness.module_sanitizers_clean(master, "the master")

    # From the AOF alone, with no module to replay a command: the effects.
    master.argv = [a for a in master.argv if a not in ("--loadmodule", module)]
    master.restart()
    m = master.client()
    ok(not any("ratelimitd" in str(x) for x in m.command("MODULE", "LIST")),
       "the master restarted without the module")
    compared, bad = compare(before, snapshot(m), server_now_ms(m), "after the AOF restart")
    ok(not bad and compared > 0, "restarted from its AOF: %d keys equal in value and PEXPIRETIME"
       % compared)


if __name__ == "__main__":
    harness.run(main)
