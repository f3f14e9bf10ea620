# SPDX-License-Identifier: Apache-2.0
"""test_envoy_parity.py: envoyproxy/ratelimit's own configuration, loaded by
the real daemon with --envoy-config and answering as that project's tests
and README say (issue 22, configuration parity), over gRPC and POST /json:

- the peer's integration-test directory (tests/envoy-ratelimit/config/,
  copied unchanged) starts the daemon and passes -t with no warning;
- share_threshold: every value a shared wildcard matches counts on one
  counter (the peer's testShareThreshold), a wildcard without it one
  counter per value;
- wildcards: a '*' anywhere in a value matches any run of bytes (a
  trailing one alone the peer's prefix wildcard; leading, middle and
  several are ratelimitd's extension), with and without share_threshold;
  exact value first, then wildcards in the order written, then the key
  alone;
- requests_per_unit: 0 denies every request (current_limit 0);
- the peer's reload test: reload.yaml copied into the watched directory
  makes the domain `reload` answer; removing it unloads it;
- several files of one domain: an error without envoy_merge_domains, one
  domain with it (the file's switch or --envoy-merge-domains), reloadable;
- fields ratelimitd does not act on (metadata) load with a warning naming
  file:line:col; a field outside the peer's schema is refused;
- value_to_metric and detailed_metric name the metrics as the peer's stats;
- every configuration example of the peer's README, with the answers it
  states.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

import rls_client  # noqa: E402

rls_client.require()  # skips the whole test without python3-grpcio & co

SRCDIR = os.environ.get("RL_SRCDIR", ".")
PEER = os.path.join(SRCDIR, "tests", "envoy-ratelimit")
OK, OVER = "OK", "OVER_LIMIT"
UINT32_MAX = 4294967295
POLICY = "policies:\n  p: {tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1h}]}\n"
CODES = {rls_client.CODE_UNKNOWN: "UNKNOWN", rls_client.CODE_OK: OK,
         rls_client.CODE_OVER_LIMIT: OVER}


class Rls:
    """A gRPC channel to a daemon's grpc_listen, and POST /json on its
    listen port: the same call through both fronts."""

    def __init__(self, d):
        self.d = d
        self.channel = rls_client.channel("127.0.0.1:%d" % d.grpc_port)

    def call(self, domain, *descriptors):
        """descriptors: lists of (key, value). The RateLimitResponse."""
        return rls_client.should_rate_limit(
            self.channel, domain, [{"entries": e, "hits_addend": None} for e in descriptors])

    def statuses(self, domain, *descriptors):
        """[(code, (requests_per_unit, unit, name) or None, remaining)], overall."""
        r = self.call(domain, *descriptors)
        out = []
        for s in r.statuses:
            cl = s.current_limit
            lim = ((cl.requests_per_unit, rls_client.UNITS.get(cl.unit, "UNKNOWN"), cl.name)
                   if s.HasField("current_limit") else None)
            out.append((CODES[s.code], lim, s.limit_remaining))
        return out, CODES[r.overall_code]

    def json(self, domain, *descriptors):
        body = {"domain": domain,
                "descriptors": [{"entries": [{"key": k, "value": v} for k, v in e]}
                                for e in descriptors]}
        return self.d.request("POST", "/json", json.dumps(body))

    def codes(self, domain, descriptor, n):
        return [CODES[self.call(domain, descriptor).overall_code] for _ in range(n)]

    def close(self):
        self.channel.close()


def start(redis, envoy_dir, extra="", args=(), prefix="rl-parity:"):
    port = harness.free_port()
    d = Daemon("unix:" + redis.socket_path, POLICY, prefix=prefix,
               extra="grpc_listen: 127.0.0.1:%d\n" % port + extra)
    d.grpc_port = port
    d.start(args=("--envoy-config", envoy_dir) + tuple(args))
    return d


def check_config(envoy_dir, *args):
    conf = os.path.join(harness.make_tempdir(), "p.yaml")
    with open(conf, "w") as f:
        f.write(POLICY)
    p = subprocess.run([BINARY, "--check-config", "--config", conf, "--envoy-config", envoy_dir]
                       + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def put(directory, name, text):
    tmp = os.path.join(directory, "." + name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(directory, name))


def peer_copy():
    """A writable copy of the peer's config/ directory."""
    d = os.path.join(harness.make_tempdir("rl-peer-"), "config")
    shutil.copytree(os.path.join(PEER, "config"), d)
    return d


def metric(d, **labels):
    """A ratelimitd_rls_descriptors_total sample, 0 when the series is absent."""
    m = promtext.parse(d.admin("/metrics").body.decode())
    try:
        return promtext.value(m, "ratelimitd_rls_descriptors_total", **labels) or 0
    except KeyError:
        return 0


# ---- the peer's directory, share_threshold, rpu 0 ------------------------------------


def test_shipped(redis):
    rc, out, err = check_config(os.path.join(PEER, "config"))
    harness.ok(rc == 0 and "7 domains" in out, "-t: the peer's config/ as shipped passes: %r %r"
               % (out, err))
    harness.eq(err, "", "-t: and warns about nothing (every field acted on)")
    d = start(redis, os.path.join(PEER, "config"))
    rls = Rls(d)
    harness.eq(rls.statuses("foo", [("hello", "world")]), ([(OK, None, 0)], OK),
               "unknown domain: OK, no current_limit (the peer's test 1)")
    harness.eq(rls.statuses("basic", [("key1", "foo")]), ([(OK, (50, "SECOND", ""), 49)], OK),
               "basic key1: 50/SECOND, 49 left (the peer's test 2)")
    harness.eq(harness.in_one_window(60, lambda key: rls.codes("another", [("key2", key)], 25),
                                     "25 calls on key2 (20 a minute)"),
               [OK] * 20 + [OVER] * 5,
               "another key2 (20/MINUTE): 25 calls, 20 OK then OVER_LIMIT")
    harness.eq(rls.statuses("basic_legacy", [("key2_10", "x")])[0][0][1], (10, "SECOND", ""),
               "basic_legacy key2_10: 10/SECOND")
    test_share_threshold(rls)
    test_sanitize_metrics(d, rls)
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


def test_share_threshold(rls):
    dom = "share-threshold-test"
    got = [rls.statuses(dom, [("files", "files/a.pdf")])[0][0][2] for _ in range(10)]
    harness.eq(got, list(range(9, -1, -1)), "share_threshold: files/a.pdf takes all 10")
    harness.eq(rls.statuses(dom, [("files", "files/b.csv")]),
               ([(OVER, (10, "HOUR", ""), 0)], OVER),
               "share_threshold: files/b.csv is over: the values share one counter (gRPC)")
    r = rls.json(dom, [("files", "files/c.txt")])
    harness.eq((r.status, r.json["overallCode"], r.json["statuses"][0].get("currentLimit")),
               (429, OVER, {"requestsPerUnit": 10, "unit": "HOUR"}),
               "share_threshold: files/c.txt over too (POST /json)")
    got = [rls.statuses(dom, [("files_no_share", "files_no_share/%d" % i)])[0] for i in range(10)]
    harness.eq(got, [[(OK, (10, "HOUR", ""), 9)]] * 10,
               "no share_threshold: every value its own counter, 9 left each")
    r = rls.json(dom, [("files_no_share", "files_no_share/x")])
    harness.eq((r.status, r.json["statuses"][0].get("limitRemaining")), (200, 9),
               "no share_threshold over /json: its own counter")


def test_sanitize_metrics(d, rls):
    """value_to_metric and detailed_metric (the peer's sanitize.yaml): the
    request's value in the metric's descriptor label."""
    rls.call("sanitize", [("grpc_path", "/svc.A/Get")])
    rls.call("sanitize", [("detailed_path", "/x")])
    rls.call("share-threshold-test", [("files", "files/zzz")])
    harness.eq(metric(d, domain="sanitize", descriptor="grpc_path_/svc.A/Get", result="ok"), 1,
               "value_to_metric: the value in the descriptor label")
    harness.eq(metric(d, domain="sanitize", descriptor="detailed_path_/x", result="ok"), 1,
               "detailed_metric: the value in the descriptor label")
    harness.ok(metric(d, domain="share-threshold-test", descriptor="files_files/*",
                      result="over_limit") >= 2,
               "share_threshold: counted under the pattern, not the value")


def test_rpu_zero_and_wildcards(redis):
    envoy = harness.make_tempdir("rl-wild-")
    shutil.copy(os.path.join(PEER, "reload.yaml"), os.path.join(envoy, "reload.yaml"))
    put(envoy, "wild.yaml", """domain: wild
descriptors:
  - key: mid
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: mid
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: order
    value: ab*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: order
    value: a*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: order
    value: abc
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: order
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: path
    value: /api/*/users
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: spath
    value: /api/*/users
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: host
    value: "*.example.com"
    rate_limit: {unit: minute, requests_per_unit: 7}
""")
    d = start(redis, envoy)
    rls = Rls(d)
    for _ in range(2):
        harness.eq(rls.statuses("reload", [("block", "foo")]),
                   ([(OVER, (0, "SECOND", ""), 0)], OVER),
                   "requests_per_unit 0: OVER_LIMIT, current_limit 0/SECOND (gRPC)")
    dur = rls.call("reload", [("block", "foo")]).statuses[0].duration_until_reset
    harness.ok(0 < dur.seconds + dur.nanos / 1e9 <= 1,
               "requests_per_unit 0: duration_until_reset is the time to the window's end (%r)"
               % dur)
    r = rls.json("reload", [("block", "foo")])
    harness.eq((r.status, r.json["overallCode"], r.json["statuses"][0].get("currentLimit")),
               (429, OVER, {"unit": "SECOND"}),
               "requests_per_unit 0 over /json: 429, currentLimit with 0 left out")
    r = rls.call("reload", [("key1", "foo")], [("block", "foo")])
    harness.eq([CODES[s.code] for s in r.statuses] + [CODES[r.overall_code]], [OK, OVER, OVER],
               "a blocked descriptor denies the call, the other's status OK")
    harness.eq(rls.statuses("reload", [("key1", "foo")])[0], [(OK, (50, "SECOND", ""), 49)],
               "... and the denied call took nothing from key1")
    want = {"bar*b": 1, "barxb": 1, "barb": 1, "barbx": 2, "": 2,
            "abc": 5, "abd": 3, "ab": 3, "azz": 4, "b": 6}
    for value, rpu in sorted(want.items()):
        key = "mid" if value.startswith("bar") or value == "" else "order"
        harness.eq(rls.statuses("wild", [(key, value)])[0][0][1][0], rpu,
                   "wildcards: %s=%r meets the %d/minute node" % (key, value, rpu))
    test_mid_wildcards(d, rls)
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


def test_mid_wildcards(d, rls):
    """'*' in the middle or at the start of a value, over gRPC and /json:
    without share_threshold one counter per value, with it one for all."""
    def counted(v):
        """Within one minute: three calls on one path, the same path's
        neighbour over /json, three values of a shared pattern, then one
        more value of it over /json."""
        return ([rls.statuses("wild", [("path", "/api/%s/users" % v)])[0][0][2] for _ in range(3)],
                rls.json("wild", [("path", "/api/%s-2/users" % v)]),
                [rls.statuses("wild", [("spath", "/api/%s-%s/users" % (v, c))])[0][0] for c in "abc"],
                rls.json("wild", [("spath", "/api//users")]))

    # spath's values share one counter: a second run waits for a new minute.
    path, r, got, r2 = harness.in_one_window(60, counted, "the 3-a-minute wildcard nodes",
                                             fresh_keys=False)
    harness.eq(path, [2, 1, 0], "/api/*/users: /api/v1/users meets the 3/minute node (gRPC)")
    harness.eq((r.status, r.json["statuses"][0].get("limitRemaining"),
                r.json["statuses"][0].get("currentLimit")),
               (200, 2, {"requestsPerUnit": 3, "unit": "MINUTE"}),
               "/api/*/users without share_threshold: /api/v2/users its own counter (/json)")
    harness.eq(rls.statuses("wild", [("path", "/api/v1/users/7")]), ([(OK, None, 0)], OK),
               "/api/*/users does not match /api/v1/users/7: the end counts (no limit)")
    harness.eq([(code, left) for code, _, left in got], [(OK, 2), (OK, 1), (OK, 0)],
               "share_threshold on /api/*/users: three values take from one counter (gRPC)")
    harness.eq((r2.status, r2.json["overallCode"]), (429, OVER),
               "share_threshold: /api//users (the empty run) is over too (/json)")
    harness.eq(rls.statuses("wild", [("host", "a.example.com")])[0][0][1], (7, "MINUTE", ""),
               "*.example.com: a leading '*' (gRPC)")
    r = rls.json("wild", [("host", "example.com")])
    harness.eq((r.status, r.json["statuses"][0].get("currentLimit")), (200, None),
               "*.example.com does not match example.com (/json)")
    harness.ok(metric(d, domain="wild", descriptor="spath_/api/*/users", result="over_limit") >= 1,
               "share_threshold's metric names the pattern as written")


def test_rpu_zero_memory(redis):
    """The same limit of 0 decided in this process's memory (backend:
    memory, the local limiter that mirrors the scripts)."""
    envoy = harness.make_tempdir("rl-mem-")
    shutil.copy(os.path.join(PEER, "reload.yaml"), os.path.join(envoy, "reload.yaml"))
    d = start(redis, envoy, extra="backend: memory\n")
    rls = Rls(d)
    r = rls.call("reload", [("block", "foo")])
    dur = r.statuses[0].duration_until_reset
    harness.ok(CODES[r.overall_code] == OVER and r.statuses[0].current_limit.requests_per_unit == 0
               and 0 < dur.seconds + dur.nanos / 1e9 <= 1,
               "backend: memory: requests_per_unit 0 is OVER_LIMIT until the window's end")
    harness.eq(harness.in_one_window(60, lambda key: rls.codes("reload", [("one_per_minute", key)], 2),
                                     "two calls on one_per_minute"), [OK, OVER],
               "backend: memory: one_per_minute, 1 then OVER_LIMIT")
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


# ---- reload, merged domains ---------------------------------------------------------


def test_reload(redis):
    """The peer's testConfigReload: reload.yaml copied into the watched
    directory, the new domain answers; removed, a reload unloads it."""
    envoy = peer_copy()
    d = start(redis, envoy, extra="watch: true\n")
    rls = Rls(d)
    harness.eq(rls.statuses("reload", [("block", "foo")]), ([(OK, None, 0)], OK),
               "before the reload: domain reload unknown, block OK")
    shutil.copy(os.path.join(PEER, "reload.yaml"), os.path.join(envoy, "reload.yaml"))
    harness.wait_until(lambda: rls.statuses("reload", [("key1", "foo")])[1] == OK and
                       rls.statuses("reload", [("block", "x")])[1] == OVER, timeout=15,
                       what="watch: reload.yaml loaded")
    harness.eq(rls.statuses("reload", [("key1", "bar")]), ([(OK, (50, "SECOND", ""), 49)], OK),
               "after the reload: reload key1 50/SECOND, 49 left (the peer's expectation)")
    os.remove(os.path.join(envoy, "reload.yaml"))
    harness.wait_until(lambda: rls.statuses("reload", [("block", "foo")])[1] == OK, timeout=15,
                       what="watch: reload.yaml's removal unloads the domain")
    harness.ok(True, "removing reload.yaml: the domain is gone again")
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


def test_merge(redis):
    envoy = peer_copy()
    shutil.copy(os.path.join(PEER, "existingDomainreload.yaml"),
                os.path.join(envoy, "existingDomainreload.yaml"))
    rc, out, err = check_config(envoy)
    harness.ok(rc == 1 and "domain \"basic\" is defined twice" in err
               and "envoy_merge_domains: true merges them" in err,
               "-t: basic in two files without the switch: refused, naming both: %r" % err)
    rc, out, err = check_config(envoy, "--envoy-merge-domains")
    harness.ok(rc == 0 and "7 domains" in out, "-t --envoy-merge-domains: one domain: %r %r"
               % (out, err))
    rc, out, err = check_config(envoy, "--envoy-merge-domains=maybe")
    harness.eq(rc, 64, "--envoy-merge-domains=maybe: a usage error")

    # The switch in the policy file, reloadable.
    os.remove(os.path.join(envoy, "existingDomainreload.yaml"))
    d = start(redis, envoy, prefix="rl-merge:")
    rls = Rls(d)
    harness.eq(rls.statuses("basic", [("key11", "x")]), ([(OK, None, 0)], OK),
               "key11 unknown before")
    shutil.copy(os.path.join(PEER, "existingDomainreload.yaml"),
                os.path.join(envoy, "existingDomainreload.yaml"))
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "reload failed" in d.logs(), timeout=10,
                       what="the refused reload")
    harness.ok("defined twice" in d.logs(), "the reload without the switch names the duplicate")
    harness.eq(rls.statuses("basic", [("key1", "x")])[0], [(OK, (50, "SECOND", ""), 49)],
               "the running configuration stays")
    d.write_config(POLICY, prefix="rl-merge:",
                   extra="grpc_listen: 127.0.0.1:%d\nenvoy_merge_domains: true\n" % d.grpc_port)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: rls.statuses("basic", [("key11", "x")])[1] == OK and
                       rls.statuses("basic", [("key11", "y")])[0][0][1] is not None, timeout=10,
                       what="envoy_merge_domains: true on reload")
    harness.eq(rls.statuses("basic", [("key11", "z")])[0], [(OK, (50, "SECOND", ""), 49)],
               "merged: the second file's key11")
    harness.eq(rls.statuses("basic", [("key1", "z")])[0], [(OK, (50, "SECOND", ""), 49)],
               "merged: the first file's key1 kept")
    harness.eq(rls.statuses("basic", [("block1", "z")]), ([(OVER, (0, "SECOND", ""), 0)], OVER),
               "merged: block1 (requests_per_unit 0) denies")
    # The same top-level descriptor in both files: refused even merged.
    put(envoy, "zz.yaml", "domain: basic\ndescriptors:\n  - key: key1\n    rate_limit: "
                          "{unit: hour, requests_per_unit: 1}\n")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: d.logs().replace("\\", "").count(
        'duplicate descriptor: key "key1" with no value at the top of both') == 1, timeout=10,
        what="a descriptor in two files of one domain")
    harness.eq(rls.statuses("basic", [("key1", "w")])[0], [(OK, (50, "SECOND", ""), 49)],
               "refused: the merged configuration stays")
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


# ---- fields of the schema -----------------------------------------------------------


METADATA = """domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
        metadata:
          name: service_1
  - key: key2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 20
    metadata:
      service_with_quota:
        name: service_2
"""


def test_schema_fields(redis):
    envoy = harness.make_tempdir("rl-schema-")
    put(envoy, "metadata.yaml", METADATA)
    rc, out, err = check_config(envoy)
    path = os.path.join(envoy, "metadata.yaml")
    want = ["ratelimitd: warning: %s:%s: %s: read and ignored: ratelimitd does not act on this "
            "field" % (path, at, field)
            for at, field in (("11:11", "descriptors[0].descriptors[0].metadata"),
                              ("18:7", "descriptors[1].metadata"))]
    harness.eq((rc, err.splitlines()), (0, want),
               "-t: metadata loads, one warning each naming file:line:col")
    # A key of the peer's list out of its place: the peer ignores it, so do we (warned).
    put(envoy, "zmisplaced.yaml", "domain: misplaced\ndescriptors:\n  - key: k\n    name: n\n"
                                  "    rate_limit: {unit: hour, requests_per_unit: 2}\n")
    rc, out, err = check_config(envoy)
    harness.ok(rc == 0 and ("%s:4:5: descriptors[0]: \"name\" is not a field here: read and "
                            "ignored" % os.path.join(envoy, "zmisplaced.yaml")) in err,
               "-t: name: beside key: (ignored by the peer too) loads with a warning: %r" % err)
    os.remove(os.path.join(envoy, "zmisplaced.yaml"))
    d = start(redis, envoy)
    harness.ok(all(w.split("warning: ", 1)[1] in d.logs() for w in want),
               "the daemon logs the same warnings at start")
    rls = Rls(d)
    harness.eq(rls.statuses("test-domain", [("key1", "value1"), ("subkey1", "x")])[0],
               [(OK, (5, "SECOND", ""), 4)], "the descriptor with metadata answers its limit")
    harness.eq(rls.statuses("test-domain", [("key2", "x")])[0][0][1], (20, "MINUTE", ""),
               "quota_mode: loads (its decision is the answer's)")
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")
    put(envoy, "metadata.yaml", "domain: x\ndescriptors:\n  - key: k\n    soft_limit: 3\n")
    rc, out, err = check_config(envoy)
    harness.ok(rc == 1 and "4:5: descriptors[0]: unknown field \"soft_limit\"" in err,
               "a field outside the peer's schema is refused, as there: %r" % err)


# ---- the README's examples ----------------------------------------------------------


README = {
    "ex1.yaml": """domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
""",
    "ex2.yaml": """domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
""",
    "ex3.yaml": """domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
""",
    "ex4.yaml": """domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
""",
    "ex5.yaml": """domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
""",
    "ex6.yaml": """domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
""",
    "ex7.yaml": """domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
""",
    "ex8.yaml": """domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
""",
    "ex9.yaml": """domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
""",
    # "Including descriptor values in metrics" (value_to_metric).
    "ex10.yaml": """domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
""",
}
# Example 4's second configuration, which the request does match.
EX4_NESTED = """domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
"""


def test_readme(redis):
    envoy = harness.make_tempdir("rl-readme-")
    for name, text in README.items():
        put(envoy, name, text)
    rc, out, err = check_config(envoy)
    harness.ok(rc == 0 and err == "", "-t: every README example loads without a warning: %r"
               % err)
    d = start(redis, envoy, prefix="rl-readme:")
    rls = Rls(d)
    # Example 1.
    harness.eq(rls.statuses("mongo_cps", [("database", "users")], [("database", "default")])[0],
               [(OK, (500, "SECOND", ""), 499)] * 2, "example 1: users and default 500/SECOND")
    # Example 2: 5 marketing messages a day to a number, 100 to any number.
    harness.eq(rls.statuses("messaging", [("message_type", "marketing"),
                                          ("to_number", "2061111111")],
                            [("to_number", "2061111111")])[0],
               [(OK, (5, "DAY", ""), 4), (OK, (100, "DAY", ""), 99)],
               "example 2: both rules of one call, each its limit")
    harness.eq(rls.statuses("messaging", [("message_type", "marketing"),
                                          ("to_number", "2062222222")])[0],
               [(OK, (5, "DAY", ""), 4)], "example 2: another number its own 5")
    harness.eq(rls.codes("messaging", [("message_type", "marketing"),
                                       ("to_number", "2061111111")], 5), [OK] * 4 + [OVER],
               "example 2: the sixth marketing message to a number is over")
    # Example 3: the most specific match; the black-listed IP always over.
    harness.eq(rls.statuses("edge_proxy_per_ip", [("remote_address", "50.0.0.1")])[0],
               [(OK, (10, "SECOND", ""), 9)], "example 3: 50.0.0.1 gets 10/SECOND")
    harness.eq(rls.statuses("edge_proxy_per_ip", [("remote_address", "50.0.0.5")]),
               ([(OVER, (0, "SECOND", ""), 0)], OVER), "example 3: 50.0.0.5 black-listed (0)")
    # Example 4: the depth of the request must be the depth of the limit.
    harness.eq(rls.statuses("example4", [("key", "value"), ("subkey", "subvalue")])[0],
               [(OK, None, 0)], "example 4: a two-entry request does not match a one-level limit")
    put(envoy, "ex4.yaml", EX4_NESTED)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: rls.statuses("example4", [("key", "value"),
                                                         ("subkey", "s0")])[0][0][1],
                       timeout=10, what="example 4's second configuration")
    harness.eq(rls.statuses("example4", [("key", "value"), ("subkey", "subvalue")])[0],
               [(OK, (300, "SECOND", ""), 299)], "example 4: it matches the nested one")
    # Example 5: unlimited.
    harness.eq(rls.statuses("internal", [("ldap", "x")], [("azure", "x")])[0],
               [(OK, None, UINT32_MAX), (OK, (100, "MINUTE", ""), 99)],
               "example 5: ldap unlimited (remaining MaxUint32), azure 100/MINUTE")
    # Example 6: shadow_mode never denies; user-b 20 a second.
    a = [("service", "auth-service"), ("user", "user-a")]
    harness.eq(rls.codes("example6", a, 12), [OK] * 12, "example 6: user-a (shadow) never limited")
    codes = harness.in_one_window(
        1, lambda _: rls.codes("example6", [("service", "auth-service"), ("user", "user-b")], 21),
        "21 calls of user-b (20 a second)", fresh_keys=False)
    harness.eq((codes.count(OK), codes.count(OVER)), (20, 1),
               "example 6: user-b 20 a second, the 21st over")
    # Example 7: replaces.
    one = [("key_1", "value_1"), ("user", "bkthomps")]
    two = [("key_2", "value_2"), ("user", "bkthomps")]
    both, alone1, alone2 = harness.in_one_window(
        1, lambda _: (rls.statuses("example7", one, two)[0], rls.statuses("example7", one)[0],
                      rls.statuses("example7", two)[0]),
        "three calls of example 7 (a second)", fresh_keys=False)
    harness.eq(both, [(OK, None, 0), (OK, (10, "SECOND", ""), 9)],
               "example 7: both: the replaced limit drops, 10/SECOND applies")
    harness.eq(alone1, [(OK, (5, "SECOND", "specific_limit"), 4)],
               "example 7: key_1 alone: 5/SECOND, untouched by the replaced call")
    harness.eq(alone2, [(OK, (10, "SECOND", ""), 8)],
               "example 7: key_2 alone: 10/SECOND")
    # Example 8: detailed_metric.
    harness.eq(rls.statuses("example8", [("key1", "unspecified_value")],
                            [("key1", "unspecified_value2")], [("key1", "value1")])[0],
               [(OK, (10, "MINUTE", ""), 9), (OK, (10, "MINUTE", ""), 9),
                (OK, (20, "MINUTE", ""), 19)], "example 8: 10, 10 and 20 a minute")
    for name in ("key1_unspecified_value", "key1_unspecified_value2", "key1_value1"):
        harness.eq(metric(d, domain="example8", descriptor=name, result="ok"), 1,
                   "example 8: the metric key %s" % name)
    harness.eq(metric(d, domain="example8", descriptor="key1", result="ok"), 0,
               "example 8: nothing rolled up into key1")
    # Example 9: a wildcard, one counter per value.
    harness.eq(rls.statuses("example9", [("key1", "value_1")], [("key1", "value_2")])[0],
               [(OK, (20, "MINUTE", ""), 19)] * 2, "example 9: value* matches both, 20 each")
    # value_to_metric's example.
    rls.call("domain", [("route", "api"), ("http_method", "GET"), ("subject_id", "123")])
    rls.call("domain", [("route", "web"), ("http_method", "POST"), ("subject_id", "456")])
    for name in ("route_api.http_method_GET.subject_id", "route_web.http_method_POST.subject_id"):
        harness.eq(metric(d, domain="domain", descriptor=name, result="ok"), 1,
                   "value_to_metric: the metric key %s" % name)
    rls.close()
    harness.eq(d.stop(), 0, "daemon exits 0")


def main():
    redis = harness.RedisServer().start()
    test_shipped(redis)
    test_rpu_zero_and_wildcards(redis)
    test_rpu_zero_memory(redis)
    test_reload(redis)
    test_merge(redis)
    test_schema_fields(redis)
    test_readme(redis)


harness.run(main)
