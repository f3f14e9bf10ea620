# SPDX-License-Identifier: Apache-2.0
"""test_envoy_config.py: envoyproxy/ratelimit's YAML directory in the real
daemon: --check-config with --envoy-config (the shipped conf/envoy, an
invalid file, a domain defined twice), the CLI winning over envoy_config:,
SIGHUP re-reading the directory (a new file, an invalid one keeping the old
configuration), and watch: true watching the directory (a changed file's new
limit served), following envoy_config: to another directory on reload."""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR", ".")
POLICY = """policies:
  p:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 5, window: 1h}
"""


def put(directory, name, text):
    tmp = os.path.join(directory, "." + name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(directory, name))


def domain_file(name, rpu=5):
    return ("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, "
            "requests_per_unit: %d}\n" % (name, rpu))


def check_config(args):
    p = subprocess.run([BINARY, "--check-config"] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    return p.returncode, p.stdout.decode() + p.stderr.decode()


def served(d, domain, value):
    """One hit on domain's key k=value through POST /json: the limit it is
    counted against (requests per unit) and what it leaves."""
    r = d.request("POST", "/json", json.dumps({"domain": domain, "descriptors": [
        {"entries": [{"key": "k", "value": value}]}]}))
    st = r.json["statuses"][0]
    return st.get("currentLimit", {}).get("requestsPerUnit"), st.get("limitRemaining", 0)


def reloads(d, what="policies reloaded"):
    return d.logs().count(what)


def test_check_config():
    conf = os.path.join(SRCDIR, "conf", "ratelimitd.yaml")
    rc, out = check_config(["--config", conf, "--envoy-config", os.path.join(SRCDIR, "conf",
                                                                              "envoy")])
    harness.ok(rc == 0 and "6 policies, 4 domains" in out,
               "-t --envoy-config conf/envoy passes: %r" % out)

    tmp = harness.make_tempdir()
    put(tmp, "a.yaml", domain_file("alpha"))
    put(tmp, "b.yaml", "domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: "
                       "lightyear, requests_per_unit: 1}\n")
    rc, out = check_config(["--config", conf, "--envoy-config", tmp])
    want = "%s/b.yaml:4:24: descriptors[0].rate_limit.unit: invalid value \"lightyear\"" % tmp
    harness.ok(rc == 1 and want in out, "-t: an invalid file is an error at its line: %r" % out)

    put(tmp, "b.yaml", domain_file("alpha"))
    rc, out = check_config(["--config", conf, "--envoy-config", tmp])
    want = ("%s/b.yaml:1:9: domain \"alpha\" is defined twice: also at %s/a.yaml:1:9"
            % (tmp, tmp))
    harness.ok(rc == 1 and want in out, "-t: a domain in two files names both: %r" % out)

    put(tmp, "b.yaml", domain_file("edge_proxy"))
    rc, out = check_config(["--config", conf, "--envoy-config", tmp])
    harness.ok(rc == 1 and "domain \"edge_proxy\" is defined twice: also at %s:" % conf in out,
               "-t: a file and the policy file's domains: name both: %r" % out)

    # The CLI wins over envoy_config:.
    os.unlink(os.path.join(tmp, "b.yaml"))
    bad = harness.make_tempdir()
    put(bad, "x.yaml", "domain: [\n")
    policy = os.path.join(tmp, "policy.yml.d")
    os.mkdir(policy)
    put(policy, "p.yaml", POLICY + "envoy_config: %s\n" % bad)
    rc, out = check_config(["--config", os.path.join(policy, "p.yaml")])
    harness.ok(rc == 1 and "%s/x.yaml:2:1:" % bad in out, "envoy_config: is read: %r" % out)
    rc, out = check_config(["--config", os.path.join(policy, "p.yaml"), "--envoy-config", tmp])
    harness.ok(rc == 0 and "1 policy, 1 domain (envoy_config %s)" % tmp in out,
               "--envoy-config wins over envoy_config: %r" % out)


def test_sighup(redis):
    envoy = harness.make_tempdir()
    put(envoy, "a.yaml", domain_file("alpha"))
    d = Daemon("unix:" + redis.socket_path, POLICY)
    d.start(args=["--envoy-config", envoy])
    harness.ok("level=info msg=\"ratelimitd started\"" in d.logs(), "starts with the directory")

    put(envoy, "b.yml", domain_file("beta"))
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: reloads(d) == 1, 5, what="the reload")
    harness.ok("trigger=SIGHUP policies=1 domains=2" in d.logs(),
               "SIGHUP reads the directory again: a new file's domain is loaded")

    put(envoy, "c.yaml", "domain: gamma\ndescriptors:\n  - key: k\n    policy: p\n")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: reloads(d, "reload failed") == 1, 5, what="the failed reload")
    harness.ok("%s/c.yaml:4:13: descriptors[0]: policy: is ratelimitd's extension" % envoy
               in d.logs(), "an invalid file: the reload fails with its file:line:col")
    harness.eq(d.check("p", "x").status, 200, "the old configuration stays in force")

    os.unlink(os.path.join(envoy, "c.yaml"))
    os.unlink(os.path.join(envoy, "a.yaml"))
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: reloads(d) == 2, 5, what="the second reload")
    harness.ok("trigger=SIGHUP policies=1 domains=1" in d.logs(),
               "a removed file's domain is gone after a reload")
    harness.eq(d.stop(), 0, "exits 0")


def test_watch(redis):
    envoy = harness.make_tempdir()
    other = harness.make_tempdir()
    put(envoy, "a.yaml", domain_file("alpha"))
    extra = "watch: true\nenvoy_config: %s\n" % envoy
    d = Daemon("unix:" + redis.socket_path, POLICY, extra=extra).start()

    put(envoy, "b.yaml", domain_file("beta"))
    harness.wait_until(lambda: reloads(d) == 1, 5, what="a reload on a new file")
    harness.ok("trigger=watch policies=1 domains=2" in d.logs(),
               "watch: a new file in the envoy directory reloads")

    harness.eq(served(d, "beta", "before"), (5, 4), "beta's limit is served: 5 a minute")
    put(envoy, "b.yaml", domain_file("beta", rpu=7))
    harness.wait_until(lambda: reloads(d) == 2, 5, what="a reload on a changed file")
    # Each worker takes the new snapshot on its own loop: bounded wait.
    harness.wait_until(lambda: served(d, "beta", "probe")[0] == 7, 5,
                       what="the new limit served")
    harness.eq(served(d, "beta", "after"), (7, 6),
               "watch: a changed file reloads and its new limit (7 a minute) is served")

    put(envoy, "notes.txt", "not a domain file")
    time.sleep(0.5)
    harness.eq(reloads(d), 2, "watch: a file that is not *.yaml / *.yml causes no reload")

    # envoy_config now names another directory: the watch follows it.
    put(other, "z.yaml", domain_file("zeta"))
    d.write_config(POLICY, extra="watch: true\nenvoy_config: %s\n" % other)
    harness.wait_until(lambda: reloads(d) == 3, 5, what="the reload to the other directory")
    harness.ok("trigger=watch policies=1 domains=1" in d.logs(), "envoy_config changed on reload")
    put(other, "y.yaml", domain_file("eta"))
    harness.wait_until(lambda: reloads(d) == 4, 5, what="a reload from the new directory")
    last = [line for line in d.logs().splitlines() if "policies reloaded" in line][-1]
    harness.ok(last.endswith("trigger=watch policies=1 domains=2 fields_changed=domains"),
               "watch: a file in the new directory reloads: %r" % last)
    put(envoy, "c.yaml", domain_file("gamma"))
    time.sleep(0.5)
    harness.eq(reloads(d), 4, "watch: the old directory is no longer watched")
    harness.eq(d.stop(), 0, "exits 0")


def main():
    test_check_config()
    redis = harness.RedisServer().start()
    test_sighup(redis)
    test_watch(redis)


harness.run(main)
