# SPDX-License-Identifier: Apache-2.0
"""test_cluster.py: the Redis Cluster backend against a real 3-master +
3-replica cluster (redis_cluster.py): /readyz while the cluster is not up
yet and while a slot is unserved; checks routed to every master; 10 000
checks over 1 000 keys decided exactly as on a single Redis; batches
(redis.batch) per slot: 100 clients on one key admit exactly its limit in
calls carrying several requests, while spread keys meanwhile meet no
CROSSSLOT error; a request
whose checks live in two slots decided in two phases (a denial on one node
consumes nothing on the other); such a denied request answered, for every
algorithm, with the figures one Redis gives for it (/check, /json and
gRPC, side by side with a daemon on a single Redis); a denial in the second
phase (a node kept busy while another request takes the room) reports what
was really taken; Envoy's quota mode (quota_mode descriptors, the global
envoy_quota_mode and envoy_shadow_mode) deciding a request OK with a
descriptor over in a second round, its counters in several slots or in
one, over /json and gRPC as a single Redis does (the counters on the
nodes: the one over took nothing, the others their cost once), and with
its first round denied in the second phase (the committed ones are not
taken again); a slot moved by hand (MOVED) and a slot in
migration (ASK) followed with no error answer; the per-node metrics; a
reset (admin DELETE) on the key's master, and the reset listener, killed
again and again, back within a moment every time (its backoff starts
afresh once subscribed); replicas given as seeds are let go once the map
is known (no reconnecting forever); a master hung with its connection open
(SIGSTOP) does not stop the slot map's refreshes, and its replica, let go
as a seed, is used once promoted. Local leases of hot keys (`lease:`) on
the cluster, with test_local_leases.py's checks: 3 daemons x concurrent
clients on one hot key admit no more than the limit and no less than the
limit minus the stranded bound (fixed_window, token_bucket); a hot allowed
key costs the masters (INFO commandstats, summed) a few script calls per
hundred checks; a reset, heard by each daemon's reset listener on the
cluster, drops the blocks everywhere; a SIGTERM drain gives them back;
takes across a slot moved under MOVED and under ASK; connections to the
key's master killed under load (each take in flight answered once, the
limit kept).

The fault tests under load (reshard, master kill, 3 daemons) are
test_cluster_faults.py's."""
import json
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import redis_cluster  # noqa: E402
import rls_client  # noqa: E402
import test_local_leases as leases  # noqa: E402
from daemon import ALGORITHMS, Daemon, hammer, metric  # noqa: E402
from daemon import ClusterDaemon as SeedsDaemon  # noqa: E402

POLICY = """policies:
  eq: {tiers: [{name: t, algorithm: fixed_window, limit: 7, window: 1h}]}
  a: {tiers: [{name: t, algorithm: fixed_window, limit: 5, window: 1h}]}
  b: {tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1h}]}
  m: {tiers: [{name: t, algorithm: fixed_window, limit: 100, window: 1h}]}
"""


class ClusterDaemon(Daemon):
    """A daemon whose redis section names cluster seeds instead of a url."""

    def __init__(self, seeds, policy, **kw):
        self.seeds = seeds
        super().__init__(None, policy, **kw)

    def write_config(self, policy, timeout="200ms", clock="redis", extra="", prefix="rl:"):
        text = (
            "listen: 127.0.0.1:%d\n"
            "redis:\n"
            "  cluster: [%s]\n"
            "  timeout: %s\n"
            "  key_prefix: \"%s\"\n"
            "clock: %s\n"
            % (self.port, ", ".join('"%s"' % s for s in self.seeds), timeout, prefix, clock)
        ) + extra + policy
        if self.admin_port:
            text = "admin_listen: 127.0.0.1:%d\n" % self.admin_port + text
        with open(self.config, "w") as f:
            f.write(text)


def redis_key(policy, key, prefix="rl:"):
    return "%s{%s:%s}:t" % (prefix, policy, key)


def key_on(c, policy, want_port, avoid_slots=(), prefix="k"):
    """A key of policy whose slot is served by want_port."""
    for i in range(100000):
        k = "%s%d" % (prefix, i)
        slot = c.keyslot(redis_key(policy, k))
        if slot not in avoid_slots and c.slot_owner(slot) == want_port:
            return k, slot
    raise RuntimeError("no key on %d" % want_port)


class Session:
    """One keep-alive connection, checks as (status, json)."""

    def __init__(self, d):
        self.conn = d.connection()

    def check(self, body):
        self.conn.request("POST", "/check", body=json.dumps(body))
        r = self.conn.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else None


def readiness(c, d):
    harness.eq(d.admin("/readyz").status, 503, "/readyz 503 while the cluster is not created")
    r = d.check("m", "x")
    harness.ok(r.status in (200, 503) and r.status != 500,
               "a check before the cluster is up: a failure_mode answer (%d)" % r.status)
    c.create()
    try:
        harness.wait_until(lambda: d.admin("/readyz").status == 200, 15,
                           what="/readyz once the cluster is up")
        harness.ok(True, "/readyz 200 once the cluster is created")
    except TimeoutError as e:
        harness.ok(False, "/readyz 200 once the cluster is created: %s" % e)
        harness.diag(d.logs()[-3000:])


def routing(c, d):
    s = Session(d)
    statuses = [s.check({"policy": "m", "key": "route%d" % i})[0] for i in range(300)]
    harness.eq(set(statuses), {200}, "300 checks over 300 keys: all decided")
    with_keys = [p for p in c.masters() if c.command(p, "DBSIZE") > 0]
    harness.eq(with_keys, c.masters(), "keys written on every master")
    for p in c.masters():
        v = metric(d, "ratelimitd_redis_node_calls_total", node="127.0.0.1:%d" % p)
        harness.ok(v is not None and v > 0, "node series for 127.0.0.1:%d (calls %s)" % (p, v))
        up = metric(d, "ratelimitd_redis_node_up", node="127.0.0.1:%d" % p)
        harness.eq(up, 1, "ratelimitd_redis_node_up{node=127.0.0.1:%d}" % p)


def equality(c, d):
    """The same sequence on the cluster and on one Redis, answer by answer."""
    single = harness.RedisServer().start()
    d1 = Daemon("unix:" + single.socket_path, POLICY, timeout="2s", admin=True).start()
    rng = random.Random(8)
    seq = [("e%d" % rng.randrange(1000), rng.randint(1, 3)) for _ in range(10000)]
    sc, s1 = Session(d), Session(d1)
    diffs, statuses = [], {}
    for key, cost in seq:
        body = {"policy": "eq", "key": key, "cost": cost}
        st_c, j_c = sc.check(body)
        st_1, j_1 = s1.check(body)
        statuses[st_c] = statuses.get(st_c, 0) + 1
        got = (st_c, j_c and j_c.get("allowed"), j_c and j_c.get("remaining"))
        want = (st_1, j_1 and j_1.get("allowed"), j_1 and j_1.get("remaining"))
        if got != want and len(diffs) < 5:
            diffs.append((key, cost, got, want))
    harness.eq(diffs, [], "10 000 checks over 1 000 keys: the cluster decides as one Redis")
    harness.ok(statuses.get(200, 0) > 1000 and statuses.get(429, 0) > 1000,
               "both decisions occur (%r)" % statuses)
    slots = {c.keyslot(redis_key("eq", "e%d" % i)) for i in range(1000)}
    owners = {c.slot_owner(s) for s in slots}
    harness.eq(sorted(owners), c.masters(), "the 1 000 keys span every master (%d slots)"
               % len(slots))
    d1.stop()
    single.stop()


def batched(c, d):
    """redis.batch on a Cluster: 100 clients at once on one key (one slot)
    are decided in batches (the histogram shows calls carrying more than
    one request) and admit exactly the limit; at the same time, requests
    over keys of every master (their own slots) are all decided: no
    CROSSSLOT error from a batch that mixed slots."""
    before = (metric(d, "ratelimitd_redis_batch_size_count") or 0,
              metric(d, "ratelimitd_redis_batch_size_bucket", le="1") or 0)
    errors_before = metric(d, "ratelimitd_redis_errors_total") or 0
    spread = {"other": 0}

    def spread_client(i):
        conn = d.connection()
        for j in range(60):
            conn.request("POST", "/check",
                         body=json.dumps({"policy": "m", "key": "bs%d-%d" % (i, j)}))
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                spread["other"] += 1
        conn.close()

    threads = [threading.Thread(target=spread_client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    counts = hammer(d, "m", key="batched-hot", clients=100, per_client=3)
    for t in threads:
        t.join(60)
    harness.eq(counts, {200: 100, 429: 200, "other": 0},
               "batched: 300 checks of one key at once admit exactly its limit of 100")
    harness.eq(spread["other"], 0, "batched: 480 checks over spread keys meanwhile all allowed")
    calls = (metric(d, "ratelimitd_redis_batch_size_count") or 0) - before[0]
    alone = (metric(d, "ratelimitd_redis_batch_size_bucket", le="1") or 0) - before[1]
    harness.ok(0 < alone < calls, "batched: %d calls, %d of them alone" % (calls, alone))
    harness.eq((metric(d, "ratelimitd_redis_errors_total") or 0) - errors_before, 0,
               "batched: no error reply (no batch mixed slots)")


def two_phase(c, d):
    m = c.masters()
    ka, slot_a = key_on(c, "a", m[0], prefix="tpa")
    kb, slot_b = key_on(c, "b", m[1], prefix="tpb")
    s = Session(d)
    body = {"checks": [{"policy": "a", "key": ka}, {"policy": "b", "key": kb}]}
    st, j = s.check(body)
    harness.eq(st, 200, "two slots on two masters: allowed")
    harness.eq([x["policy"] for x in j["checks"]], ["a", "b"], "results in the request's order")
    harness.eq(j["checks"][0]["tiers"][0]["remaining"], 4, "a's remaining after one")
    st, j = s.check(body)
    harness.eq(st, 429, "b's limit reached: the request is denied")
    harness.eq([x["allowed"] for x in j["checks"]], [True, False], "a allowed, b denied")
    with c.client(m[0]) as cl:
        harness.eq(harness.fixed_window_count(cl, redis_key("a", ka)), "1",
                   "the denied request took nothing on a's node")
    with c.client(m[1]) as cl:
        harness.eq(harness.fixed_window_count(cl, redis_key("b", kb)), "1", "nor on b's")
    # Reversed order: the results still follow the request.
    st, j = s.check({"checks": [{"policy": "b", "key": kb}, {"policy": "a", "key": ka}]})
    harness.eq([x["policy"] for x in j["checks"]], ["b", "a"], "reversed order kept")
    # A dry run spanning slots writes nothing.
    ka2, _ = key_on(c, "a", m[2], prefix="tpd")
    st, j = s.check({"dry_run": True, "checks": [{"policy": "a", "key": ka2},
                                                 {"policy": "a", "key": ka}]})
    harness.eq(st, 200, "a dry run over two slots is allowed")
    with c.client(m[2]) as cl:
        harness.eq(cl.command("EXISTS", redis_key("a", ka2)), 0, "and wrote nothing")


# Every algorithm behind a policy of limit 3, and a policy whose one
# request uses it up: a request of both, in two slots, is denied by the
# second, and the first must report what one Redis reports for it.
XS_LIMIT = 3
XS_POLICY = "policies:\n" + "".join(
    "  x_%s: {tiers: [{name: t, algorithm: %s, limit: %d, window: 1h%s}]}\n"
    % (a, a, XS_LIMIT, ALGORITHMS[a].replace("99", str(XS_LIMIT - 1))) for a in sorted(ALGORITHMS)
) + """\
  deny: {tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1h}]}
domains:
  - domain: xs
    descriptors:
""" + "".join("      - {key: a_%s, policy: x_%s}\n" % (a, a) for a in sorted(ALGORITHMS)) + """\
      - {key: over, policy: deny}
"""
# The figures that move with the clock, in ms (their unit's factor): the two
# daemons see the same requests a few ms apart, so these may differ by as
# much as the whole sequence took (and whole seconds by one more, rounded
# up). Everything else must be equal. The figures a tentative answer gets
# wrong are off by a unit (remaining) or by an emission interval (20 min).
TIME_FIELDS = {"reset_ms": 1, "retry_after_ms": 1, "delay_ms": 1, "durationUntilReset": 1000,
               "duration_until_reset": 1000, "x-ratelimit-reset": 1000, "retry-after": 1000,
               "x-ratelimit-delay-ms": 1}


def _ms(v, factor):
    """A duration in ms: 12 or "12" (times factor), "1.5s", or None."""
    if v is None:
        return None
    if isinstance(v, str):
        return float(v[:-1]) * 1000 if v.endswith("s") else float(v) * factor
    return v * factor


def same_answer(want, got, slack_ms, path="answer"):
    """[] if got is want (the time figures within slack_ms, see
    TIME_FIELDS), else the differences."""
    if isinstance(got, dict) and isinstance(want, dict):
        if set(got) != set(want):
            return ["%s: fields %s, want %s" % (path, sorted(got), sorted(want))]
        out = []
        for k in got:
            if k in TIME_FIELDS:
                g, w = _ms(got[k], TIME_FIELDS[k]), _ms(want[k], TIME_FIELDS[k])
                slack = slack_ms + (1000 if TIME_FIELDS[k] == 1000 else 1)
                if (g is None) != (w is None) or (g is not None and abs(g - w) > slack):
                    out.append("%s.%s: %r, want %r (+-%d ms)" % (path, k, got[k], want[k], slack))
            else:
                out += same_answer(want[k], got[k], slack_ms, "%s.%s" % (path, k))
        return out
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        if len(got) != len(want):
            return ["%s: %d items, want %d" % (path, len(got), len(want))]
        out = []
        for i, (w, g) in enumerate(zip(want, got)):
            out += same_answer(w, g, slack_ms, "%s[%d]" % (path, i))
        return out
    return [] if got == want else ["%s: %r, want %r" % (path, got, want)]


def rls_key(policy, domain, k, v, prefix="rl:"):
    """The Redis key of a policy: descriptor's only tier (docs/envoy.md)."""
    return "%s{%s:%s%%7C%s=%s}:t" % (prefix, policy, domain, k, v)


def rls_value_on(c, policy, k, want_port, prefix):
    for i in range(100000):
        v = "%s%d" % (prefix, i)
        if c.node_for_key(rls_key(policy, "xs", k, v)) == want_port:
            return v
    raise RuntimeError("no value on %d" % want_port)


def grpc_answer(resp):
    """A RateLimitResponse as a dict like /json's, to compare."""
    return {
        "overall": resp.overall_code,
        "statuses": [{"code": s.code,
                      "limit": [s.current_limit.requests_per_unit, s.current_limit.unit],
                      "limit_remaining": s.limit_remaining,
                      "duration_until_reset": s.duration_until_reset.seconds
                      + s.duration_until_reset.nanos / 1e9}
                     for s in resp.statuses],
        "headers": {h.key.lower(): h.value for h in resp.response_headers_to_add},
    }


def headers_of(j):
    """/json's responseHeadersToAdd as a dict (its order is not the point)."""
    j = dict(j)
    j["responseHeadersToAdd"] = {h["key"].lower(): h["value"]
                                 for h in j.get("responseHeadersToAdd", [])}
    return j


def rls_asker(via, domain, daemons, channels):
    """ask(i, [(key, value)...]): one Envoy request of one-entry
    descriptors to daemons[i], over POST /json ((status, answer)) or gRPC
    (grpc_answer)."""
    def json_rls(i, descs):
        body = {"domain": domain, "descriptors": [{"entries": [{"key": k, "value": v}]}
                                                  for k, v in descs]}
        r = daemons[i].request("POST", "/json", json.dumps(body))
        return r.status, headers_of(json.loads(r.body))

    def grpc_rls(i, descs):
        return grpc_answer(rls_client.should_rate_limit(channels[i], domain,
                                                        [[(k, v)] for k, v in descs]))
    return json_rls if via == "json" else grpc_rls


def denied_figures(c):
    """For every algorithm, a request of two checks in two slots (on two
    masters), denied by the second, answered by the cluster exactly as by
    one Redis with the same prior state: over /check, /json and gRPC."""
    grpc_why = rls_client._missing()
    if not grpc_why:
        rls_client._load()
    m = c.masters()
    grpc_ports = (harness.free_port(), harness.free_port())
    dc = ClusterDaemon(c.seeds(), XS_POLICY, timeout="2s", admin=True,
                       extra="grpc_listen: 127.0.0.1:%d\n" % grpc_ports[0]).start()
    single = harness.RedisServer().start()
    d1 = Daemon("unix:" + single.socket_path, XS_POLICY, timeout="2s", admin=True,
                extra="grpc_listen: 127.0.0.1:%d\n" % grpc_ports[1]).start()
    daemons = (dc, d1)
    channels = None if grpc_why else [rls_client.channel("127.0.0.1:%d" % p) for p in grpc_ports]

    def check(d, checks, dry_run=None):
        r = d.check(checks=checks, dry_run=dry_run)
        return r.status, json.loads(r.body)

    for alg in sorted(ALGORITHMS):
        pol = "x_" + alg
        # /check: the keys on two masters, so in two slots.
        ka, _ = key_on(c, pol, m[0], prefix="xc" + alg)
        kd, _ = key_on(c, "deny", m[1], prefix="xcd" + alg)
        a, both = [{"policy": pol, "key": ka}], [{"policy": pol, "key": ka},
                                                 {"policy": "deny", "key": kd}]
        t0 = time.monotonic()
        for d in daemons:  # the same prior state on both
            check(d, a)
            check(d, [{"policy": "deny", "key": kd}])
        got = check(dc, both)
        want = check(d1, both)
        got_dry = check(dc, both, dry_run=True)
        want_dry = check(d1, both, dry_run=True)
        slack = (time.monotonic() - t0) * 1000
        harness.eq(got[0], 429, "%s, /check, two slots, the second over: denied" % alg)
        harness.eq(same_answer(want, got, slack), [],
                   "%s, /check: a denied cross-slot request has one Redis's figures (%s)"
                   % (alg, json.dumps(got[1]["checks"][0]["tiers"][0])))
        harness.eq(same_answer(want_dry, got_dry, slack), [],
                   "%s, /check: and so does the same request as a dry run" % alg)
        if alg == "fixed_window":
            with c.client(m[0]) as cl:
                harness.eq(harness.fixed_window_count(cl, redis_key(pol, ka)), "1",
                           "%s: and the denial took nothing" % alg)
        # Envoy RLS: /json, then gRPC, each on values of its own.
        for via in ("json", "grpc"):
            if via == "grpc" and grpc_why:
                harness.skip("%s over gRPC: %s" % (alg, grpc_why))
                continue
            va = rls_value_on(c, pol, "a_" + alg, m[0], via + alg)
            vd = rls_value_on(c, "deny", "over", m[1], via + "d" + alg)
            descs = [("a_" + alg, va), ("over", vd)]
            ask = rls_asker(via, "xs", daemons, channels)
            t0 = time.monotonic()
            for i in (0, 1):
                ask(i, descs[:1])
                ask(i, descs[1:])
            got = ask(0, descs)
            want = ask(1, descs)
            slack = (time.monotonic() - t0) * 1000
            with c.client(m[0]) as cl:
                harness.eq(cl.command("EXISTS", rls_key(pol, "xs", "a_" + alg, va)), 1,
                           "%s, %s: the descriptor's key is where the test put it" % (alg, via))
            harness.eq(same_answer(want, got, slack), [],
                       "%s, %s: a denied cross-slot request has one Redis's figures (%r)"
                       % (alg, via, got))
    for ch in channels or ():
        ch.close()
    harness.eq(dc.stop(), 0, "cross-slot daemon exits 0")
    d1.stop()
    single.stop()


# Quota mode's second round (docs/envoy.md "Quota mode"): a request
# allowed overall although a descriptor is over was denied as a whole by
# the first round (nothing taken), and is decided again on the descriptors
# that allowed, which then take their cost. "over" and "soft" (a quota
# descriptor) allow 1, used up beforehand; every algorithm stands behind a
# quota descriptor (soft2_*) and a normal one (hard_*) that are under.
QM_LIMIT = 5
QM_POLICY = "policies:\n" + "".join(
    "  u_%s: {tiers: [{name: t, algorithm: %s, limit: %d, window: 1h%s}]}\n"
    % (a, a, QM_LIMIT, ALGORITHMS[a].replace("99", str(QM_LIMIT - 1)))
    for a in sorted(ALGORITHMS)
) + """\
  one: {tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1h}]}
domains:
  - domain: qm
    descriptors:
      - {key: soft, policy: one, quota_mode: true}
      - {key: over, policy: one}
""" + "".join("      - {key: soft2_%s, policy: u_%s, quota_mode: true}\n"
              "      - {key: hard_%s, policy: u_%s}\n" % (a, a, a, a) for a in sorted(ALGORITHMS))
# The modes: the daemons' extra configuration, and the request (descriptor
# keys; the first is the one used up) that is OK while that descriptor is
# over: two quota descriptors, one over, and a normal one; both made quota
# descriptors by the global switch; or anything, by the global shadow mode.
QM_MODES = (
    ("quota_mode", "", ("soft", "soft2_%s", "hard_%s")),
    ("envoy_quota_mode", "envoy_quota_mode: true\n", ("over", "hard_%s")),
    ("envoy_shadow_mode", "envoy_shadow_mode: true\n", ("over", "hard_%s")),
)


def qm_values(c, policies, keys, layout, prefix):
    """A value for each descriptor key (of its policy) so that its counter
    is on a master of its own ("slots": the request spans slots, and so
    does its second round when two descriptors are left), or all of them
    in one slot ("one slot": one atomic call per round; the hash tag holds
    the policy and the value, braces escaped, so the values are searched
    for a common slot). Returns the values and their slots."""
    m = c.masters()
    values, slots = [], []
    for i, (pol, k) in enumerate(zip(policies, keys)):
        want = set(c.slots_of(m[i % len(m)])) if layout == "slots" or not slots \
            else {slots[0]}
        for n in range(200000):  # bounded: one slot in 16384 needs ~16384 on average
            v = "%s%d_%d" % (prefix, i, n)
            slot = redis_cluster.keyslot(rls_key(pol, "qm", k, v))
            if slot in want:
                values.append(v)
                slots.append(slot)
                break
        else:
            raise RuntimeError("no value for %s (%s)" % (k, layout))
    return values, slots


GRPC_CODES = {rls_client.CODE_OK: "OK", rls_client.CODE_OVER_LIMIT: "OVER_LIMIT"}


def rls_codes(answer):
    """(overall, [status codes]) of a /json (status, answer) or gRPC
    answer, as code names."""
    if isinstance(answer, tuple):
        j = answer[1]
        return j.get("overallCode"), [x.get("code") for x in j.get("statuses", [])]
    return (GRPC_CODES.get(answer["overall"]),
            [GRPC_CODES.get(x["code"]) for x in answer["statuses"]])


def quota_rounds(c):
    """Quota mode's second round on a cluster: for each mode (quota_mode
    descriptors, envoy_quota_mode, envoy_shadow_mode), every algorithm,
    the counters in two or three slots or in one, over /json and gRPC, a
    request OK with one descriptor over answers as on one Redis with the
    same prior state; the descriptors under their limit take their cost
    once, the one over takes nothing (counted on the nodes)."""
    grpc_why = rls_client._missing()
    if not grpc_why:
        rls_client._load()
    single = harness.RedisServer().start()
    for mi, (mode, extra, keys) in enumerate(QM_MODES):
        grpc_ports = (harness.free_port(), harness.free_port())
        dc = ClusterDaemon(c.seeds(), QM_POLICY, timeout="2s", admin=True,
                           extra=extra + "grpc_listen: 127.0.0.1:%d\n" % grpc_ports[0]).start()
        d1 = Daemon("unix:" + single.socket_path, QM_POLICY, timeout="2s", admin=True,
                    extra=extra + "grpc_listen: 127.0.0.1:%d\n" % grpc_ports[1]).start()
        channels = None if grpc_why else [rls_client.channel("127.0.0.1:%d" % p)
                                          for p in grpc_ports]
        for alg in sorted(ALGORITHMS):
            ks = [k % alg if "%" in k else k for k in keys]
            pols = ["one" if k in ("soft", "over") else "u_" + alg for k in ks]
            for layout in ("slots", "one slot"):
                for via in ("json", "grpc"):
                    what = "%s, %s, %s, %s" % (mode, alg, layout, via)
                    if via == "grpc" and grpc_why:
                        harness.skip("%s: %s" % (what, grpc_why))
                        continue
                    vals, slots = qm_values(c, pols, ks, layout,
                                            "q%d%s%s%s" % (mi, alg[:5], layout[0], via[0]))
                    descs = list(zip(ks, vals))
                    call = rls_asker(via, "qm", (dc, d1), channels)
                    t0 = time.monotonic()
                    for i in (0, 1):  # the same prior state on both
                        call(i, descs[:1])   # the first descriptor used up
                        call(i, descs[-1:])  # the normal one taken once
                    got, want = call(0, descs), call(1, descs)
                    slack = (time.monotonic() - t0) * 1000
                    harness.eq(rls_codes(got), ("OK", ["OVER_LIMIT"] + ["OK"] * (len(descs) - 1)),
                               "%s: OK with %s over (slots %s)" % (what, ks[0], slots))
                    harness.eq(same_answer(want, got, slack), [],
                               "%s: the second round answers as one Redis (%r)" % (what, got))
                    if mode == "quota_mode":
                        # The quota descriptor over and a normal one under:
                        # every quota descriptor is over, so OVER_LIMIT.
                        pair = [descs[0], descs[-1]]
                        got, want = call(0, pair), call(1, pair)
                        slack = (time.monotonic() - t0) * 1000
                        harness.eq((rls_codes(got), same_answer(want, got, slack)),
                                   (("OVER_LIMIT", ["OVER_LIMIT", "OK"]), []),
                                   "%s: the only quota descriptor over and a normal one: "
                                   "OVER_LIMIT, as on one Redis" % what)
                    if alg == "fixed_window":
                        # Taken: 1 + 0 (over), 0 + 1 (the quota one under),
                        # 1 + 1 (the normal one, once: not by the denied
                        # first round, nor by the OVER_LIMIT pair).
                        counts = []
                        for (k, v), pol in zip(descs, pols):
                            key = rls_key(pol, "qm", k, v)
                            with c.client(c.node_for_key(key)) as cl:
                                counts.append(harness.fixed_window_count(cl, key))
                        harness.eq(counts, ["1"] + ["1"] * (len(descs) - 2) + ["2"],
                                   "%s: the counters on the nodes: the one over took nothing, "
                                   "the others their cost once" % what)
                    # The state is one Redis's: the normal descriptor again.
                    got, want = call(0, descs[-1:]), call(1, descs[-1:])
                    slack = (time.monotonic() - t0) * 1000
                    harness.eq(same_answer(want, got, slack), [],
                               "%s: %s afterwards as on one Redis (%r)" % (what, ks[-1], got))
        for ch in channels or ():
            ch.close()
        harness.eq(dc.stop(), 0, "%s: the cluster daemon exits 0" % mode)
        d1.stop()
    single.stop()


BUSY_LUA = """local t = redis.call('TIME')
local t0 = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - t0 >= tonumber(ARGV[1])
return 1"""


def phase_two_denial(c, d):
    """A denial in the second phase: a's node is kept busy (a script that
    loops 0.5 s) while the request's dry runs are out, and meanwhile another
    request takes b's only room. The request is then denied by b on the
    re-check after a committed: a keeps what it took, and says so."""
    m = c.masters()
    ka, _ = key_on(c, "a", m[0], prefix="p2a")
    kb, _ = key_on(c, "b", m[1], prefix="p2b")
    busy = threading.Thread(target=lambda: c.command(m[0], "EVAL", BUSY_LUA, 0, 500000))
    busy.start()
    time.sleep(0.1)
    out = {}
    req = threading.Thread(target=lambda: out.update(r=d.check(checks=[
        {"policy": "a", "key": ka}, {"policy": "b", "key": kb}])))
    req.start()
    time.sleep(0.15)
    taker = d.check("b", kb)
    req.join(10)
    busy.join(10)
    harness.eq(taker.status, 200, "phase 2: another request took b's room meanwhile")
    r = out.get("r")
    j = r and json.loads(r.body)
    harness.eq(r and r.status, 429, "phase 2: the request is denied by b's re-check")
    ta = j and j["checks"][0]["tiers"][0]
    harness.eq(j and [x["allowed"] for x in j["checks"]], [True, False], "a allowed, b denied")
    with c.client(m[0]) as cl:
        harness.eq(harness.fixed_window_count(cl, redis_key("a", ka)), "1",
                   "phase 2: a committed, and keeps it")
    now = json.loads(d.check("a", ka, cost=0, dry_run=True).body)
    harness.eq(ta and (ta["remaining"], ta["reset_ms"] > 0), (now["remaining"], True),
               "phase 2: a's figures are those of the unit it really took (remaining %s)"
               % (ta and ta["remaining"]))


def quota_phase_two(c):
    """A quota-mode request whose first round is denied in the Cluster's
    second phase: soft's room is taken between the phases (its node
    answered the dry run at once; soft2's was kept busy), so soft denies on
    its re-check while soft2 and hard commit. The request is OK (soft2
    allows) and soft2 and hard have taken their cost: no second round may
    take it again."""
    m = c.masters()
    d = ClusterDaemon(c.seeds(), QM_POLICY, timeout="2s", admin=True).start()
    keys = ["soft", "soft2_fixed_window", "hard_fixed_window"]
    pols = ["one", "u_fixed_window", "u_fixed_window"]
    vals, _ = qm_values(c, pols, keys, "slots", "qp2")
    descs = list(zip(keys, vals))
    call = rls_asker("json", "qm", (d,), None)
    busy = threading.Thread(target=lambda: c.command(m[1], "EVAL", BUSY_LUA, 0, 500000))
    busy.start()
    time.sleep(0.1)
    out = {}
    req = threading.Thread(target=lambda: out.update(r=call(0, descs)))
    req.start()
    time.sleep(0.15)
    taker = call(0, descs[:1])
    req.join(10)
    busy.join(10)
    harness.eq(rls_codes(taker), ("OK", ["OK"]), "quota, phase 2: soft's room taken meanwhile")
    r = out.get("r")
    harness.eq(r and rls_codes(r), ("OK", ["OVER_LIMIT", "OK", "OK"]),
               "quota, phase 2: soft denies on its re-check, the request is OK")
    harness.eq(r and [x.get("limitRemaining", 0) for x in r[1]["statuses"]], [0, 4, 4],
               "quota, phase 2: the figures of what was taken")
    counts = []
    for (k, v), pol in zip(descs, pols):
        key = rls_key(pol, "qm", k, v)
        with c.client(c.node_for_key(key)) as cl:
            counts.append(harness.fixed_window_count(cl, key))
    harness.eq(counts, ["1", "1", "1"],
               "quota, phase 2: soft2 and hard took their cost once (soft: the taker's)")
    harness.eq(d.stop(), 0, "quota, phase 2: the daemon exits 0")


def moved(c, d):
    m = c.masters()
    k, slot = key_on(c, "m", m[0], prefix="mv")
    s = Session(d)
    harness.eq(s.check({"policy": "m", "key": k})[0], 200, "a check before the move")
    before = metric(d, "ratelimitd_redis_node_moved_total", node="127.0.0.1:%d" % m[0]) or 0
    c.migrate_slot(slot, m[0], m[1])
    st, j = s.check({"policy": "m", "key": k})
    harness.eq(st, 200, "after a manual slot move: decided (MOVED followed)")
    harness.eq(j and j["remaining"], 98, "the count moved with the key")
    after = metric(d, "ratelimitd_redis_node_moved_total", node="127.0.0.1:%d" % m[0]) or 0
    harness.ok(after > before, "ratelimitd_redis_node_moved_total counted (%s -> %s)"
               % (before, after))
    st, j = s.check({"policy": "m", "key": k})
    harness.eq((st, j and j["remaining"]), (200, 97), "next check goes to the new owner")


def ask(c, d):
    m = c.masters()
    k, slot = key_on(c, "m", m[1], prefix="ask")
    s = Session(d)
    c.begin_migration(slot, m[1], m[2])
    before = metric(d, "ratelimitd_redis_node_ask_total", node="127.0.0.1:%d" % m[1]) or 0
    # The key is on neither node yet: the source answers ASK.
    st, j = s.check({"policy": "m", "key": k})
    harness.eq((st, j and j["remaining"]), (200, 99), "a key of a migrating slot: decided (ASK)")
    with c.client(m[2]) as cl:
        cl.command("ASKING")  # the importing node serves the slot only after it
        harness.eq(harness.fixed_window_count(cl, redis_key("m", k)), "1",
                   "written on the importing node")
    after = metric(d, "ratelimitd_redis_node_ask_total", node="127.0.0.1:%d" % m[1]) or 0
    harness.ok(after > before, "ratelimitd_redis_node_ask_total counted (%s -> %s)"
               % (before, after))
    st, j = s.check({"policy": "m", "key": k})
    harness.eq((st, j and j["remaining"]), (200, 98), "again through ASK")
    c.move_keys(slot, m[1], m[2])
    c.finish_migration(slot, m[2])
    st, j = s.check({"policy": "m", "key": k})
    harness.eq((st, j and j["remaining"]), (200, 97), "after the migration ends")


def unserved(c, d):
    slot = 7
    owner = c.slot_owner(slot)
    for p in c.live_ports():
        try:
            c.command(p, "CLUSTER", "DELSLOTS", slot)
        except harness.RedisError:
            pass  # not assigned in that node's view
    try:
        harness.wait_until(lambda: d.admin("/readyz").status == 503, 15,
                           what="/readyz 503 with slot 7 unserved")
        harness.ok(True, "/readyz 503 while a slot is unserved")
    except TimeoutError as e:
        harness.ok(False, str(e))
    c.command(owner, "CLUSTER", "ADDSLOTS", slot)
    c.command(owner, "CLUSTER", "BUMPEPOCH")
    c.wait_ok(30)
    try:
        harness.wait_until(lambda: d.admin("/readyz").status == 200, 15,
                           what="/readyz 200 with slot 7 served again")
        harness.ok(True, "/readyz 200 once the slot is served again")
    except TimeoutError as e:
        harness.ok(False, str(e))


TOKEN = "cluster-admin-token"
AUTH = {"Authorization": "Bearer " + TOKEN}


def listeners(c):
    """The reset listener's subscriptions, over every live node."""
    n = 0
    for p in c.live_ports():
        try:
            n += c.command(p, "PUBSUB", "NUMSUB", "rl:reset")[1]
        except (OSError, harness.RedisError):
            pass
    return n


def resets(c, d):
    k, _ = key_on(c, "b", c.masters()[0], prefix="reset")
    harness.eq([d.check("b", k, headers=AUTH).status for _ in range(2)], [200, 429],
               "reset: the key is used up")
    r = d.request("DELETE", "/v1/keys/b/" + k, headers=AUTH, port=d.admin_port)
    harness.ok(r.status == 200 and r.json and r.json.get("deleted") == 1,
               "DELETE on a cluster: the key's master deletes it (%r)" % (r.json,))
    harness.eq(d.check("b", k, headers=AUTH).status, 200, "reset: the key is allowed again")
    # Killed again and again: each time it subscribes again within a
    # moment. Its reconnect backoff doubles on every loss (50 ms to 2 s);
    # once subscribed it must start afresh, or after a few losses the
    # listener stays away for a second or two each time, deaf to resets.
    waits = []
    for _ in range(7):
        try:
            harness.wait_until(lambda: listeners(c) >= 1, 10, what="the reset listener")
        except TimeoutError:
            break
        for p in c.live_ports():
            try:
                c.command(p, "CLIENT", "KILL", "TYPE", "pubsub")
            except (OSError, harness.RedisError):
                pass
        t0 = time.monotonic()
        try:
            harness.wait_until(lambda: listeners(c) >= 1, 10, interval=0.01,
                               what="the reset listener back")
        except TimeoutError:
            break
        waits.append(time.monotonic() - t0)
    harness.ok(len(waits) == 7 and max(waits[-3:]) < 0.7,
               "the reset listener, killed 7 times, is back within 0.7 s each time (%s)"
               % ", ".join("%.2f" % w for w in waits))


def replica_seeds(c, d):
    """Every node is a seed here, replicas too. A replica fails the ROLE
    check, so its connection must be let go once the map is known rather
    than retried (and logged, and counted) forever."""
    time.sleep(1)  # connects seen at start are fine
    before = d.logs().count("redis node is not a master")
    reconnects = metric(d, "ratelimitd_redis_reconnects_total")
    time.sleep(4)
    harness.eq(d.logs().count("redis node is not a master"), before,
               "replicas given as seeds: no ROLE refusal over 4 s once the map is known")
    harness.eq(metric(d, "ratelimitd_redis_reconnects_total"), reconnects,
               "and no reconnect counted")
    harness.eq(d.logs().count('msg="redis cluster node let go"'), len(c.ports) - len(c.masters()),
               "each replica let go once, saying why")


def hung_master(c, d):
    """A master paused with its connections open answers nothing, and a
    CLUSTER SLOTS sent to it would wait forever: with one refresh in flight
    at a time, the daemon would never see the cluster change again. A slot
    unserved meanwhile (refreshes every 250 ms, round robin over the nodes,
    so one goes to the paused master) and served again must be seen."""
    masters = c.masters()
    hung = next(p for p in masters if p != c.ports[0])
    other = next(p for p in masters if p != hung)
    slot = c.slots_of(other)[0]
    c.procs[hung].send_signal(signal.SIGSTOP)
    try:
        for p in c.live_ports():
            if p != hung:
                try:
                    c.command(p, "CLUSTER", "DELSLOTS", slot)
                except harness.RedisError:
                    pass
        try:
            harness.wait_until(lambda: d.admin("/readyz").status == 503, 15,
                               what="/readyz 503 with a slot unserved")
        except TimeoutError as e:
            harness.diag(str(e))
        time.sleep(3)  # a dozen refreshes: some went to the paused master
        c.command(other, "CLUSTER", "ADDSLOTS", slot)
        c.command(other, "CLUSTER", "BUMPEPOCH")
        try:
            # The paused master's replica takes over meanwhile (node
            # timeout 1 s): ready again needs the map from a live node.
            harness.wait_until(lambda: d.admin("/readyz").status == 200, 30,
                               what="/readyz 200")
            harness.ok(True, "a paused master: the slot map is refreshed from the others")
        except TimeoutError as e:
            harness.ok(False, "a paused master: the slot map is refreshed from the others: %s"
                       % e)
            harness.diag(d.logs()[-2000:])
    finally:
        c.procs[hung].send_signal(signal.SIGCONT)


class KeyMaster:
    """What test_local_leases.py's helpers ask of their `redis`: client(),
    here on the master that serves key."""

    def __init__(self, c, key):
        self.c, self.key = c, key

    def client(self):
        return self.c.client(self.c.node_for_key(self.key))


def redirects_counted(daemons, family, port):
    return sum(metric(d, family, node="127.0.0.1:%d" % port) or 0 for d in daemons)


def leased_redirects(c, daemons):
    """Keys whose blocks are held while their slot moves: the next takes
    follow MOVED (the slot moved, keys and all) and ASK (keys moved, the
    slot still migrating) to the new master, and the limit holds across
    the move (the count moved with the key)."""
    for kind in ("moved", "ask"):
        m = c.masters()
        k, slot = key_on(c, "fixed", m[0], prefix="lr" + kind)
        family = "ratelimitd_redis_node_%s_total" % kind
        before = redirects_counted(daemons, family, m[0])
        allowed = leases.take_blocks(daemons, k)
        if kind == "moved":
            c.migrate_slot(slot, m[0], m[1])
        else:
            c.begin_migration(slot, m[0], m[1])
            c.move_keys(slot, m[0], m[1])
        allowed += leases.until_denied(daemons, k)
        after = redirects_counted(daemons, family, m[0])
        harness.ok(after > before, "lease takes: %s followed (%s %s -> %s)"
                   % (kind.upper(), family, before, after))
        harness.ok(100 - 3 * 20 <= allowed <= 100,
                   "lease takes across a slot move (%s): admitted %d, within [40, 100]"
                   % (kind.upper(), allowed))
        if kind == "ask":
            c.finish_migration(slot, m[1])
        harness.eq(c.slot_owner(slot), m[1], "%s: the slot is on the new master" % kind)
        with c.client(m[1]) as cl:
            harness.eq(harness.fixed_window_count(cl, redis_key("fixed", k)), "100",
                       "%s: the new master counted the whole limit" % kind)


LOSS_LIMIT = 300
LEASE_POLICY = leases.POLICY + (
    "  closed: {lease: 20, failure_mode: closed,"
    " tiers: [{name: t, algorithm: fixed_window, limit: %d, window: 1h}]}\n" % LOSS_LIMIT)


def leased_connection_loss(c, daemons):
    """The daemons' connections to a leased key's master killed again and
    again under load (CLIENT KILL): a take in flight then completes as
    unavailable, once (failure_mode closed: 503), every check gets one
    answer, and never more than the limit is admitted."""
    k = "loss"
    port = c.node_for_key(redis_key("closed", k))
    body = json.dumps({"policy": "closed", "key": k})
    counts = {200: 0, 429: 0, 503: 0, "other": 0}
    lock = threading.Lock()
    go = threading.Event()

    def client(d):
        conn = d.connection()
        go.wait()
        for _ in range(150):
            try:
                conn.request("POST", "/check", body=body)
                r = conn.getresponse()
                r.read()
                st = r.status if r.status in counts else "other"
            except OSError:
                st = "other"
                conn = d.connection()
            with lock:
                counts[st] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(d,)) for d in daemons for _ in range(3)]
    for t in threads:
        t.start()
    go.set()
    for _ in range(10):
        time.sleep(0.05)
        try:
            c.command(port, "CLIENT", "KILL", "TYPE", "normal")
        except (OSError, harness.RedisError):
            pass
    for t in threads:
        t.join(60)
    harness.diag("connection loss under leases: %r" % counts)
    harness.eq((counts["other"], sum(counts.values())), (0, len(threads) * 150),
               "connections killed under leases: every check answered once (200, 429 or 503)")
    harness.wait_until(lambda: all(d.admin("/readyz").status == 200 for d in daemons), 15,
                       what="the daemons ready again")
    allowed = counts[200]
    for d in daemons:
        denied = 0
        for _ in range(LOSS_LIMIT + 50):
            st = d.check("closed", k).status
            allowed += st == 200
            denied = denied + 1 if st == 429 else 0
            if denied == 3:
                break
    harness.ok(allowed <= LOSS_LIMIT, "connections killed under leases: admitted %d <= %d"
               % (allowed, LOSS_LIMIT))


def local_leases(c):
    """lease: on a Cluster: the take and give-back calls go to the key's
    master (one slot: its {policy:key} tag), as on one Redis."""
    daemons = [SeedsDaemon(c.seeds(), LEASE_POLICY, timeout="2s", admin=True).start()
               for _ in range(3)]
    leases.exactness(daemons, policies=("fw", "tb"))

    def calls_now():
        return sum(leases.script_calls(c.command(p, "INFO", "commandstats"))
                   for p in c.masters())

    leases.calls_per_check(calls_now, daemons)
    # Every daemon's reset listener (on some node of the cluster) hears the
    # DELETE published on the key's master.
    leases.reset_drops(None, daemons)
    leased_redirects(c, daemons)
    leased_connection_loss(c, daemons)
    leases.drain_gives_back(KeyMaster(c, "rl:{fixed:dr}:t"), daemons)


def main():
    why = redis_cluster.why_unsupported()
    if why:
        harness.skip_all(why)
    c = redis_cluster.RedisCluster(nmasters=3, replicas=1)
    c.launch()
    d = ClusterDaemon(["redis://127.0.0.1:%d" % p for p in c.ports[:2]], POLICY, timeout="2s",
                      admin=True)
    d.start(wait_ready=False)
    readiness(c, d)
    routing(c, d)
    equality(c, d)
    batched(c, d)
    two_phase(c, d)
    phase_two_denial(c, d)
    denied_figures(c)
    quota_rounds(c)
    quota_phase_two(c)
    moved(c, d)
    ask(c, d)
    unserved(c, d)
    harness.eq(d.stop(), 0, "exits 0")
    local_leases(c)
    # The keys API needs a token, which then guards checks too.
    token = os.path.join(harness.make_tempdir(), "token")
    with open(token, "w") as f:
        f.write(TOKEN + "\n")
    d = ClusterDaemon(c.seeds(), POLICY, timeout="2s", admin=True,
                      extra="auth_token_file: %s\n" % token)
    d.start()
    resets(c, d)
    replica_seeds(c, d)
    hung_master(c, d)
    harness.eq(d.stop(), 0, "with a token: exits 0")
    c.stop()


harness.run(main)
