# SPDX-License-Identifier: Apache-2.0
"""test_monitoring.py: deploy/prometheus/alerts.yaml and
deploy/grafana/ratelimitd.json name only what the daemon exports.

- `promtool check rules` accepts the rules and `promtool test rules`
  passes deploy/prometheus/alerts_test.yaml, which has a firing and a quiet
  case for every alert.
- A daemon with Redis and grpc_listen (so the Redis, per-node and gRPC
  families exist) is asked a check and an Envoy request; every metric name
  in every PromQL expression of the rules and of the dashboard (panels and
  variables) is a series of its live /metrics (a histogram by its _bucket,
  _sum or _count), and every label matched or grouped by is one those
  series carry (or job, instance, le).
- The dashboard has Grafana's shape: schemaVersion, uid, title, a
  Prometheus datasource variable that every panel and target uses, panels
  with a type, a gridPos and (but rows) targets with a refId and an expr.
- The alert threshold on checks in flight is 80 % of the max_inflight of
  deploy/kubernetes/'s policy files.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import Daemon  # noqa: E402

SRC = os.environ.get("RL_SRCDIR", ".")
PROM = os.path.join(SRC, "deploy", "prometheus")
DASHBOARD = os.path.join(SRC, "deploy", "grafana", "ratelimitd.json")
# Labels Prometheus adds when it scrapes, and the histogram's own.
SCRAPE_LABELS = {"job", "instance", "le"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan"}

POLICY = """policies:
  login:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1, window: 1h}
domains:
  - domain: edge
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 5}
"""


def promql(expr):
    """(metric names, {metric: labels matched}, labels grouped by) of a
    PromQL expression."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    matched = {}
    for name, body in re.findall(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}", e):
        matched.setdefault(name, set()).update(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", body))
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    grouped = set()
    for body in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e):
        grouped.update(re.findall(r"\w+", body))
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?", e):
        if not m.group(2) and m.group(1) not in KEYWORDS:
            names.add(m.group(1))
    return names, matched, grouped


def live_metrics(redis):
    """{sample name: set of label names} from a daemon's /metrics."""
    grpc = harness.free_port()
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True,
               extra="grpc_listen: 127.0.0.1:%d\n" % grpc).start()
    d.check("login", "a")
    d.check("login", "a")
    d.check("login", "a")  # a denial from the deny cache
    d.request("POST", "/json", json.dumps({"domain": "edge", "descriptors": [
        {"entries": [{"key": "path", "value": "/x"}]}]}))
    r = d.admin("/metrics")
    harness.eq(r.status, 200, "the daemon serves /metrics")
    families = promtext.parse(r.body.decode())
    out = {}
    for fam in families.values():
        for name, labels, _ in fam["samples"]:
            out.setdefault(name, set()).update(labels)
    harness.eq(d.stop(), 0, "the daemon exits 0")
    return out


def check_exprs(where, exprs, live):
    """Every name and label of every expression is live."""
    bad = []
    count = 0
    for what, expr in exprs:
        names, matched, grouped = promql(expr)
        count += len(names)
        labels = set(SCRAPE_LABELS)
        for n in names:
            if n not in live:
                bad.append("%s: %s is not exported" % (what, n))
            else:
                labels |= live[n]
        for n, ls in matched.items():
            for label in ls - live.get(n, set()) - SCRAPE_LABELS:
                bad.append("%s: %s has no label %s" % (what, n, label))
        for label in grouped - labels:
            bad.append("%s: no series of it has the label %s" % (what, label))
        if not names:
            bad.append("%s: no metric in %r" % (what, expr))
    harness.ok(not bad and count > 0, "%s: %d metric names in %d expressions, all exported with "
               "the labels used%s" % (where, count, len(exprs), ": " + "; ".join(bad) if bad else ""))


def test_promtool():
    if not shutil.which("promtool"):
        harness.skip("promtool not installed (Debian package prometheus; tools/test.sh installs it)")
        harness.skip("promtool not installed")
        return
    for argv in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts_test.yaml"]):
        res = subprocess.run(["promtool"] + argv, cwd=PROM, capture_output=True, text=True,
                             timeout=120)
        harness.eq(res.returncode, 0, "promtool %s: %s" % (" ".join(argv), (res.stdout + res.stderr)
                                                             .strip().replace("\n", " ")))


def main():
    if not harness.find_program("REDIS_SERVER", "redis-server"):
        harness.skip_all("redis-server not installed")
    with open(os.path.join(PROM, "alerts.yaml")) as f:
        rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    with open(os.path.join(PROM, "alerts_test.yaml")) as f:
        tests = yaml.safe_load(f)["tests"]
    with open(DASHBOARD) as f:
        dash = json.load(f)

    test_promtool()
    cases = [c for t in tests for c in t["alert_rule_test"]]
    for r in rules:
        mine = [c for c in cases if c["alertname"] == r["alert"]]
        harness.ok(any(c["exp_alerts"] for c in mine) and any(not c["exp_alerts"] for c in mine),
                   "alerts_test.yaml has a firing and a quiet case for %s" % r["alert"])

    # Grafana's shape.
    harness.ok(isinstance(dash.get("schemaVersion"), int) and dash.get("uid") and dash.get("title"),
               "the dashboard has schemaVersion, uid and title")
    variables = dash.get("templating", {}).get("list", [])
    ds = [v for v in variables if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    harness.ok(len(ds) == 1, "a Prometheus datasource variable")
    ds_ref = "${%s}" % ds[0]["name"] if ds else None
    panels = dash.get("panels", [])
    shape = []
    for p in panels:
        if not (p.get("type") and p.get("title") and {"h", "w", "x", "y"} <= set(p.get("gridPos", {}))):
            shape.append("panel %s: type, title, gridPos" % p.get("id"))
        if p.get("type") == "row":
            continue
        if p.get("datasource", {}).get("uid") != ds_ref:
            shape.append("panel %s: datasource" % p.get("title"))
        if not p.get("targets"):
            shape.append("panel %s: no targets" % p.get("title"))
        for t in p.get("targets", []):
            if not (t.get("refId") and t.get("expr")) or t.get("datasource", {}).get("uid") != ds_ref:
                shape.append("panel %s: a target without refId, expr or datasource" % p.get("title"))
    harness.ok(panels and not shape, "%d panels in Grafana's shape%s" % (
        len(panels), ": " + "; ".join(shape) if shape else ""))
    ids = [p.get("id") for p in panels]
    harness.eq(len(ids), len(set(ids)), "panel ids are unique")
    titles = " ".join(p.get("title", "").lower() for p in panels)
    for topic in ("decisions/s by policy and result", "latency quantiles", "redis node up",
                  "deny cache", "failure-mode", "reloads", "grpc"):
        harness.ok(topic in titles, "a panel on %s" % topic)

    # The thresholds follow the shipped policy files.
    for path in ("shared", "sidecar"):
        with open(os.path.join(SRC, "deploy", "kubernetes", path, "configmap.yaml")) as f:
            cfg = yaml.safe_load(yaml.safe_load(f)["data"]["ratelimitd.yaml"])
        rule = next(r for r in rules if r["alert"] == "RatelimitdInflightSaturated")
        threshold = float(re.search(r">\s*([\d.]+)\s*$", rule["expr"].strip()).group(1))
        harness.eq(threshold, 0.8 * cfg["max_inflight"],
                   "RatelimitdInflightSaturated fires at 80 %% of %s's max_inflight" % path)

    # Every name against a live daemon.
    redis = harness.RedisServer().start()
    live = live_metrics(redis)
    check_exprs("alerts.yaml", [(r["alert"], r["expr"]) for r in rules], live)
    exprs = [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]
    for v in variables:
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q or "")
        if m:
            exprs.append(("variable " + v["name"], m.group(1)))
            harness.ok(m.group(2) in SCRAPE_LABELS | live.get(m.group(1).split("{")[0], set()),
                       "variable %s lists a label the series has" % v["name"])
    check_exprs("ratelimitd.json", exprs, live)


harness.run(main)
