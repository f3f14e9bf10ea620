# SPDX-License-Identifier: Apache-2.0
"""test_overrides.py: per-key overrides (policies.NAME.overrides) behind the
whole HTTP API, against a real redis-server and the memory backend, and in
failure_mode local: exact limits for an exact key, a prefix, the longest
prefix and the policy itself; each key counted on its own (a prefix never
pools its keys); the Redis keys an override uses; a reload that adds an
override; --check-config on ambiguous overrides."""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

# docs/configuration.md's "Overrides" example, verbatim.
POLICY = """\
policies:
  api:
    tiers:
      - {name: hour, algorithm: fixed_window, limit: 3, window: 1h}
    overrides:
      - key: "tenant:acme"
        tiers:
          - {name: hour, algorithm: fixed_window, limit: 6, window: 1h}
      - prefix: "vip:"
        tiers:
          - {name: hour, algorithm: fixed_window, limit: 4, window: 1h}
      - prefix: "vip:gold:"
        tiers:
          - {name: hour, algorithm: fixed_window, limit: 5, window: 1h}
          - {name: day, algorithm: gcra, limit: 100, window: 1d}
"""

# key -> (allowed before the first denial, tier names, X-RateLimit-Limit)
EXPECT = {
    "tenant:acme": (6, ["hour"], "6"),       # the exact key
    "tenant:acme2": (3, ["hour"], "3"),      # no override: the policy
    "vip:1": (4, ["hour"], "4"),             # the prefix
    "vip:2": (4, ["hour"], "4"),             # same prefix, its own counter
    "vip:": (4, ["hour"], "4"),              # a key equal to the prefix
    "vip:gold:1": (5, ["hour", "day"], "5"),  # the longest prefix
    "free": (3, ["hour"], "3"),
}

# Nothing listens on port 1: a daemon that tried Redis would fail there.
NO_REDIS = "redis://127.0.0.1:1/0"


def allowed_run(d, key, tries, local=False):
    """Sends `tries` checks of key; returns how many were allowed before the
    first denial (and that none was allowed after it), and the first answer."""
    statuses, first = [], None
    for _ in range(tries):
        r = d.check("api", key)
        first = first or r
        statuses.append(r.status)
        if local:
            harness.ok(r.json.get("local") is True, "%s: decided locally" % key)
    n = statuses.index(429) if 429 in statuses else len(statuses)
    harness.eq(statuses[n:], [429] * (tries - n), "%s: denied from then on" % key)
    return n, first


def exact_limits(d, what, local=False):
    for key, (limit, tiers, header) in EXPECT.items():
        n, first = allowed_run(d, key, limit + 2, local=local)
        harness.eq(n, limit, "%s: %s allowed exactly %d" % (what, key, limit))
        harness.eq(([t["name"] for t in first.json["checks"][0]["tiers"]],
                    first.headers.get("x-ratelimit-limit")),
                   (tiers, header), "%s: %s answers with its tiers and limit" % (what, key))


def test_backend(redis_url, what, extra=""):
    d = Daemon(redis_url, POLICY, extra=extra).start()
    exact_limits(d, what)
    # Several checks in one request: each check has its own key's tiers.
    r = d.check(checks=[{"policy": "api", "key": "vip:9"}, {"policy": "api", "key": "other"},
                        {"policy": "api", "key": "vip:gold:9"}])
    harness.eq([(c["key"], [t["limit"] for t in c["tiers"]]) for c in r.json["checks"]],
               [("vip:9", [4]), ("other", [3]), ("vip:gold:9", [5, 100])],
               "%s: a request with several checks decides each by its key" % what)
    harness.eq(d.stop(), 0, "%s: exits 0" % what)
    return d


def test_redis_state(redis):
    """Which Redis keys an override uses: the key's own, with the override's
    tier names; never the prefix's, never another key's."""
    client = redis.client()
    client.command("FLUSHALL")
    test_backend("unix:" + redis.socket_path, "redis")
    keys = sorted(client.command("KEYS", "*"))
    want = sorted(["rl:{api:%s}:hour" % k for k in EXPECT]
                  + ["rl:{api:vip:gold:1}:day",
                     "rl:{api:vip:9}:hour", "rl:{api:other}:hour",
                     "rl:{api:vip:gold:9}:hour", "rl:{api:vip:gold:9}:day"])
    harness.eq(keys, want, "one set of Redis keys per key; none for a prefix")
    for key, (limit, _, _) in EXPECT.items():
        harness.eq(int(harness.fixed_window_count(client, "rl:{api:%s}:hour" % key)), limit,
                   "%s: its own counter holds exactly its limit" % key)


def test_local():
    """failure_mode local (Redis down): the same limits from memory."""
    local = POLICY.replace("  api:\n", "  api:\n    failure_mode: local\n")
    d = Daemon(NO_REDIS, local).start(wait_ready=False)
    exact_limits(d, "failure_mode local", local=True)
    harness.eq(d.stop(), 0, "failure_mode local: exits 0")


def test_reload(redis):
    """A reload adds an override. The key keeps its own state: with the same
    tier name its count carries on under the new limit; a new tier name
    starts afresh."""
    before = """\
policies:
  api:
    tiers:
      - {name: used, algorithm: fixed_window, limit: 3, window: 1h}
"""
    after = before + """\
    overrides:
      - prefix: "late:"
        tiers:
          - {name: used, algorithm: fixed_window, limit: 5, window: 1h}
      - key: "fresh"
        tiers:
          - {name: hour, algorithm: fixed_window, limit: 2, window: 1h}
"""
    d = Daemon("unix:" + redis.socket_path, before, prefix="reload-ovr:").start()
    for key in ("late:1", "late:1", "fresh", "fresh", "fresh"):
        d.check("api", key)
    r = d.check("api", "late:1")
    harness.eq((r.status, r.json["remaining"]), (200, 0), "before: late:1 has used its 3")
    d.write_config(after, prefix="reload-ovr:")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "policies reloaded" in d.logs(), 5, what="the reload")
    r = d.check("api", "late:1")
    harness.eq((r.status, r.json["limit"], r.json["remaining"]), (200, 5, 1),
               "after: late:1 gets the override's 5 and keeps its count of 3")
    r = d.check("api", "late:1")
    harness.eq((r.status, d.check("api", "late:1").status), (200, 429),
               "and is denied after its 5th")
    r = d.check("api", "fresh")
    harness.eq((r.status, r.json["checks"][0]["tiers"][0]["name"], r.json["remaining"]),
               (200, "hour", 1),
               "a new tier name starts afresh (fresh was denied before the reload)")
    harness.eq(d.check("api", "other").json["limit"], 3, "other keys keep the policy's limit")
    harness.eq(d.stop(), 0, "exits 0")


def test_auth_and_admin(redis):
    """Overrides meet every key: the one /auth builds from the request, and
    the one the admin API shows and resets (in the override's tiers)."""
    policy = POLICY.replace("  api:\n", "  api:\n    key: \"${header:X-Api-Key}\"\n")
    # admin_on_listen: the admin API on listen without a token.
    d = Daemon("unix:" + redis.socket_path, policy, prefix="auth-ovr:",
               extra="admin_on_listen: true\n").start()
    key = {"X-Api-Key": "vip:gold:7"}
    statuses = [d.request("GET", "/auth/api", headers=key).status for _ in range(6)]
    harness.eq(statuses, [200] * 5 + [429], "/auth: the key from the header gets its prefix's 5")
    r = d.request("GET", "/auth/api", headers={"X-Api-Key": "plain"})
    harness.eq(r.headers.get("x-ratelimit-limit"), "3", "/auth: another key gets the policy's 3")
    r = d.admin("/v1/keys/api/vip%3Agold%3A7")
    harness.eq([(t["name"], t["remaining"]) for t in r.json["tiers"]], [("hour", 0), ("day", 95)],
               "GET /v1/keys/: the override's two tiers, as counted")
    r = d.admin("/v1/keys/api/vip%3Agold%3A7", method="DELETE")
    harness.eq((r.status, r.json.get("deleted")), (200, 2), "DELETE resets both of its tiers")
    harness.eq(d.request("GET", "/auth/api", headers=key).status, 200, "and /auth allows it again")
    harness.eq(d.stop(), 0, "auth and admin: exits 0")


def test_check_config():
    d = Daemon(NO_REDIS, POLICY)
    ok = subprocess.run([BINARY, "--config", d.config, "--check-config"], capture_output=True,
                        text=True)
    harness.eq(ok.returncode, 0, "--check-config accepts the overrides: %s" % ok.stdout.strip())
    d.write_config(POLICY + "      - prefix: 'vip:'\n        tiers: [{name: m, algorithm: gcra, "
                   "limit: 1, window: 1s}]\n")
    bad = subprocess.run([BINARY, "--config", d.config, "-t"], capture_output=True, text=True)
    out = bad.stdout + bad.stderr
    # Six lines of listen and redis settings come before POLICY.
    harness.eq(bad.returncode, 1, "-t refuses a duplicate prefix")
    harness.ok("%s:22:17: policies.api.overrides[3].prefix: duplicate prefix \"vip:\" "
               "(also overrides[1], line 15)" % d.config in out,
               "and says where, with file:line:col: %r" % out)


def test_readme():
    src = os.environ.get("RL_SRCDIR", ".")
    with open(os.path.join(src, "docs", "configuration.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("\n## Overrides\n", 1)[-1].split("\n## ", 1)[0]
    harness.ok("```yaml\n" + POLICY + "```" in section,
               "docs/configuration.md's Overrides example is the file tested here")


def main():
    test_readme()
    redis = harness.RedisServer().start()
    test_redis_state(redis)
    test_backend(NO_REDIS, "memory", extra="backend: memory\n")
    test_local()
    test_reload(redis)
    test_auth_and_admin(redis)
    test_check_config()


harness.run(main)
