# SPDX-License-Identifier: Apache-2.0
"""test_rlconfig.py: GET /rlconfig, the loaded Envoy configuration
(envoyproxy/ratelimit's debug view), against the real daemon with a policy
file holding `domains:` and an --envoy-config directory:

- the text view has one line per limit, each starting as
  envoyproxy/ratelimit's dump does (`domain.key_value: unit=U
  requests_per_unit=N, shadow_mode: B`), for every limit of both sources;
- the JSON view (?format=json, or Accept: application/json) lists the same
  limits, with each `policy:` descriptor's policy, algorithm and tiers;
  ?format=text wins over Accept; a bad format is 400; HEAD has no body;
- after a SIGHUP that changes the envoy directory, the view changes;
- the admin API's access rule: 401 without the token, 404 on the check port
  (it is on admin_listen).
"""
import json
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

TOKEN = "rlconfig-admin-token"
AUTH = {"Authorization": "Bearer " + TOKEN}

POLICY = """policies:
  login:
    tiers:
      - {name: burst, algorithm: token_bucket, limit: 10, window: 10s}
      - {name: hourly, algorithm: sliding_window_log, limit: 100, window: 1h}
  drip: {tiers: [{name: t, algorithm: leaky_bucket, limit: 5, window: 1s, burst: 3}]}
domains:
  - domain: edge
    descriptors:
      - {key: path, value: /login, policy: login}
      - {key: ip, policy: drip, shadow_mode: true}
      - {key: host, value: "*.example.*", rate_limit: {unit: hour, requests_per_unit: 4}}
      - key: tenant
        value: "beta*"
        rate_limit: {name: tenants, unit: hour, requests_per_unit: 100}
        descriptors:
          - key: user
            rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: tenants}]}
"""

ENVOY_A = """domain: mongo_cps
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
      requests_per_unit: %d
  - key: free
    rate_limit: {unlimited: true}
"""

ENVOY_B = """domain: added
descriptors:
  - key: k
    rate_limit: {unit: day, requests_per_unit: 9}
"""

# envoyproxy/ratelimit's line: "%s: unit=%s requests_per_unit=%d, shadow_mode: %t"
PEER_LINE = re.compile(r"^(\S+): unit=([A-Z]+) requests_per_unit=(\d+), shadow_mode: (true|false)")

WANT_KEYS = ["edge.host_*.example.*", "edge.ip", "edge.path_/login", "edge.tenant_beta*", "edge.tenant_beta*.user",
             "mongo_cps.database_default", "mongo_cps.database_users", "mongo_cps.free"]


def text_view(d, query="", headers=None):
    r = d.request("GET", "/rlconfig" + query, headers=dict(AUTH, **(headers or {})),
                  port=d.admin_port)
    return r, r.body.decode()


def lines_of(text):
    """{key: (unit, requests_per_unit, shadow_mode, the whole line)}."""
    out = {}
    for line in text.splitlines():
        m = PEER_LINE.match(line)
        harness.ok(m is not None, "a line as envoyproxy/ratelimit writes it: %r" % line[:80])
        if m:
            out[m.group(1)] = (m.group(2), int(m.group(3)), m.group(4) == "true", line)
    return out


def json_view(d, query="?format=json", headers=None):
    r = d.request("GET", "/rlconfig" + query, headers=dict(AUTH, **(headers or {})),
                  port=d.admin_port)
    return r, json.loads(r.body)


def limits_of(j):
    return {lim["key"]: lim for dom in j["domains"] for lim in dom["limits"]}


def main():
    tmp = harness.make_tempdir()
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write(TOKEN + "\n")
    envoy = os.path.join(tmp, "envoy")
    os.mkdir(envoy)
    with open(os.path.join(envoy, "a.yaml"), "w") as f:
        f.write(ENVOY_A % 50)
    d = Daemon(None, POLICY, admin=True,
               extra="backend: memory\nauth_token_file: %s\n" % token)
    d.start(args=("--envoy-config", envoy))

    # Access: the admin API's rule.
    r = d.request("GET", "/rlconfig", port=d.admin_port)
    harness.eq((r.status, r.headers.get("www-authenticate")), (401, "Bearer"),
               "without the token: 401")
    r = d.request("GET", "/rlconfig", headers={"Authorization": "Bearer nope"},
                  port=d.admin_port)
    harness.eq(r.status, 401, "a wrong token: 401")
    harness.eq(d.request("GET", "/rlconfig", headers=AUTH).status, 404,
               "not on the check port when admin_listen is set")
    r = d.request("POST", "/rlconfig", headers=AUTH, port=d.admin_port)
    harness.eq((r.status, r.headers.get("allow")), (405, "GET, HEAD"), "POST: 405, Allow")

    # The text view.
    r, text = text_view(d)
    harness.eq((r.status, r.headers.get("content-type")), (200, "text/plain; charset=utf-8"),
               "text view: 200 text/plain")
    lines = lines_of(text)
    harness.eq(sorted(lines), WANT_KEYS, "text view: every limit of both sources, one line each")
    harness.eq(lines.get("mongo_cps.database_default", ())[:3], ("SECOND", 50, False),
               "text view: unit, requests_per_unit, shadow_mode of an envoy file's limit")
    harness.eq(lines.get("edge.ip", ())[:3], ("UNKNOWN", 0, True),
               "text view: a policy: descriptor with shadow_mode")
    harness.ok("policy: login{burst: token_bucket limit=10 window_us=10000000, hourly: "
               "sliding_window_log limit=100 window_us=3600000000}"
               in lines.get("edge.path_/login", ("",) * 4)[3],
               "text view: a policy: descriptor names its policy and tiers")
    harness.ok(", name: tenants" in lines.get("edge.tenant_beta*", ("",) * 4)[3]
               and ", replaces: [tenants]" in lines.get("edge.tenant_beta*.user", ("",) * 4)[3]
               and ", unlimited: true" in lines.get("mongo_cps.free", ("",) * 4)[3],
               "text view: name, replaces, unlimited")

    # The JSON view, three ways.
    r, j = json_view(d)
    harness.eq((r.status, r.headers.get("content-type")), (200, "application/json"),
               "?format=json: 200 application/json")
    by_accept = json_view(d, "", {"Accept": "text/html, application/json;q=0.9"})[1]
    harness.eq(by_accept, j, "Accept: application/json gives the same")
    r, forced = text_view(d, "?format=text", {"Accept": "application/json"})
    harness.eq(forced, text, "?format=text wins over Accept")
    limits = limits_of(j)
    harness.eq(sorted(limits), WANT_KEYS, "JSON view: the same limits")
    harness.eq([dom["domain"] for dom in j["domains"]], ["edge", "mongo_cps"],
               "JSON view: domains by name")
    login = limits.get("edge.path_/login", {})
    harness.eq(login.get("descriptors"), [{"key": "path", "value": "/login"}],
               "JSON view: the descriptor's entries")
    pol = login.get("policy") or {}
    harness.eq((pol.get("name"), [(t["name"], t["algorithm"], t["limit"], t["window_us"])
                                  for t in pol.get("tiers", [])]),
               ("login", [("burst", "token_bucket", 10, 10000000),
                          ("hourly", "sliding_window_log", 100, 3600000000)]),
               "JSON view: a policy: descriptor's policy, algorithms and tiers")
    ip = limits.get("edge.ip", {})
    harness.eq((ip.get("shadow_mode"), (ip.get("policy") or {}).get("shadow"),
                (ip.get("policy") or {}).get("tiers", [{}])[0].get("burst")),
               (True, True, 3), "JSON view: shadow_mode, the shadow copy, leaky_bucket's burst")
    user = limits.get("edge.tenant_beta*.user", {})
    harness.eq((user.get("descriptors"), user.get("unit"), user.get("requests_per_unit"),
                user.get("replaces"), (user.get("policy") or {}).get("name")),
               ([{"key": "tenant", "value": "beta*"}, {"key": "user", "value": None}], "MINUTE",
                2, ["tenants"], "@envoy"),
               "JSON view: nested entries (prefix kept, any value null), a rate_limit's fields")
    host = limits.get("edge.host_*.example.*", {})
    harness.eq(host.get("descriptors"), [{"key": "host", "value": "*.example.*"}],
               "JSON view: a pattern with a leading and a later '*' as written")
    free = limits.get("mongo_cps.free", {})
    harness.eq((free.get("unlimited"), free.get("policy")), (True, None),
               "JSON view: unlimited, no policy")

    r = d.request("GET", "/rlconfig?format=xml", headers=AUTH, port=d.admin_port)
    harness.eq((r.status, r.json and r.json.get("error")), (400, "invalid_format"),
               "?format=xml: 400 invalid_format")
    r = d.request("HEAD", "/rlconfig", headers=AUTH, port=d.admin_port)
    harness.eq((r.status, r.body), (200, b""), "HEAD: 200, no body")

    # A reload changes the view.
    with open(os.path.join(envoy, "a.yaml"), "w") as f:
        f.write(ENVOY_A % 60)
    with open(os.path.join(envoy, "b.yaml"), "w") as f:
        f.write(ENVOY_B)
    d.send_signal(signal.SIGHUP)
    try:
        harness.wait_until(lambda: "added.k:" in text_view(d)[1], 10,
                           what="the new domain in /rlconfig")
    except TimeoutError as e:
        harness.diag(str(e))
    after = lines_of(text_view(d)[1])
    harness.eq(sorted(after), sorted(WANT_KEYS + ["added.k"]),
               "after SIGHUP: the new file's limit is listed")
    harness.eq((after.get("mongo_cps.database_default", ())[:2],
                after.get("added.k", ())[:2]), (("SECOND", 60), ("DAY", 9)),
               "after SIGHUP: the changed limit and the new one, as loaded")
    harness.eq(sorted(limits_of(json_view(d)[1])), sorted(WANT_KEYS + ["added.k"]),
               "after SIGHUP: the JSON view too")
    harness.eq(d.stop(), 0, "exits 0")


harness.run(main)
