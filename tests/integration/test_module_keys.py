#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_module_keys.py: how the module (src/module/module_keys.c) reaches a
string tier's key, against the Functions on one private redis-server:

- it decides string tiers (fixed_window, token_bucket, gcra, calendar
  windows, `clock: redis`) through the key API, running no Redis command
  of its own: after its calls INFO commandstats counts ratelimitd.check
  and no GET, SET or TIME (a RedisModule_Call is counted as the command
  it runs);
- the keyspace events (notify-keyspace-events KA plus new, keymiss) of a
  stream of calls are those of the same stream through FCALL, event for
  event: a new key, an update, a denial, a key of another type replaced;
- a key the Functions wrote is read and updated by the module, and the
  module's by the Functions (the same bytes, whatever Redis's encoding);
- a batch whose requests repeat the same arguments (decoded once), a
  refused one between them: the Functions' replies;
- WATCH: broken by a write, as the Functions' SET breaks it, and not by
  a denied check or a dry run;
- a value written in place that grows (a count gaining a digit) takes no
  more memory (MEMORY USAGE) than the Functions' SET of it.

Equal state and replication are test_module.py's and
test_module_replication.py's.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import eq, ok  # noqa: E402
from test_module import module_server  # noqa: E402

CAL = "calendar_window 2 %d:%d:%d:%d 0 0"
HOUR = 3_600_000_000


def policies(now_us):
    """One policy string per string-state algorithm; limit 2 (capacity 2),
    so the third call on a key is denied."""
    start = now_us - now_us % HOUR
    cal = CAL % (start - HOUR, start, start + HOUR, start + 2 * HOUR)
    return ["0 fixed_window 2 60000000 0 0", "0 token_bucket 2 60000000 0 0",
            "0 gcra 2 60000000 0 0", "0 " + cal,
            "0 fixed_window 2 60000000 0 0 token_bucket 2 60000000 0 0"]


def server_now(r):
    sec, usec = r.command("TIME")
    return int(sec) * 1_000_000 + int(usec)


def calls(prefix, now_us):
    """(keys, args) of a stream: per policy, 3 calls on fresh keys (allowed,
    allowed, denied), `clock: redis` (now ""), and one batch of two."""
    out = []
    for i, pol in enumerate(policies(now_us)):
        n = len(pol.split()) // 5
        keys = ["%s:%d:%d" % (prefix, i, t) for t in range(n)]
        for _ in range(3):
            out.append((keys, ["", "0", "1", pol]))
    k = ["%s:b:0" % prefix, "%s:b:1" % prefix]
    pol = policies(now_us)[0]
    out.append((k, ["B", "2", "1", "4", "1", "4", "", "0", "1", pol, "", "0", "1", pol]))
    return out


def test_no_commands(r):
    r.command("CONFIG", "RESETSTAT")
    replies = [r.command("ratelimitd.check", len(k), *(k + a))
               for k, a in calls("nc", server_now(r))]
    ok(all(isinstance(x, list) for x in replies), "string tiers: every call decided")
    stats = r.command("INFO", "commandstats")
    ran = sorted(c for c in set(re.findall(r"^cmdstat_([^:]+):", stats, re.M))
                 if c not in ("info", "time") and not c.startswith("config"))
    eq(ran, ["ratelimitd.check"], "string tiers: the module ran no Redis command of its own "
       "(INFO commandstats)")
    ok("cmdstat_time:calls=1," in stats, "string tiers: no TIME but the test's own")


def events(server, r, prefix, head, stream):
    """The keyspace events of stream sent as head (FCALL fn, or the
    module's command), each event's key with prefix cut off, in order.
    A PUBLISH after the stream marks its end: bounded, no sleep."""
    with server.client() as sub:
        sub.command("PSUBSCRIBE", "__keyspace@0__:%s:*" % prefix)
        sub.command("SUBSCRIBE", "end")
        for keys, args in stream:
            r.command(*(head + [len(keys)] + keys + args))
        r.command("PUBLISH", "end", prefix)
        got = []
        while True:
            m = sub._reply()
            if m[0] == "message" and m[1] == "end":
                return got
            got.append((m[2][len("__keyspace@0__:%s" % prefix):], m[3]))


def test_events(server, r, function):
    r.command("CONFIG", "SET", "notify-keyspace-events", "KAnm")
    now = server_now(r)
    for p in ("ef", "em"):  # another type first: SET replaces it
        r.command("HSET", "%s:0:0" % p, "x", "1")
        r.command("RPUSH", "%s:1:0" % p, "x")
    fcall = events(server, r, "ef", ["FCALL", function], calls("ef", now))
    module = events(server, r, "em", ["ratelimitd.check"], calls("em", now))
    ok(len(fcall) > 20, "keyspace events: the Functions' stream gave %d" % len(fcall))
    eq(module, fcall, "keyspace events: the module's, event for event, are the Functions'")
    r.command("CONFIG", "SET", "notify-keyspace-events", "")


def test_shared_keys(r, function):
    """Each path decides on the other's key: 4 calls alternating on one
    key, limit 2 and 4: allowed, allowed, denied, denied, then the
    remaining counts agree."""
    pol = "0 fixed_window 2 60000000 0 0"
    got = []
    for i in range(4):
        head = ["FCALL", function] if i % 2 == 0 else ["ratelimitd.check"]
        got.append(r.command(*(head + [1, "sh:k", "", "0", "1", pol]))[1])
    eq(got, [1, 1, 0, 0], "one key, FCALL and the module alternating: allowed twice, then denied")
    value = r.command("GET", "sh:k")
    ok(value is not None and value.startswith("f:") and value.endswith(":2"),
       "the key holds the Functions' string with a count of 2 (%r)" % value)


def watched(server, r, head, key, args):
    """Whether a call (head, key, args) breaks a WATCH of key: EXEC
    answers nil then."""
    with server.client() as w:
        w.command("WATCH", key)
        w.command("MULTI")
        w.command("PING")
        r.command(*(head + [1, key] + args))
        return w.command("EXEC") is None


def test_watch(server, r, function):
    """WATCH sees a write, as the Functions' SET, and no read: a denied
    check or a dry run leaves a WATCH of its key standing."""
    pol = "0 fixed_window 1 60000000 0 0"
    got = {}
    for name, head in (("fcall", ["FCALL", function]), ("module", ["ratelimitd.check"])):
        key = "w:" + name
        got[name] = [watched(server, r, head, key, ["", "0", "1", pol]),  # allowed: written
                     watched(server, r, head, key, ["", "0", "1", pol]),  # denied
                     watched(server, r, head, key, ["", "1", "1", pol])]  # a dry run
    eq(got["fcall"], [True, False, False], "WATCH: the Functions' write breaks it, nothing else")
    eq(got["module"], got["fcall"], "WATCH: the module's calls break it as the Functions' do")


def test_batch_reuse(r, function):
    """A batch whose requests repeat each other's arguments, a refused one
    between them (a policy that fails on its last word, after the words
    before it were read): every reply equal to FCALL's, the refused one
    refused alone."""
    good = ["", "0", "1", "0 fixed_window 5 60000000 0 0"]
    bad = ["", "0", "1", "0 fixed_window 1 60000000 0 x"]
    frame = ["B", "4"] + ["1", "4"] * 4 + good + good + bad + good
    got = {}
    for name, head in (("fcall", ["FCALL", function]), ("module", ["ratelimitd.check"])):
        keys = ["br:%s:%d" % (name, i) for i in range(4)]
        reply = r.command(*(head + [4] + keys + frame))
        got[name] = [x if isinstance(x, list) else "error" for x in reply]
        # now_us and reset_us aside: the two calls run a moment apart
        got[name] = [x[1:5] + x[6:] if isinstance(x, list) else x for x in got[name]]
    eq(got["module"], got["fcall"], "a batch reusing its requests' arguments around a refused "
       "one: the Functions' replies")
    eq(got["module"][2], "error", "the refused request: an error, alone")


def test_memory(r, function):
    """A value that grows in place (a count from 9 to 12, a bucket's
    tokens) takes no more memory than the Functions' SET gives it."""
    for alg in ("fixed_window", "token_bucket", "gcra"):
        pol = "0 %s 100000 60000000 0 0" % alg
        for _ in range(12):
            r.command("FCALL", function, 1, "mf:" + alg, "", "0", "1", pol)
            r.command("ratelimitd.check", 1, "mm:" + alg, "", "0", "1", pol)
        f, m = (r.command("MEMORY", "USAGE", p + alg, "SAMPLES", "0") for p in ("mf:", "mm:"))
        ok(m <= f, "%s: 12 calls: the module's key takes %d bytes, the Functions' %d"
           % (alg, m, f))


def main():
    server, r, function = module_server()
    test_no_commands(r)
    test_events(server, r, function)
    test_shared_keys(r, function)
    test_memory(r, function)
    test_batch_reuse(r, function)
    test_watch(server, r, function)


if __name__ == "__main__":
    harness.run(main)
