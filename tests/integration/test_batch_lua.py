#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_batch_lua.py: lua/check.lua's batch entry point (decide_batch,
redis.batch) in a real redis-server, through FCALL and EVALSHA, at chosen
timestamps: a seeded stream of requests (every algorithm, multi-tier and
multi-check, dry runs of both kinds, reports and refunds, shadow checks,
concurrency leases and their release and renewal, costs 0..limit+1) is
decided once request by request (db 0) and once in batches of 1 to 24
(db 1); every request's reply must be the same, and so must every key's
type, value and expiry (within 3 s: each expiry is set relative to
Redis's clock, and the two runs write moments apart). Then: a request the
code refuses fails alone, its neighbours decided; a malformed frame fails
whole and writes nothing; Redis TIME read once per batch.
"""

import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

T0 = 1_700_000_000_000_000  # µs
SEC = 1_000_000
NONCE = "AbCdEfGhIjKlMnOpQrStU_"  # 22 of [A-Za-z0-9_-]
SLACK_MS = 3000  # expiries written moments apart compare equal within this

R = None
SHA = None
FUNCTION = None
CALLER = "fcall"


def ok(cond, desc):
    return harness.ok(cond, "%s: %s" % (CALLER, desc))


def eq(got, want, desc):
    return harness.eq(got, want, "%s: %s" % (CALLER, desc))


def invoke(keys, argv):
    """One call through the current caller; an error reply as
    ("error", message)."""
    cmd = ("FCALL", FUNCTION) if CALLER == "fcall" else ("EVALSHA", SHA)
    try:
        return R.command(*cmd, len(keys), *keys, *argv)
    except harness.RedisError as e:
        return ("error", str(e))


def batch_frame(reqs):
    """KEYS and ARGV of one batch of reqs, each (keys, argv), as
    scripts.h's SCRIPTS_BATCH says."""
    keys, head, args = [], ["B", str(len(reqs))], []
    for k, a in reqs:
        keys += k
        head += [str(len(k)), str(len(a))]
        args += a
    return keys, head + args


def normalize(reply):
    """A reply as the test compares it: an error by its ratelimitd message
    (Redis words a nested error reply and a whole one differently), the
    rest as is."""
    if isinstance(reply, tuple) or isinstance(reply, harness.RedisError):
        msg = reply[1] if isinstance(reply, tuple) else str(reply)
        m = re.search(r"ratelimitd: [^\n]*?(?= script:|$)", msg)
        return ("error", m.group(0) if m else msg)
    return reply


# One tier per algorithm: the policy words after shadow, and its key count.
def tiers_for(rng, i):
    """A random tier (its five words and its number of keys) for key i."""
    alg = rng.choice(["fixed_window", "sliding_window_log", "sliding_window_counter",
                      "sliding_window_buckets", "token_bucket", "gcra", "leaky_bucket",
                      "calendar_window", "concurrency"])
    limit = rng.choice([1, 3, 5])
    window = rng.choice([10, 60]) * SEC
    if alg == "sliding_window_buckets":
        return "%s %d %d 0 %d" % (alg, limit, window, window // 5), 1, alg
    if alg == "calendar_window":
        s = T0 - T0 % (3600 * SEC)
        h = 3600 * SEC
        return "%s %d %d:%d:%d:%d 0 0" % (alg, limit, s - h, s, s + h, s + 2 * h), 1, alg
    if alg == "leaky_bucket":
        return "%s %d %d 2 0" % (alg, limit, window), 1, alg
    return "%s %d %d 0 0" % (alg, limit, window), 2 if alg == "sliding_window_log" else 1, alg


REPORTS = {"fixed_window", "sliding_window_counter", "sliding_window_buckets", "token_bucket",
           "gcra", "leaky_bucket", "calendar_window", "sliding_window_log"}


def make_stream(seed, n):
    """n requests (keys, argv), at increasing chosen times, over a few keys
    per policy so that they meet in Redis."""
    rng = random.Random(seed)
    policies = []
    for p in range(8):
        ntiers = rng.choice([1, 1, 2])
        words, nkeys, algs = [], [], []
        for _ in range(ntiers):
            w, k, a = tiers_for(rng, p)
            words.append(w)
            nkeys.append(k)
            algs.append(a)
        policies.append((" ".join(words), nkeys, algs))
    reqs, now = [], T0
    leases = []  # (key, member) taken
    for _ in range(n):
        now += rng.choice([0, 1, 1000, 250_000, 3 * SEC])
        if leases and rng.random() < 0.05:
            key, member = leases.pop(rng.randrange(len(leases)))
            op = rng.choice(["r", "n"])
            reqs.append(([key], [str(now), op, member, "0" if op == "r" else str(5 * SEC)]))
            continue
        nchecks = rng.choice([1, 1, 2])
        chosen = rng.sample(range(len(policies)), nchecks)
        mode = rng.choice(["0", "0", "0", "1", "2", "3"])
        keys, argv = [], [str(now), mode]
        concurrency = False
        for p in chosen:
            words, nkeys, algs = policies[p]
            if mode == "3" and not all(a in REPORTS for a in algs):
                mode = "0"
                argv[1] = "0"
            shadow = rng.choice(["0", "0", "1"])
            cost = rng.randint(0, 6)  # limits are 1, 3 or 5: 0 .. limit + 1 and past
            if mode == "3" and rng.random() < 0.2 and all(
                    a in ("fixed_window", "token_bucket", "gcra", "leaky_bucket",
                          "calendar_window") for a in algs):
                cost = -rng.randint(1, 3)
            argv += [str(cost), shadow + " " + words]
            k = rng.randrange(3)
            for t, nk in enumerate(nkeys):
                base = "{p%d:k%d}:t%d" % (p, k, t)
                keys.append(base)
                if nk == 2:
                    keys.append(base + ":seq")
                if algs[t] == "concurrency":
                    concurrency = True
                    if cost > 0 and mode == "0":
                        leases.append((base, "%d:%s" % (cost, NONCE)))
        if concurrency or rng.random() < 0.3:
            argv.append(NONCE)
        reqs.append((keys, argv))
    return reqs


def state(db):
    """Every key of db: type, value and expiry (PTTL, ms)."""
    R.command("SELECT", str(db))
    out = {}
    for k in sorted(R.command("KEYS", "*")):
        t = R.command("TYPE", k)
        if t == "string":
            v = R.command("GET", k)
        elif t == "zset":
            v = R.command("ZRANGE", k, "0", "-1", "WITHSCORES")
        elif t == "hash":
            v = sorted(R.command("HGETALL", k))
        else:
            v = t
        pttl = R.command("PTTL", k)
        out[k] = (t, v, pttl)
    R.command("SELECT", "0")
    return out


def same_state(x, y):
    """Two keys' (type, value, PTTL) alike: the expiries within SLACK_MS
    of each other (each is set relative to Redis's clock when written, and
    the two runs write a chunk's keys moments apart: on a busy box, up to
    a second or so)."""
    if x is None or y is None:
        return x == y
    return x[:2] == y[:2] and (x[2] == y[2] or (x[2] > 0 and y[2] > 0
                                                 and abs(x[2] - y[2]) <= SLACK_MS))


def test_stream(seed, n):
    R.command("FLUSHALL")
    reqs = make_stream(seed, n)
    rng = random.Random(seed + 1)
    singles, batched = [], []
    i, sizes = 0, []
    while i < len(reqs):
        size = rng.randint(1, 24)
        chunk = reqs[i:i + size]
        # The same requests alone in db 0, then as one batch in db 1.
        R.command("SELECT", "0")
        for k, a in chunk:
            singles.append(normalize(invoke(k, a)))
        R.command("SELECT", "1")
        keys, argv = batch_frame(chunk)
        reply = invoke(keys, argv)
        R.command("SELECT", "0")
        if isinstance(reply, tuple) or len(reply) != len(chunk):
            eq(reply, "a reply per request", "batch at request %d" % i)
            return
        batched += [normalize(r) for r in reply]
        sizes.append(len(chunk))
        i += size
    first = next((j for j, (x, y) in enumerate(zip(singles, batched)) if x != y), None)
    ok(first is None and len(singles) == len(batched) == n,
       "seed %d: %d requests in %d batches of 1..24, every reply as alone%s"
       % (seed, n, len(sizes), "" if first is None else
          " (first difference at %d: %r vs %r, request %r)"
          % (first, singles[first], batched[first], reqs[first])))
    errors = sum(1 for r in singles if isinstance(r, tuple))
    ok(errors < n // 10, "seed %d: the stream is mostly decisions (%d errors)" % (seed, errors))
    a, b = state(0), state(1)
    ok(len(a) > 10, "seed %d: the stream wrote state (%d keys)" % (seed, len(a)))
    diff = [k for k in sorted(set(a) | set(b)) if not same_state(a.get(k), b.get(k))]
    ok(not diff, "seed %d: every key's type, value and expiry as alone%s"
       % (seed, "" if not diff else " (%s: %r vs %r)" % (diff[0], a.get(diff[0]),
                                                           b.get(diff[0]))))


def test_errors_isolated():
    R.command("FLUSHALL")
    now = str(T0)
    good = (["{a}:t"], [now, "0", "1", "0 fixed_window 5 60000000 0 0"])
    bad_cost = (["{b}:t"], [now, "0", "x", "0 fixed_window 5 60000000 0 0"])
    bad_alg = (["{c}:t"], [now, "0", "1", "0 nope 5 60000000 0 0"])
    keys, argv = batch_frame([good, bad_cost, good, bad_alg, good])
    reply = invoke(keys, argv)
    ok(isinstance(reply, list) and len(reply) == 5, "a batch of 5 with 2 refused: 5 replies")
    if not (isinstance(reply, list) and len(reply) == 5):
        return
    eq([r[:2] for r in (reply[0], reply[2], reply[4])], [[T0, 1]] * 3,
       "the neighbours of a refused request are decided")
    eq([r[4] for r in (reply[0], reply[2], reply[4])], [4, 3, 2],
       "each in order, each seeing the one before (remaining 4, 3, 2)")
    eq([normalize(reply[1]), normalize(reply[3])],
       [("error", "ratelimitd: ARGV[3] must be an integer >= 0, got x"),
        ("error", 'ratelimitd: unknown algorithm nope in "0 nope 5 60000000 0 0"')],
       "each refused request gets its own error, as alone")
    eq(R.command("GET", "{a}:t"), "f:%d:3" % (T0 - T0 % 60_000_000 + 60_000_000),
       "the three good requests took 3 units")
    eq(R.command("EXISTS", "{b}:t", "{c}:t"), 0, "the refused requests wrote nothing")


def test_misshapen_requests():
    """Requests of the wrong shape (too few arguments or keys for their
    checks, a lease call's counts off) between good ones in a batch: each
    refused as alone, with the same error, its neighbours decided; a
    request is read in place in the batch's KEYS and ARGV, and must never
    read a neighbour's."""
    R.command("FLUSHALL")
    now = str(T0)
    pol = "0 fixed_window 5 60000000 0 0"
    good = (["{a}:t"], [now, "0", "1", pol])
    bad = [([], []), ([], [""]), (["{a}:t"], [now]), (["{a}:t"], [now, "0"]),
           ([], [now, "0", "1", pol]), (["{a}:t", "{a}:u"], [now, "0", "1", pol]),
           (["{a}:t"], [now, "0", "1", pol + " fixed_window"]),
           (["{a}:t"], [now, "r", "m"]), (["{a}:t"], [now, "L5", "1", pol, "1", pol]),
           (["{a}:t"], [now, "0", "1", pol, "short"])]
    alone = [normalize(invoke(k, a)) for k, a in bad]
    ok(all(isinstance(r, tuple) for r in alone), "each misshapen request alone is refused")
    reqs = [good]
    for b in bad:
        reqs += [b, good]
    keys, argv = batch_frame(reqs)
    reply = invoke(keys, argv)
    ok(isinstance(reply, list) and len(reply) == len(reqs), "one reply per request")
    if not (isinstance(reply, list) and len(reply) == len(reqs)):
        return
    eq([normalize(reply[2 * i + 1]) for i in range(len(bad))], alone,
       "each misshapen request refused in the batch as alone")
    eq([reply[2 * i][4] for i in range(len(bad) + 1)], [4, 3, 2, 1, 0] + [0] * (len(bad) - 4),
       "the good requests between them decided in order")


def test_frame_errors():
    R.command("FLUSHALL")
    now = str(T0)
    good = (["{a}:t"], [now, "0", "1", "0 fixed_window 5 60000000 0 0"])
    keys, argv = batch_frame([good, good])
    for what, k, a in (
            ("a key too many", keys + ["{a}:x"], argv),
            ("a key too few", keys[:1], argv),
            ("an argument too many", keys, argv + ["1"]),
            ("a count that is no integer", keys, ["B", "two"] + argv[2:]),
            ("a count of 0", keys, ["B", "0"] + argv[2:]),
            ("an extent that is no integer", keys, argv[:2] + ["x"] + argv[3:]),
            ("a count past the arguments", [], ["B", "3", "0"])):
        r = invoke(k, a)
        ok(isinstance(r, tuple) and "ratelimitd:" in r[1], "malformed frame (%s): one error" % what)
    eq(R.command("DBSIZE"), 0, "no malformed frame wrote anything")


def test_redis_time():
    R.command("FLUSHALL")
    req = (["{t}:t"], ["", "0", "1", "0 fixed_window 100 60000000 0 0"])
    keys, argv = batch_frame([req] * 5)
    reply = invoke(keys, argv)
    nows = [r[0] for r in reply] if isinstance(reply, list) else []
    t = R.command("TIME")
    server = int(t[0]) * SEC + int(t[1])
    ok(len(nows) == 5 and len(set(nows)) == 1 and abs(server - nows[0]) < 5 * SEC,
       "argv[1] \"\": Redis TIME read once per batch, every request decided at it (%r)" % nows)
    eq([r[4] for r in reply], [99, 98, 97, 96, 95], "and each is decided after the one before")
    # A later call, alone or batched, reads TIME again: never the time of
    # the batch before (bounded: 5 tries of 2 ms, TIME moves in µs).
    later, later_batch = [], []
    for _ in range(5):
        time.sleep(0.002)
        later = invoke(*req)
        later_batch = invoke(keys, argv)
        if isinstance(later, list) and later[0] > nows[0]:
            break
    ok(isinstance(later, list) and later[0] > nows[0],
       "a single call after the batch reads TIME itself (%r)" % (later[:1] if isinstance(later, list) else later))
    ok(isinstance(later_batch, list) and later_batch[0][0] >= later[0] and later_batch[-1][0] == later_batch[0][0],
       "and so does the next batch")


def main():
    global R, SHA, FUNCTION, CALLER
    script, lib = harness.decision_code()
    server = harness.RedisServer().start()
    R = server.client()
    SHA = R.command("SCRIPT", "LOAD", script)
    FUNCTION = R.command("FUNCTION", "LOAD", "REPLACE", lib)
    for CALLER in ("fcall", "evalsha"):
        test_stream(7, 600)
        test_stream(8, 600)
        test_errors_isolated()
        test_misshapen_requests()
        test_frame_errors()
        test_redis_time()
    server.stop()


harness.run(main)
