# SPDX-License-Identifier: Apache-2.0
"""test_cluster_faults.py: the cluster backend under contention and faults,
on a real 3-master + 3-replica Redis Cluster (redis_cluster.py):

(a) 3 daemons (2 workers each) x 300 concurrent checks on one key admit
    exactly the limit, for every algorithm;
(b) a live `redis-cli --cluster reshard` of slots holding keys in use,
    under load: every answer decided or a failure_mode answer, none late,
    no key admitted beyond its limit;
(c) a master killed (SIGKILL) under load: its replica takes over; answers in
    the window are failure_mode answers, never errors or hangs; decided
    answers again within 2 s of the new master being ready;
(d) requests whose two checks live in different slots (the two-phase path)
    under contention near the limit: never over the limit; how many units
    were taken by requests that were answered denied is printed;
(e) a cluster whose nodes have no FUNCTION command (renamed away): the
    EVALSHA path decides correctly.

The windows measured are printed as TAP comments (the README's "Scaling
out" quotes them). Bounded: about a minute on a quiet 2-core box.
"""
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import redis_cluster  # noqa: E402
from daemon import ALGORITHMS, Daemon  # noqa: E402

TIMEOUT_S = 0.25  # redis.timeout of the daemons
SLACK_S = 1.5  # an answer later than TIMEOUT_S + SLACK_S is a hang (a busy box)
LIMIT = 100  # (a)


class ClusterDaemon(Daemon):
    """A daemon whose redis section names cluster seeds instead of a URL."""

    def __init__(self, seeds, policy, workers=1, **kw):
        self.seeds = seeds
        super().__init__(None, policy, admin=True, extra="workers: %d\n" % workers, **kw)

    def redis_where(self):
        return "  cluster: [%s]\n" % ", ".join('"%s"' % s for s in self.seeds)

    def metric_sum(self, family):
        """The sum of every series of a counter family on /metrics."""
        total = 0.0
        for line in self.admin("/metrics").body.decode().splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name == family:
                total += float(line.rsplit(" ", 1)[1])
        return total


def classify(status, body):
    """allowed / denied (decided by Redis), fm (a failure_mode answer:
    503 backend_unavailable, or 200 degraded), other (anything else)."""
    try:
        j = json.loads(body) if body else {}
    except ValueError:
        return "other"
    if status == 200:
        return "fm" if j.get("degraded") else "allowed"
    if status == 429:
        return "denied"
    if status == 503 and j.get("error") == "backend_unavailable":
        return "fm"
    return "other"


class Client:
    """One keep-alive connection per daemon; reconnects after an error."""

    def __init__(self, daemons):
        self.daemons = daemons
        self.conns = [None] * len(daemons)

    def post(self, i, body):
        """(kind, seconds taken) of one POST /check to daemons[i]."""
        t0 = time.monotonic()
        try:
            if self.conns[i] is None:
                self.conns[i] = http.client.HTTPConnection(
                    "127.0.0.1", self.daemons[i].port, timeout=TIMEOUT_S + SLACK_S + 3)
            self.conns[i].request("POST", "/check", body=body)
            r = self.conns[i].getresponse()
            kind = classify(r.status, r.read())
        except (OSError, http.client.HTTPException):
            if self.conns[i] is not None:
                self.conns[i].close()
            self.conns[i] = None
            kind = "other"
        return kind, time.monotonic() - t0

    def close(self):
        for c in self.conns:
            if c is not None:
                c.close()


class Load:
    """nthreads clients, each sending pick(rng) -> (label, body) to the
    daemons in turn until stop(); every answer is recorded as (sent, took,
    label, kind) with times from the monotonic clock."""

    def __init__(self, daemons, pick, nthreads):
        self.records = []
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(daemons, pick, n))
                        for n in range(nthreads)]

    def _run(self, daemons, pick, n):
        rng = random.Random(n)
        cl = Client(daemons)
        mine = []
        for j in range(1000000):  # bounded; stop() ends it long before
            if self.halt.is_set():
                break
            label, body = pick(rng)
            sent = time.monotonic()
            kind, took = cl.post((n + j) % len(daemons), body)
            mine.append((sent, took, label, kind))
        cl.close()
        with self.lock:
            self.records.extend(mine)

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.halt.set()
        for t in self.threads:
            t.join(30)
        return self.records


def body_of(policy, key):
    return json.dumps({"policy": policy, "key": key})


keyslot = redis_cluster.keyslot


def keys_in_slots(policy, slots, want, prefix="k"):
    """want keys whose hash tag {policy:key} falls in slots, each in a slot
    of its own."""
    slots = set(slots)
    found, seen = [], set()
    for i in range(200000):  # bounded: plenty for 16 keys in 1000 slots
        key = "%s%d" % (prefix, i)
        s = keyslot("{%s:%s}" % (policy, key))
        if s in slots and s not in seen:
            found.append(key)
            seen.add(s)
            if len(found) == want:
                break
    return found


def count_fixed_window(cl, policy, key, tier="t"):
    """The units a fixed_window key holds now (0 when absent), read on the
    master that serves it."""
    rkey = "rl:{%s:%s}:%s" % (policy, key, tier)
    v = cl.command(cl.node_for_key(rkey), "GET", rkey)
    return int(v.rsplit(":", 1)[1]) if v else 0


def tally(records):
    out = {"allowed": 0, "denied": 0, "fm": 0, "other": 0}
    for r in records:
        out[r[3]] += 1
    return out


# -------------------------------------------------------------------- (a)

def burst(daemons, nthreads, body, each):
    """nthreads clients, each connected to every daemon first, then all at
    once sending body `each` times over the daemons in turn. Returns the
    count of each kind of answer and the seconds the burst took."""
    counts = {"allowed": 0, "denied": 0, "fm": 0, "other": 0}
    lock = threading.Lock()
    go = threading.Event()

    def client(n):
        cl = Client(daemons)
        for i in range(len(daemons)):
            cl.post(i, body_of("fixed_window", "warm"))  # connected before the burst
        go.wait()
        mine = [cl.post((n + j) % len(daemons), body)[0] for j in range(each)]
        cl.close()
        with lock:
            for k in mine:
                counts[k] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(nthreads)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    go.set()
    for t in threads:
        t.join(60)
    return counts, time.monotonic() - t0


def exact_limits(daemons):
    for algo in ALGORITHMS:
        key = "hot-" + algo
        body = body_of(algo, key)
        per_daemon = 300
        # 100 clients, each sending 3 x 3: one check per daemon, three times
        counts, took = burst(daemons, 100, body, per_daemon * len(daemons) // 100)
        # The bucket algorithms refill at LIMIT per hour while the burst runs.
        refill = int(took * LIMIT / 3600) + 1 if algo in ("token_bucket", "gcra",
                                                          "leaky_bucket") else 0
        harness.eq((counts["fm"], counts["other"]), (0, 0),
                   "(a) %s: all %d checks decided" % (algo, per_daemon * len(daemons)))
        harness.ok(LIMIT <= counts["allowed"] <= LIMIT + refill,
                   "(a) %s: %d admitted by 3 daemons x %d concurrent checks (limit %d, refill %d)"
                   % (algo, counts["allowed"], per_daemon, LIMIT, refill))


# -------------------------------------------------------------------- (b)

# rs_fw's keys are spent early: their denials keep asking Redis (no deny
# cache) while the slots move; rs_log's keep admitting (and writing) during
# the move.
RESHARD_LIMIT = {"rs_fw": 40, "rs_log": 1000}


def live_reshard(c, daemons):
    src, dst = c.masters()[0], c.masters()[1]
    nslots = 2000
    # redis-cli takes a single source's slots in increasing order.
    moving = sorted(c.slots_of(src))[:nslots]
    keys = {p: keys_in_slots(p, moving, 8, "r") for p in ("rs_fw", "rs_log")}
    labels = [(p, k) for p in keys for k in keys[p]]
    harness.diag("(b) moving slots %d..%d from %d to %d; keys %r"
                 % (moving[0], moving[-1], src, dst, labels))

    def pick(rng):
        p, k = rng.choice(labels)
        return (p, k), body_of(p, k)

    before = sum(d.metric_sum(f) for d in daemons for f in
                 ("ratelimitd_redis_node_moved_total", "ratelimitd_redis_node_ask_total"))
    load = Load(daemons, pick, 12).start()
    time.sleep(0.5)  # the keys exist before their slots move
    t0 = time.monotonic()
    r = subprocess.run(
        [c.cli, "--cluster", "reshard", "127.0.0.1:%d" % src,
         "--cluster-from", c.node_id(src), "--cluster-to", c.node_id(dst),
         "--cluster-slots", str(nslots), "--cluster-yes"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    took = time.monotonic() - t0
    time.sleep(0.5)
    records = load.stop()
    harness.ok(r.returncode == 0, "(b) redis-cli --cluster reshard of %d slots (%.1f s)"
               % (nslots, took))
    if r.returncode != 0:
        harness.diag(r.stdout.decode("utf-8", "replace")[-2000:])
    c.wait_ok(20)
    owners = {c.slot_owner(s) for s in (moving[0], moving[-1])}
    harness.eq(owners, {dst}, "(b) the moved slots are served by the target master")

    during = [x for x in records if x[0] + x[1] >= t0 and x[0] <= t0 + took]
    t = tally(records)
    worst = max(x[1] for x in records)
    harness.diag("(b) %d answers (%d while slots moved): %d allowed, %d denied, %d failure_mode, "
                 "%d other; slowest %.0f ms" % (len(records), len(during), t["allowed"],
                                                 t["denied"], t["fm"], t["other"], worst * 1000))
    harness.ok(len(during) >= 100, "(b) under load while the slots moved (%d answers)"
               % len(during))
    harness.eq(t["other"], 0, "(b) no error answers, no dropped connection")
    harness.ok(t["fm"] <= len(records) // 100,
               "(b) failure_mode answers are rare (%d of %d)" % (t["fm"], len(records)))
    harness.ok(worst <= TIMEOUT_S + SLACK_S, "(b) no hang: every answer within %.2f s (%.3f s)"
               % (TIMEOUT_S + SLACK_S, worst))
    admitted = {}
    for x in records:
        if x[3] == "allowed":
            admitted[x[2]] = admitted.get(x[2], 0) + 1
    over = {lab: n for lab, n in admitted.items() if n > RESHARD_LIMIT[lab[0]]}
    harness.eq(over, {}, "(b) no key admitted beyond its limit (%s)" % ", ".join(
        "%s: at most %d of %d" % (p, max(n for lab, n in admitted.items() if lab[0] == p),
                                  RESHARD_LIMIT[p]) for p in sorted(RESHARD_LIMIT)))
    moving_admits = sum(1 for x in during if x[3] == "allowed")
    harness.ok(moving_admits > 0, "(b) admissions (writes) while the slots moved: %d"
               % moving_admits)
    after = sum(d.metric_sum(f) for d in daemons for f in
                ("ratelimitd_redis_node_moved_total", "ratelimitd_redis_node_ask_total"))
    harness.ok(after > before, "(b) the daemons were redirected (MOVED/ASK: %d)"
               % (after - before))


# -------------------------------------------------------------------- (c)

def master_kill(c, daemons):
    victim = c.masters()[2]
    vslots = c.slots_of(victim)
    vset = set(vslots)
    rest = [s for s in range(redis_cluster.SLOTS) if s not in vset]
    where = {}  # (policy, key) -> on the victim
    for p in ("kc", "ko"):
        for k in keys_in_slots(p, vslots, 6, "v"):
            where[(p, k)] = True
        for k in keys_in_slots(p, rest, 6, "o"):
            where[(p, k)] = False
    labels = sorted(where)

    def pick(rng):
        p, k = rng.choice(labels)
        return (p, k), body_of(p, k)

    load = Load(daemons, pick, 8).start()
    time.sleep(0.5)
    t_kill = time.monotonic()
    c.kill_master(victim)

    def promoted(port):
        # port's view: cluster_state ok and the dead node serves no slot
        if c.info(port).get("cluster_state") != "ok":
            return False
        return all(m[1] != victim for _, _, m, *_ in c.command(port, "CLUSTER", "SLOTS"))

    # The new master is ready when every live node says so: the daemon may
    # ask any of them for the map. The first node's view is printed too.
    live = [p for p in c.ports if p != victim]
    harness.wait_until(lambda: any(promoted(p) for p in live), 30, interval=0.02,
                       what="a node to see the replica promoted")
    t_first = time.monotonic()
    harness.wait_until(lambda: all(promoted(p) for p in live), 30, interval=0.02,
                       what="every node to see the replica promoted")
    t_ready = time.monotonic()
    time.sleep(3.0)
    records = load.stop()
    new_masters = c.wait_failover(victim)
    harness.ok(victim not in new_masters and len(new_masters) == 3,
               "(c) a replica took over the killed master's slots (masters %r)" % new_masters)

    t = tally(records)
    fm = [x for x in records if x[3] == "fm"]
    worst = max(x[1] for x in records)
    harness.eq(t["other"], 0, "(c) no error answers, no dropped connection")
    harness.ok(worst <= TIMEOUT_S + SLACK_S, "(c) no hang: every answer within %.2f s (%.3f s)"
               % (TIMEOUT_S + SLACK_S, worst))
    last_fm = max((x[0] + x[1] for x in fm), default=t_kill)
    first_fm = min((x[0] for x in fm), default=t_kill)
    harness.diag("(c) master killed at 0: replica promoted (cluster ok) at +%.2f s in one "
                 "node's view, +%.2f s in every node's; failure_mode answers from %+.2f to "
                 "%+.2f s (%d of %d answers; %d on keys of the other masters)"
                 % (t_first - t_kill, t_ready - t_kill, first_fm - t_kill, last_fm - t_kill,
                    len(fm), len(records), sum(1 for x in fm if not where[x[2]])))
    harness.ok(last_fm <= t_ready + 2.0,
               "(c) decided again within 2 s of the new master being ready (last failure_mode "
               "answer %+.2f s from ready)" % (last_fm - t_ready))
    harness.eq([d.admin("/readyz").status for d in daemons], [200] * len(daemons),
               "(c) every daemon ready again (/readyz, every worker)")
    late = [x for x in records if x[0] >= t_ready + 2.0 and where[x[2]]]
    harness.ok(late and all(x[3] in ("allowed", "denied") for x in late),
               "(c) the killed master's keys are decided after recovery (%d answers)" % len(late))


# -------------------------------------------------------------------- (d)

SPAN_LIMIT = 20


def spanning(c, daemons):
    rounds, per_round = 8, 60
    totals = {"admitted": 0, "consumed_denied": 0, "requests": 0}
    bad = []
    for r in range(rounds):
        a, b = "a%d" % r, "b%d" % r
        for i in range(1000):  # b on another master than a: two nodes, two slots
            if c.node_for_key("{pb:%s}" % b) != c.node_for_key("{pa:%s}" % a):
                break
            b = "b%d_%d" % (r, i)
        body = json.dumps({"checks": [{"policy": "pa", "key": a}, {"policy": "pb", "key": b}]})
        counts, _ = burst(daemons, per_round, body, 1)
        na, nb = count_fixed_window(c, "pa", a), count_fixed_window(c, "pb", b)
        adm = counts["allowed"]
        if not (adm <= SPAN_LIMIT and na <= SPAN_LIMIT and nb <= SPAN_LIMIT and adm <= min(na, nb)
                and counts["fm"] + counts["other"] == 0):
            bad.append((r, counts, na, nb))
        totals["admitted"] += adm
        totals["consumed_denied"] += (na - adm) + (nb - adm)
        totals["requests"] += per_round
    harness.eq(bad, [], "(d) %d rounds of %d concurrent 2-slot requests: all decided, never over "
               "the limit of %d, every admission counted on both nodes"
               % (rounds, per_round, SPAN_LIMIT))
    harness.diag("(d) two-phase inaccuracy: %d requests, %d admitted (at most %d possible); "
                 "%d units taken by requests answered denied (%.1f%% of the %d units admitted)"
                 % (totals["requests"], totals["admitted"], rounds * SPAN_LIMIT,
                    totals["consumed_denied"],
                    100.0 * totals["consumed_denied"] / max(1, 2 * totals["admitted"]),
                    2 * totals["admitted"]))
    harness.ok(totals["admitted"] > 0, "(d) the 2-slot requests were admitted up to the limit")


# -------------------------------------------------------------------- (e)

def evalsha_path():
    c = redis_cluster.RedisCluster(nmasters=3, replicas=0,
                                   extra_args=["--rename-command", "FUNCTION", ""])
    c.start()
    d = ClusterDaemon(c.seeds(), POLICY, timeout="1s").start()
    try:
        c.command(c.masters()[0], "FUNCTION", "LIST")
        harness.ok(False, "(e) FUNCTION is renamed away")
    except harness.RedisError:
        harness.ok(True, "(e) FUNCTION is renamed away")
    keys = {}
    for i in range(500):  # a key on every master
        keys.setdefault(c.node_for_key("{e5:e%d}" % i), "e%d" % i)
        if len(keys) == 3:
            break
    got = {m: [d.check("e5", k).status for _ in range(7)] for m, k in keys.items()}
    harness.eq(got, {m: [200] * 5 + [429] * 2 for m in keys},
               "(e) EVALSHA: limit 5 on a key of every master admits exactly 5")
    ks = sorted(keys.values())
    span = [d.request("POST", "/check", json.dumps(
        {"checks": [{"policy": "e5", "key": "s" + ks[0]}, {"policy": "e5", "key": "s" + ks[1]}]}))
        .status for _ in range(6)]
    harness.eq(span, [200] * 5 + [429], "(e) EVALSHA: a request spanning two slots as well")
    calls = {}
    for m in c.masters():
        stats = c.command(m, "INFO", "commandstats")
        calls[m] = ("cmdstat_evalsha:" in stats, "cmdstat_fcall:" in stats)
    harness.eq(set(calls.values()), {(True, False)},
               "(e) every master ran EVALSHA and no FCALL")
    harness.eq(d.stop(), 0, "(e) daemon exits 0")
    c.stop()


# ---------------------------------------------------------------- setup

POLICY = "policies:\n" + "".join(
    "  %s: {failure_mode: closed, tiers: [{name: t, algorithm: %s, limit: %d, window: 1h%s}]}\n"
    % (a, a, LIMIT, extra) for a, extra in ALGORITHMS.items()) + """\
  rs_fw: {failure_mode: closed, deny_cache: false,
          tiers: [{name: t, algorithm: fixed_window, limit: 40, window: 1h}]}
  rs_log: {failure_mode: closed, deny_cache: false,
           tiers: [{name: t, algorithm: sliding_window_log, limit: 1000, window: 1h}]}
  kc: {failure_mode: closed, tiers: [{name: t, algorithm: fixed_window, limit: 1000000, window: 1h}]}
  ko: {failure_mode: open, tiers: [{name: t, algorithm: fixed_window, limit: 1000000, window: 1h}]}
  pa: {failure_mode: closed, tiers: [{name: t, algorithm: fixed_window, limit: 20, window: 1h}]}
  pb: {failure_mode: closed, tiers: [{name: t, algorithm: fixed_window, limit: 20, window: 1h}]}
  e5: {failure_mode: closed, tiers: [{name: t, algorithm: fixed_window, limit: 5, window: 1h}]}
"""


def main():
    why = redis_cluster.why_unsupported()
    if why:
        harness.skip_all(why)
    t0 = time.monotonic()
    c = redis_cluster.RedisCluster(nmasters=3, replicas=1)
    c.start()
    harness.diag("cluster of 3 masters + 3 replicas up in %.1f s" % (time.monotonic() - t0))
    probe = ["{rs_fw:r%d}" % i for i in range(50)] + ["x", "{}y", "a{b}c", "{kc:v%d}" % 7]
    harness.eq([keyslot(k) for k in probe], [c.keyslot(k) for k in probe],
               "the test's CRC16 agrees with CLUSTER KEYSLOT")
    daemons = [ClusterDaemon(c.seeds(), POLICY, workers=2, timeout="%dms" % (TIMEOUT_S * 1000))
               .start() for _ in range(3)]
    exact_limits(daemons)
    spanning(c, daemons)
    master_kill(c, daemons)
    live_reshard(c, daemons)
    for d in daemons:
        harness.eq(d.stop(), 0, "daemon exits 0")
    c.stop()
    evalsha_path()
    harness.diag("took %.1f s" % (time.monotonic() - t0))


harness.run(main)
