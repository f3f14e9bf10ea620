# SPDX-License-Identifier: Apache-2.0
"""test_runtime_overrides.py: limits changed at run time through the admin
API (PUT/GET/DELETE /v1/overrides/<policy>/<key>, GET /v1/overrides/<policy>),
against real redis-server processes and daemons.

- Three daemons on one Redis: a PUT on A is in force on B and C (the
  propagation time per daemon is measured and printed; the target is
  100 ms, the gate 5 s); a DELETE likewise.
- Expiry: a ttl of 2 s is in force on all three, then not, with no
  message; a daemon then removes it from Redis.
- Precedence: run-time override > the file's `overrides` > the tier, in
  /check's answer, its X-RateLimit-Limit header and GET /v1/keys'
  limit_source; a tier the override does not name keeps its limit.
- Catching up: a daemon started after a change, and daemons whose
  subscriber connections were killed (CLIENT KILL TYPE pubsub) while a
  change was stored without an announcement, hold the change.
- Clocks: a change made after one stamped in the future (another
  daemon's clock ahead) replaces it on every daemon, a DELETE included.
- Redis down: a PUT answers 503 and applies nothing.
- Every error: 404 unknown_policy, 404 override_not_found, 400
  unknown_tier, invalid_limit, invalid_ttl, invalid_body, invalid_path,
  405; the bearer-token rule.
- Pagination: 2 500 overrides listed with a cursor, each exactly once.
- The log lines and the metrics.
- POST /json and gRPC see the overrides of the policy their descriptor
  names.
- backend: memory: the same API, in the daemon, and in its state_file
  across a restart.
- Redis Cluster: a daemon pair, the hash on its slot's master.
"""
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import redis_cluster  # noqa: E402
import rls_client  # noqa: E402
from daemon import ClusterDaemon, Daemon, metric  # noqa: E402

TOKEN = "ovr-admin-token-0123456789"
AUTH = {"Authorization": "Bearer " + TOKEN}

POLICY = """\
policies:
  api:
    tiers:
      - {name: minute, algorithm: fixed_window, limit: 3, window: 1h}
      - {name: day, algorithm: token_bucket, limit: 100, window: 1d}
    overrides:
      - key: "filekey"
        tiers:
          - {name: minute, algorithm: fixed_window, limit: 6, window: 1h}
          - {name: day, algorithm: token_bucket, limit: 200, window: 1d}
domains:
  - domain: edge
    descriptors:
      - key: tenant
        policy: api
"""


def path_of(key, policy="api"):
    return "/v1/overrides/%s/%s" % (policy, urllib.parse.quote(key, safe=""))


def put(d, key, body, policy="api", headers=AUTH):
    return d.request("PUT", path_of(key, policy), json.dumps(body)
                     if not isinstance(body, str) else body, headers=headers)


def get(d, key, policy="api"):
    return d.request("GET", path_of(key, policy), headers=AUTH)


def limit_of(d, key):
    """The minute tier's limit in force for key, as GET /v1/keys shows it."""
    r = d.request("GET", "/v1/keys/api/" + urllib.parse.quote(key, safe=""), headers=AUTH)
    t = r.json["tiers"][0]
    return t["limit"], t["limit_source"]


def wait_limit(d, key, want, timeout=5.0):
    """Seconds until d shows want as key's minute limit (bounded)."""
    start = time.monotonic()
    harness.wait_until(lambda: limit_of(d, key)[0] == want, timeout=timeout, interval=0.001,
                       what="limit %d for %s" % (want, key))
    return time.monotonic() - start


def reaches(d, key, want, timeout=3.0):
    """True if d shows want as key's minute limit within timeout."""
    try:
        wait_limit(d, key, want, timeout)
        return True
    except TimeoutError:
        return False


def propagation(fleet):
    a, others = fleet[0], fleet[1:]
    sent = time.monotonic()
    r = put(a, "tenant:prop", {"tiers": {"minute": {"limit": 40}}, "note": "plan upgrade #123"})
    harness.eq(r.status, 200, "PUT on A answers 200")
    harness.eq(r.json["previous"], None, "a first override has no previous")
    for name, d in zip("BC", others):
        wait_limit(d, "tenant:prop", 40)
        s = time.monotonic() - sent
        harness.diag("propagation of a PUT to daemon %s: in force %.1f ms after the PUT was sent "
                     "to A (target 100 ms)" % (name, s * 1e3))
        harness.ok(s < 5, "daemon %s applies A's PUT (within the 5 s gate)" % name)
    r = put(a, "tenant:prop", {"tiers": {"minute": {"limit": 41}}})
    harness.eq(r.json["previous"]["tiers"], {"minute": {"limit": 40}},
               "a second PUT answers the override it replaced")
    for d in others:
        wait_limit(d, "tenant:prop", 41)
    r = a.request("DELETE", path_of("tenant:prop"), headers=AUTH)
    harness.eq((r.status, r.json), (200, {"policy": "api", "key": "tenant:prop",
                                          "deleted": True}), "DELETE answers deleted")
    for name, d in zip("BC", others):
        s = wait_limit(d, "tenant:prop", 3)
        harness.diag("propagation of a DELETE to daemon %s: %.1f ms" % (name, s * 1e3))
    harness.eq(get(fleet[2], "tenant:prop").status, 404, "C: the override is gone")


def expiry(fleet, redis):
    r = put(fleet[0], "tenant:exp", {"tiers": {"minute": {"limit": 9}}, "ttl": "2s"})
    harness.eq(r.status, 200, "PUT with ttl 2s")
    until = time.time() + 2
    for d in fleet:
        wait_limit(d, "tenant:exp", 9)
    harness.ok(time.time() < until, "in force on all three before it expires")
    for i, d in enumerate(fleet):
        wait_limit(d, "tenant:exp", 3, timeout=7)
        harness.ok(time.time() >= until - 0.05, "daemon %d: not in force after its expiry" % i)
    harness.wait_until(lambda: "override expired" in fleet[1].logs(), what="the expiry logged")
    with redis.client() as r:
        harness.wait_until(lambda: r.command("HEXISTS", "rl:{overrides}", "api:tenant:exp") == 0,
                           what="the expired override removed from Redis")
    harness.ok(True, "the expired override is removed from Redis by a daemon")


def precedence(d):
    harness.eq([put(d, "filekey", {"tiers": {"minute": {"limit": 8}}}).status,
                put(d, "tierkey", {"tiers": {"minute": {"limit": 7}}}).status], [200, 200],
               "PUT of two overrides")
    r = d.check("api", "tierkey", headers=AUTH)
    harness.eq((r.json["limit"], r.headers.get("x-ratelimit-limit")), (7, "7"),
               "run-time override over the tier: the answer and X-RateLimit-Limit")
    r = d.check("api", "filekey", headers=AUTH)
    harness.eq((r.json["limit"], r.headers.get("x-ratelimit-limit")), (8, "8"),
               "run-time override over the file's override")
    r = d.request("GET", "/v1/keys/api/filekey", headers=AUTH)
    harness.eq([(t["name"], t["limit"], t["limit_source"]) for t in r.json["tiers"]],
               [("minute", 8, "runtime_override"), ("day", 200, "file_override")],
               "limit_source: the named tier the run-time override's, the other the file's")
    d.request("DELETE", path_of("filekey"), headers=AUTH)
    r = d.request("GET", "/v1/keys/api/filekey", headers=AUTH)
    harness.eq([(t["limit"], t["limit_source"]) for t in r.json["tiers"]],
               [(6, "file_override"), (200, "file_override")], "deleted: the file's again")
    r = d.request("GET", "/v1/keys/api/plain", headers=AUTH)
    harness.eq([t["limit_source"] for t in r.json["tiers"]], ["policy", "policy"],
               "no override: the policy's")
    statuses = [d.check("api", "tierkey", headers=AUTH).status for _ in range(8)]
    harness.eq(statuses.count(200), 6, "the overridden limit is enforced (7, one used above)")


def errors(d):
    cases = [
        (put(d, "k", {"tiers": {"minute": {"limit": 5}}}, policy="nope"), 404, "unknown_policy"),
        (get(d, "never-set"), 404, "override_not_found"),
        (d.request("DELETE", path_of("never-set"), headers=AUTH), 404, "override_not_found"),
        (put(d, "k", {"tiers": {"hour": {"limit": 5}}}), 400, "unknown_tier"),
        (put(d, "k", {"tiers": {"minute": {"limit": 0}}}), 400, "invalid_limit"),
        (put(d, "k", {"tiers": {"minute": {"limit": 5, "burst": -1}}}), 400, "invalid_limit"),
        (put(d, "k", {"tiers": {"minute": {"limit": 5}}, "ttl": "soon"}), 400, "invalid_ttl"),
        (put(d, "k", {"tiers": {"minute": {"limit": 5}}, "expires_at": "2001-01-01T00:00:00Z"}),
         400, "invalid_ttl"),
        (put(d, "k", {"tiers": {"minute": {"limit": 5}}, "ttl": "1h",
                      "expires_at": "2999-01-01T00:00:00Z"}), 400, "invalid_ttl"),
        (put(d, "k", "{not json"), 400, "invalid_body"),
        (put(d, "k", {"tiers": {}}), 400, "invalid_body"),
        (put(d, "k", {"tiers": {"minute": {"limit": 5}}, "colour": "red"}), 400, "invalid_body"),
        (put(d, "k", {"tiers": {"minute": {"limit": "5"}}}), 400, "invalid_body"),
        (d.request("PUT", "/v1/overrides/api", "{}", headers=AUTH), 400, "invalid_path"),
        (d.request("GET", "/v1/overrides/api/bad%zz", headers=AUTH), 400, "invalid_path"),
        (d.request("GET", "/v1/overrides/api?limit=0", headers=AUTH), 400, "invalid_request"),
        (d.request("GET", "/v1/overrides/api?cursor=xyz", headers=AUTH), 400, "invalid_request"),
        (d.request("POST", path_of("k"), "{}", headers=AUTH), 405, "method_not_allowed"),
        (d.request("GET", path_of("k")), 401, "unauthorized"),
    ]
    for i, (r, status, code) in enumerate(cases):
        harness.eq((r.status, r.json.get("error")), (status, code), "error case %d: %d %s"
                   % (i, status, code))
    r = d.request("POST", path_of("k"), "{}", headers=AUTH)
    harness.eq(r.headers.get("allow"), "GET, HEAD, PUT, DELETE", "405 names the methods")


def pagination(d, n=2500):
    for i in range(n):
        r = put(d, "page:%05d" % i, {"tiers": {"minute": {"limit": 10 + i}}})
        if r.status != 200:
            harness.ok(False, "PUT %d answered %d" % (i, r.status))
            return
    seen, cursor, pages = [], None, 0
    while pages < n:  # bounded: every page holds at least one
        q = "?limit=1000" + ("&cursor=" + cursor if cursor else "")
        r = d.request("GET", "/v1/overrides/api" + q, headers=AUTH)
        seen += [o["key"] for o in r.json["overrides"] if o["key"].startswith("page:")]
        pages += 1
        cursor = r.json["next_cursor"]
        if cursor is None:
            break
    harness.eq(sorted(seen), ["page:%05d" % i for i in range(n)],
               "%d overrides listed in %d pages, each exactly once" % (n, pages))
    r = d.request("GET", "/v1/overrides/api", headers=AUTH)
    harness.eq(len(r.json["overrides"]), 100, "the default page is 100")


def log_and_metrics(d):
    put(d, "tenant:log", {"tiers": {"minute": {"limit": 12}}})
    put(d, "tenant:log", {"tiers": {"minute": {"limit": 13}}})
    d.request("DELETE", path_of("tenant:log"), headers=AUTH)
    logs = d.logs()
    harness.ok('msg="override set" policy=api key=tenant:log old=- new="{\\"minute\\":12}" '
               'peer=127.0.0.1 token=sha1:' in logs, "the set is logged with old, new, peer, token")
    harness.ok('msg="override deleted" policy=api key=tenant:log old="{\\"minute\\":13}" new=-'
               in logs, "the removal is logged")
    harness.ok((metric(d, "ratelimitd_override_changes_total", policy="api", op="set") or 0) >= 2,
               "ratelimitd_override_changes_total counts sets")
    harness.ok((metric(d, "ratelimitd_override_changes_total", policy="api", op="deleted")
                or 0) >= 1, "... and removals")
    before = metric(d, "ratelimitd_overrides", policy="api")
    put(d, "tenant:gauge", {"tiers": {"minute": {"limit": 12}}})
    harness.eq(metric(d, "ratelimitd_overrides", policy="api"), before + 1,
               "ratelimitd_overrides counts the overrides in force")


def catch_up(redis, fleet, url, extra):
    c = fleet[2]
    c.stop()
    put(fleet[0], "tenant:late", {"tiers": {"minute": {"limit": 21}}})
    c.start()
    harness.eq(limit_of(c, "tenant:late"), (21, "runtime_override"),
               "a daemon started after a change holds it")
    # A change stored with no announcement (as if it was published while
    # the daemons' subscribers were down), then the links cut: every
    # daemon re-reads the store when it subscribes again.
    stored = {"policy": "api", "key": "tenant:cut", "tiers": {"minute": {"limit": 22}},
              "expires_at": None, "note": None, "updated_at": "2026-01-01T00:00:00.000000Z",
              "by": "test"}
    with redis.client() as r:
        r.command("HSET", "rl:{overrides}", "api:tenant:cut", json.dumps(stored))
        harness.eq(limit_of(fleet[1], "tenant:cut")[0], 3, "not announced: not known yet")
        killed = r.command("CLIENT", "KILL", "TYPE", "pubsub")
        harness.ok(killed >= 3, "the subscribers' connections killed (%d)" % killed)
    for i, d in enumerate(fleet):
        s = wait_limit(d, "tenant:cut", 22, timeout=10)
        harness.diag("daemon %d caught up %.0f ms after its link was cut" % (i, s * 1e3))


def skewed_clock(redis, fleet):
    # Another daemon whose clock runs ahead stored and announced a change
    # (its updated_at in the future of these daemons' clocks). A change
    # made here after it was seen must replace it everywhere: a DELETE
    # answered 200 must not leave it in force, nor a PUT be dropped.
    stored = {"policy": "api", "key": "tenant:skew", "tiers": {"minute": {"limit": 23}},
              "expires_at": None, "note": None, "updated_at": "2099-01-01T00:00:00.000000Z",
              "by": "a daemon whose clock is ahead"}
    with redis.client() as r:
        r.command("HSET", "rl:{overrides}", "api:tenant:skew", json.dumps(stored))
        r.command("PUBLISH", "rl:reset", json.dumps(stored))
    for d in fleet:
        wait_limit(d, "tenant:skew", 23)
    harness.eq(put(fleet[1], "tenant:skew", {"tiers": {"minute": {"limit": 24}}}).status, 200,
               "skew: a PUT after a change stamped in the future answers 200")
    for i, d in enumerate(fleet):
        harness.ok(reaches(d, "tenant:skew", 24), "skew: daemon %d holds the PUT made after it" % i)
    r = fleet[1].request("DELETE", path_of("tenant:skew"), headers=AUTH)
    harness.eq(r.status, 200, "skew: the DELETE answers 200")
    harness.eq(get(fleet[1], "tenant:skew").status, 404,
               "skew: the daemon that answered the DELETE holds no override")
    for i, d in enumerate(fleet):
        harness.ok(reaches(d, "tenant:skew", 3), "skew: daemon %d applies the removal" % i)


def rls_json(d):
    # An Envoy descriptor's key is domain|k1=v1... (docs/envoy.md).
    put(d, "edge|tenant=acme", {"tiers": {"minute": {"limit": 15}}})
    body = json.dumps({"domain": "edge", "descriptors": [{"entries": [
        {"key": "tenant", "value": "acme"}]}]})
    r = d.request("POST", "/json", body, headers=AUTH)
    harness.eq(r.json["statuses"][0]["currentLimit"]["requestsPerUnit"], 15,
               "POST /json: the override's limit is the one in force")


def grpc(port):
    """The gRPC front (Envoy's ShouldRateLimit) sees the override set by
    rls_json: the same (policy, key) through the same core."""
    why = rls_client._missing()
    if why:
        harness.skip("gRPC: %s" % why)
        return
    rls_client._load()
    ch = rls_client.channel("127.0.0.1:%d" % port)
    resp = rls_client.should_rate_limit(ch, "edge", [[("tenant", "acme")]],
                                        metadata=[("authorization", "Bearer " + TOKEN)])
    harness.eq(resp.statuses[0].current_limit.requests_per_unit, 15,
               "gRPC: the override's limit is the one in force")
    ch.close()


def cluster():
    """A daemon pair on a Redis Cluster: the change stored on the master of
    the hash's slot, and in force on the other daemon."""
    why = redis_cluster.why_unsupported()
    if why:
        harness.skip("Cluster: %s" % why)
        return
    c = redis_cluster.RedisCluster(nmasters=3, replicas=0)
    c.start()
    extra = "auth_token_file: %s\n" % harness.token_file(TOKEN)
    a, b = [ClusterDaemon(c.seeds(), POLICY, timeout="2s", extra=extra).start()
            for _ in range(2)]
    harness.eq(put(a, "tenant:cl", {"tiers": {"minute": {"limit": 31}}}).status, 200,
               "Cluster: PUT on A")
    s = wait_limit(b, "tenant:cl", 31)
    harness.diag("Cluster: propagation to B %.1f ms" % (s * 1e3))
    port = c.node_for_key("rl:{overrides}")
    with harness.RedisClient(host="127.0.0.1", port=port) as r:
        stored = json.loads(r.command("HGET", "rl:{overrides}", "api:tenant:cl"))
    harness.eq(stored["tiers"], {"minute": {"limit": 31}},
               "Cluster: stored on the master of the hash's slot")
    harness.eq(b.request("DELETE", path_of("tenant:cl"), headers=AUTH).status, 200,
               "Cluster: DELETE on B")
    wait_limit(a, "tenant:cl", 3)
    for d in (a, b):
        harness.eq(d.stop(), 0, "Cluster: the daemon exits cleanly")


def redis_down(redis, d):
    """Redis cannot store a change: 503 backend_unavailable, nothing
    applied; once it is back, changes go through again."""
    redis.stop()
    r = put(d, "tenant:down", {"tiers": {"minute": {"limit": 5}}})
    harness.eq((r.status, r.json.get("error"), r.headers.get("retry-after")),
               (503, "backend_unavailable", "1"), "Redis down: PUT answers 503")
    harness.eq(get(d, "tenant:down").status, 404, "Redis down: nothing applied")
    redis.restart()
    harness.wait_until(lambda: d.request("GET", "/readyz").status == 200, timeout=20,
                       what="the daemon ready again")
    harness.eq(put(d, "tenant:down", {"tiers": {"minute": {"limit": 5}}}).status, 200,
               "Redis back: PUT answers 200")


def memory_backend():
    state = os.path.join(harness.make_tempdir(), "state")
    d = Daemon("unix:/nonexistent", POLICY,
               extra="backend: memory\nstate_file: %s\nauth_token_file: %s\n"
               % (state, harness.token_file(TOKEN))).start()
    precedence(d)
    r = put(d, "tenant:m", {"tiers": {"minute": {"limit": 5}}, "expires_at":
                            "2999-01-01T00:00:00Z"})
    harness.eq((r.status, r.json["expires_at"]), (200, "2999-01-01T00:00:00.000000Z"),
               "memory: PUT with expires_at")
    harness.eq(get(d, "tenant:m").json["tiers"], {"minute": {"limit": 5}}, "memory: GET")
    harness.eq(d.stop(), 0, "memory: the daemon stops, writing its state_file")
    d.start()
    harness.eq((get(d, "tenant:m").status, limit_of(d, "tierkey")), (200, (7, "runtime_override")),
               "memory: the overrides survive a restart in the state_file")
    harness.ok("state file read" in d.logs(), "memory: the state file was read")
    d.stop()


def main():
    redis = harness.RedisServer().start()
    url = "unix:" + redis.socket_path
    extra = "auth_token_file: %s\n" % harness.token_file(TOKEN)
    grpc_port = harness.free_port()
    fleet = [Daemon(url, POLICY, timeout="2s", extra=extra + (
        "grpc_listen: 127.0.0.1:%d\n" % grpc_port if i == 0 else "")).start() for i in range(3)]
    with redis.client() as c:
        harness.wait_until(lambda: c.command("PUBSUB", "NUMSUB", "rl:reset")[1] == 3,
                           what="3 listeners subscribed")
    propagation(fleet)
    expiry(fleet, redis)
    precedence(fleet[0])
    errors(fleet[0])
    log_and_metrics(fleet[0])
    rls_json(fleet[0])
    grpc(grpc_port)
    catch_up(redis, fleet, url, extra)
    skewed_clock(redis, fleet)
    pagination(fleet[1])
    redis_down(redis, fleet[0])
    memory_backend()
    cluster()
    for d in fleet:
        harness.eq(d.stop(), 0, "the daemon exits cleanly")
    harness.done()


if __name__ == "__main__":
    harness.run(main)
