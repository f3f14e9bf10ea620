# SPDX-License-Identifier: Apache-2.0
"""test_status_api.py: the status page's JSON, GET /v1/status and GET
/v1/rates, against a real redis-server and daemon (every answer held
against docs/openapi.yaml by Daemon.request).

- /v1/status: version, commit, uptime, the policies with their tiers
  (window null for concurrency, burst where set) and run-time override
  counts (one after a PUT /v1/overrides); backend redis with one node, connected, its decision path and a
  latency once calls were made.
- /v1/rates: per policy, allowed and denied per second; under load on one
  policy (some denied) its figures move and the other policy's stay 0;
  ?seconds=N gives N figures, out of range 400.
- A good reload and a bad one (broken YAML) appear in `reloads`, newest
  first, and the bad one's error becomes `last_config_error`.
- Redis stopped: the node shows connected false (and errors counted);
  restarted: connected again.
- With auth_token_file: both answer 401 without the token, 200 with it;
  the page (/, /ui/) is served without one, with its CSP and no-store.
- backend: memory: kind memory, no nodes.
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

TOKEN = "status-api-token"
AUTH = {"Authorization": "Bearer " + TOKEN}

POLICY = """\
policies:
  api:
    tiers:
      - {name: minute, algorithm: fixed_window, limit: 5, window: 1h}
      - {name: burst, algorithm: token_bucket, limit: 100, window: 1m, burst: 20}
  quiet:
    tiers:
      - {name: conc, algorithm: concurrency, limit: 3, lease_timeout: 30s}
"""


def status(d, headers=None):
    r = d.request("GET", "/v1/status", headers=headers, port=d.admin_port)
    if r.status != 200:
        raise RuntimeError("GET /v1/status answered %r" % (r,))
    return r.json


def rates(d, seconds=300, headers=None):
    return d.request("GET", "/v1/rates?seconds=%d" % seconds, headers=headers,
                     port=d.admin_port)


def shapes(d):
    s = status(d)
    harness.ok(s["version"] and s["commit"] and s["uptime_s"] >= 0 and s["started_at"],
               "version, commit, started_at and uptime_s are there")
    pol = {p["name"]: p for p in s["policies"]}
    harness.eq(sorted(pol), ["api", "quiet"], "every policy is listed")
    harness.eq(pol["api"]["tiers"],
               [{"name": "minute", "algorithm": "fixed_window", "limit": 5, "window": "1h"},
                {"name": "burst", "algorithm": "token_bucket", "limit": 100, "window": "1m",
                 "burst": 20}],
               "a policy's tiers: name, algorithm, limit, window, burst where set")
    harness.eq(pol["quiet"]["tiers"][0]["window"], None, "a concurrency tier has no window")
    harness.eq(pol["api"]["overrides"], 0, "no run-time override yet")
    harness.eq(s["backend"]["kind"], "redis", "backend: redis")
    harness.eq(s["reloads"], [], "no reload yet")
    harness.eq(s["last_config_error"], None, "no configuration error yet")


def load(d, n_ok, n_denied):
    """n_ok checks of fresh keys, then a key spent (5 allowed) and denied
    n_denied times: n_ok + 5 allowed, n_denied denied."""
    got = [d.check("api", "ok-%d" % i).status for i in range(n_ok)]
    got += [d.check("api", "spent").status for _ in range(5 + n_denied)]
    harness.eq((got.count(200), got.count(429)), (n_ok + 5, n_denied),
               "the load: %d allowed, %d denied" % (n_ok + 5, n_denied))


def rates_move(d):
    r = rates(d, 10)
    harness.eq((r.status, len(r.json["policies"]["api"]["allowed"])), (200, 10),
               "?seconds=10 gives 10 figures a policy")
    for bad in (0, 301):
        r = rates(d, bad)
        harness.eq((r.status, r.json["error"]), (400, "invalid_query"),
                   "?seconds=%d answers 400 invalid_query" % bad)
    load(d, 20, 7)

    # The sampler runs once a second: wait for the sums to show all of it.
    def counted():
        p = rates(d).json["policies"]
        a, q = p["api"], p["quiet"]
        return (sum(a["allowed"]), sum(a["denied"]), sum(q["allowed"] + q["denied"]))
    got = harness.wait_until(lambda: counted() if counted()[:2] == (25, 7) else None,
                             timeout=30, what="the rates to count the load")
    harness.eq(got, (25, 7, 0),
               "rates per policy: api allowed 25 and denied 7 over the window, quiet 0")
    r = rates(d).json
    harness.eq((len(r["policies"]["api"]["allowed"]), len(r["policies"]["api"]["denied"])),
               (300, 300), "300 figures by default, allowed and denied")


def override_count(d):
    r = d.request("PUT", "/v1/overrides/api/vip", json.dumps(
        {"tiers": {"minute": {"limit": 50}}, "ttl": "1h"}), port=d.admin_port)
    harness.eq(r.status, 200, "a run-time override is set")
    pol = {p["name"]: p for p in status(d)["policies"]}
    harness.eq((pol["api"]["overrides"], pol["quiet"]["overrides"]), (1, 0),
               "the policy's run-time overrides are counted, the other's not")


def node_health(d, redis):
    def node():
        nodes = status(d)["backend"]["nodes"]
        return nodes[0] if len(nodes) == 1 else None
    n = harness.wait_until(lambda: node() if node() and node()["latency_ms"] is not None
                           else None, timeout=30, what="a node with a latency")
    harness.ok(n["connected"] is True and n["role"] == "primary"
               and n["path"] in ("module", "functions") and n["latency_ms"] >= 0,
               "Redis up: the node is connected, with its path and a latency (%r)" % (n,))
    harness.diag("node latency: %.3f ms (the mean round trip of the last second with calls)"
                 % n["latency_ms"])
    redis.stop()
    d.check("api", "while-down")
    n = harness.wait_until(lambda: node() if node() and not node()["connected"] else None,
                           timeout=30, what="the node to show disconnected")
    harness.ok(n["connected"] is False and n["path"] is None,
               "Redis stopped: the node shows connected false, no path (%r)" % (n,))
    redis.restart()
    harness.wait_until(lambda: node() and node()["connected"], timeout=30,
                       what="the node to show connected again")
    harness.ok(True, "Redis restarted: the node shows connected again")


def reloads(d):
    d.write_config(POLICY + "  third:\n    tiers: [{name: t, algorithm: gcra, limit: 1, "
                   "window: 1s}]\n", timeout="2s")
    d.send_signal(signal.SIGHUP)
    s = harness.wait_until(lambda: (lambda s: s if s["reloads"] else None)(status(d)),
                           timeout=30, what="the reload to show")
    harness.ok(s["reloads"][0]["ok"] is True and s["reloads"][0]["error"] is None
               and "third" in [p["name"] for p in s["policies"]],
               "a good reload shows ok, and its new policy")
    with open(d.config, "a") as f:
        f.write("policies: [broken\n")
    d.send_signal(signal.SIGHUP)
    s = harness.wait_until(lambda: (lambda s: s if len(s["reloads"]) == 2 else None)(status(d)),
                           timeout=30, what="the bad reload to show")
    bad = s["reloads"][0]
    harness.ok(bad["ok"] is False and bad["error"], "a bad reload shows first, with its error")
    harness.eq(s["last_config_error"], {"at": bad["at"], "error": bad["error"]},
               "and is the last configuration error")
    harness.eq(s["reloads"][1]["ok"], True, "the good one follows it")


def token_rules(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True,
               extra="auth_token_file: %s\n" % harness.token_file(TOKEN)).start()
    for p in ("/v1/status", "/v1/rates"):
        r = d.request("GET", p, port=d.admin_port)
        harness.eq((r.status, r.headers.get("www-authenticate")), (401, "Bearer"),
                   "token file: %s without the token answers 401" % p)
        harness.eq(d.request("GET", p, headers=AUTH, port=d.admin_port).status, 200,
                   "token file: %s with the token answers 200" % p)
    for p in ("/", "/ui/"):
        r = d.request("GET", p, port=d.admin_port)
        csp = r.headers.get("content-security-policy", "")
        harness.ok(r.status == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
                   and r.headers.get("cache-control") == "no-store"
                   and csp.startswith("default-src 'self'; script-src 'sha256-")
                   and csp.endswith("; frame-ancestors 'none'; base-uri 'none'")
                   and b"<script>" in r.body,
                   "token file: %s serves the page without a token, with its CSP (no framing)" % p)
    d.stop()


def memory():
    d = Daemon(None, POLICY, admin=True, extra="backend: memory\n").start()
    b = status(d)["backend"]
    harness.eq(b, {"kind": "memory", "nodes": []}, "backend: memory: kind memory, no nodes")
    d.stop()


def main():
    redis = harness.RedisServer()
    try:
        redis.start()
    except RuntimeError as e:
        harness.skip_all(str(e))
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True, timeout="2s").start()
    shapes(d)
    rates_move(d)
    override_count(d)
    node_health(d, redis)
    reloads(d)
    harness.eq(d.stop(), 0, "the daemon exits cleanly")
    token_rules(redis)
    memory()


harness.run(main)
