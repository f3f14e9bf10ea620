# SPDX-License-Identifier: Apache-2.0
"""test_openapi.py: the contract docs/openapi.yaml, and the validator
(openapi_check.py) through which daemon.py passes every answer the
integration tests receive.

- The pinned @redocly/cli of docs/openapi/ lints the contract with every
  warning an error, and fails on a broken copy of it (SKIP, naming what is
  missing, when docs/openapi/deps.sh has not run).
- The validator refuses what the contract does not describe: a status no
  response names, a required header missing (Allow on 405,
  WWW-Authenticate on 401, Cache-Control), a header no response names, a
  body of the wrong shape (a wrong type, a field too many or too few, an
  error code not in the list), the wrong Content-Type, a body on an answer
  to HEAD, and a real answer held against another path's contract.
- It accepts the real answers of a live daemon for every endpoint: /check
  (200, 429, 400, dry run), /auth/<policy> (200, skipped, the policy's
  deny_status 403, 404, a further path, HEAD), /json (200, 429), the admin
  API (GET, HEAD, DELETE, 400, 404, 405), /healthz, /readyz, /metrics (GET
  and HEAD), 404 for another path, 405 with Allow, 501 for an unknown
  method, 401 with WWW-Authenticate. Each goes through Daemon.request,
  which raises on an answer the contract does not describe.
- Every route of the daemon's table (src/front/http/http_routes.c, read by
  route_table.py) has its path and methods in the contract, and every
  operation lists itself every status its path can send: 404, 405 (unless
  the path takes every method), and each of `x-unrouted-responses`.
- Each route, asked live, answers as the contract says: with an unknown
  method (501), with a method it does not take (405 and the table's
  Allow), on the listener that does not serve it (404: the check routes on
  admin_listen, the others on listen), and the admin API on keys where
  listen does not serve it (404, no token and no admin_on_listen).
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import openapi_check  # noqa: E402
import route_table  # noqa: E402
from daemon import Daemon  # noqa: E402

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
LINT_DIR = os.path.join(TOP, "docs", "openapi")
TOKEN = "openapi-test-token"

POLICY = """\
policies:
  login:
    tiers:
      - {name: burst, algorithm: token_bucket, limit: 2, window: 1h}
  drip:
    tiers:
      - {name: drain, algorithm: leaky_bucket, limit: 10, window: 1m, burst: 3}
  api:
    key: "${header:X-Api-Key}"
    deny_status: 403
    tiers:
      - {name: minute, algorithm: gcra, limit: 1, window: 1h}
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: hour, requests_per_unit: 1}
"""


def lint():
    redocly = os.path.join(LINT_DIR, "node_modules", ".bin", "redocly")
    if not os.path.exists(redocly) or not shutil.which("node"):
        harness.skip("the OpenAPI lint needs node and docs/openapi/node_modules "
                     "(sh docs/openapi/deps.sh)")
        harness.skip("the OpenAPI lint needs node and docs/openapi/node_modules")
        return
    config = os.path.join(LINT_DIR, "redocly.yaml")
    env = dict(os.environ, REDOCLY_TELEMETRY="off", REDOCLY_SUPPRESS_UPDATE_NOTICE="true")

    def run(path):
        return subprocess.run([redocly, "lint", "--config", config, path], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)

    r = run(openapi_check.CONTRACT)
    if not harness.ok(r.returncode == 0, "redocly lint docs/openapi.yaml: no error, no warning"):
        harness.diag(r.stdout.decode("utf-8", "replace")[-4000:])
    # A copy whose 503 of /readyz lost its description (a required field):
    # the lint must be able to fail.
    with open(openapi_check.CONTRACT) as f:
        text = f.read()
    broken = text.replace("          description: Not ready, and why; or `too_many_connections` "
                          "(as on `/healthz`).\n", "", 1)
    assert broken != text
    path = os.path.join(harness.make_tempdir(), "openapi.yaml")
    with open(path, "w") as f:
        f.write(broken)
    harness.ok(run(path).returncode != 0, "the lint fails on a broken copy")


def refuses(desc, method, path, status, headers, body):
    try:
        openapi_check.validate(method, path, status, headers, body)
    except openapi_check.ContractError as e:
        harness.ok(True, "refused: %s (%s)" % (desc, str(e)[:160]))
        return
    harness.ok(False, "refused: %s" % desc)


def validator():
    js = {"Content-Type": "application/json", "Cache-Control": "no-store"}
    err = json.dumps({"error": "invalid_key", "message": "empty"}).encode()
    # A well-formed answer first, so the refusals below are the changes'.
    openapi_check.validate("POST", "/check", 400, js, err)
    harness.ok(True, "accepts a 400 invalid_key of /check")
    refuses("an undescribed status (418 on /check)", "POST", "/check", 418, js, err)
    refuses("an undescribed status (200 on another path)", "GET", "/nope", 200, js, err)
    refuses("401 on /healthz, which takes no token", "GET", "/healthz", 401,
            dict(js, **{"WWW-Authenticate": "Bearer"}), err)
    refuses("405 without Allow", "GET", "/check", 405, js,
            b'{"error":"method_not_allowed","message":"use POST on /check"}')
    refuses("401 without WWW-Authenticate", "POST", "/check", 401, js,
            b'{"error":"unauthorized","message":"token"}')
    refuses("no Cache-Control", "POST", "/check", 400, {"Content-Type": "application/json"}, err)
    refuses("a header no response names", "POST", "/check", 400, dict(js, **{"X-Foo": "1"}), err)
    refuses("a header value off its schema (X-RateLimit-Limit: ten)", "POST", "/check", 429,
            dict(js, **{"X-RateLimit-Limit": "ten"}),
            b'{"allowed":false,"limit":1,"remaining":0,"reset_ms":5,"retry_after_ms":5,'
            b'"checks":[{"policy":"p","key":"k","allowed":false,"tiers":[{"name":"t",'
            b'"algorithm":"gcra","allowed":false,"limit":1,"remaining":0,"reset_ms":5,'
            b'"retry_after_ms":5}]}]}')
    refuses("a body of the wrong type (allowed: \"yes\")", "POST", "/check", 200, js,
            b'{"allowed":"yes","limit":1,"remaining":0,"reset_ms":0,"retry_after_ms":0,'
            b'"checks":[]}')
    refuses("a body with a field too many", "POST", "/check", 400, js,
            b'{"error":"invalid_key","message":"m","hint":"x"}')
    refuses("a body with a field missing (no message)", "POST", "/check", 400, js,
            b'{"error":"invalid_key"}')
    refuses("an error code not in the list", "POST", "/check", 400, js,
            b'{"error":"oops","message":"m"}')
    refuses("a body that is not JSON", "POST", "/check", 400, js, b"oops")
    refuses("the wrong Content-Type", "GET", "/healthz", 200,
            {"Content-Type": "text/html", "Cache-Control": "no-store"}, b'{"status":"ok"}')
    refuses("a body on an answer to HEAD", "HEAD", "/healthz", 200, js, b'{"status":"ok"}')
    refuses("a tier without its algorithm", "GET", "/v1/keys/p/k", 200, js,
            b'{"policy":"p","key":"k","allowed":true,"tiers":[{"name":"t","limit":1,'
            b'"remaining":1,"reset_ms":0,"allowed":true,"retry_after_ms":0}]}')
    # An answer read off a raw stream, its request unknown: some response
    # of the contract with its status must describe it.
    openapi_check.validate_any(400, js, err)
    harness.ok(True, "validate_any accepts a 400 invalid_key whatever the request")
    for desc, status, headers, body in (
            ("a status no response has (502)", 502, js, err),
            ("a 400 with an unknown error code", 400, js,
             json.dumps({"error": "nope", "message": "x"}).encode()),
            ("a 200 whose body no response has", 200, js, b'{"what":1}')):
        try:
            openapi_check.validate_any(status, headers, body)
            harness.ok(False, "validate_any refuses %s" % desc)
        except openapi_check.ContractError as e:
            harness.ok(True, "validate_any refuses %s (%s)" % (desc, str(e)[:120]))


def live(d, token_daemon):
    """Every endpoint of a real daemon: d.request raises on an answer the
    contract does not describe, so reaching each check is the proof."""
    def eq(r, status, desc):
        harness.eq(r.status, status, "%s: %d, as the contract describes" % (desc, status))
        return r

    eq(d.check("login", "a"), 200, "POST /check allowed")
    eq(d.check("login", "a", dry_run=True), 200, "POST /check dry run")
    eq(d.check("drip", "a"), 200, "POST /check leaky_bucket (delay_ms)")
    d.check("login", "a")
    eq(d.check("login", "a"), 429, "POST /check denied")
    eq(d.check("login", "b", cost=5), 429, "POST /check cost over the capacity (no Retry-After)")
    eq(d.check(checks=[{"policy": "login", "key": "c"}, {"policy": "drip", "key": "c"}]), 200,
       "POST /check, two checks")
    eq(d.request("POST", "/check", "{"), 400, "POST /check invalid_json")
    eq(d.check("nope", "a"), 400, "POST /check unknown_policy")
    eq(d.request("GET", "/check"), 405, "GET /check (Allow)")
    eq(d.request("BREW", "/check"), 501, "BREW /check")
    eq(d.request("GET", "/nope"), 404, "GET /nope")
    key = {"X-Api-Key": "k1"}
    eq(d.request("GET", "/auth/api", headers=key), 200, "GET /auth/api allowed")
    eq(d.request("POST", "/auth/api/v1/users?id=3", "x", headers=key), 403,
       "POST /auth/api/v1/users denied with deny_status")
    eq(d.request("HEAD", "/auth/api", headers=key), 403, "HEAD /auth/api denied")
    eq(d.request("GET", "/auth/api"), 200, "GET /auth/api without the key: skipped")
    eq(d.request("GET", "/auth/nope"), 404, "GET /auth/nope")
    eq(d.request("GET", "/auth/api", headers={"X-Api-Key": "k2", "X-RateLimit-Cost": "x"}), 400,
       "GET /auth/api invalid_cost")
    rls = json.dumps({"domain": "edge", "descriptors": [
        {"entries": [{"key": "remote_address", "value": "203.0.113.7"}]}]})
    eq(d.request("POST", "/json", rls), 200, "POST /json OK")
    eq(d.request("POST", "/json", rls), 429, "POST /json OVER_LIMIT")
    eq(d.request("POST", "/json", "[]"), 400, "POST /json invalid_request")
    eq(d.admin("/v1/keys/login/a"), 200, "GET /v1/keys/login/a")
    eq(d.admin("/v1/keys/drip/a"), 200, "GET /v1/keys/drip/a (delay_ms)")
    eq(d.admin("/v1/keys/login/a", method="HEAD"), 200, "HEAD /v1/keys/login/a")
    eq(d.admin("/v1/keys/login/a", method="DELETE"), 200, "DELETE /v1/keys/login/a")
    eq(d.admin("/v1/keys/login/%zz", method="GET"), 400, "GET /v1/keys/login/%zz invalid_path")
    eq(d.admin("/v1/keys/nope/a"), 404, "GET /v1/keys/nope/a")
    eq(d.admin("/v1/keys/login/a", method="POST"), 405, "POST /v1/keys/login/a (Allow)")
    for path in ("/healthz", "/readyz", "/metrics"):
        eq(d.admin(path), 200, "GET " + path)
        eq(d.admin(path, method="HEAD"), 200, "HEAD " + path)
    eq(d.request("GET", "/healthz"), 404, "GET /healthz on the check port of an admin_listen")
    eq(token_daemon.check("login", "a"), 401, "POST /check without the token")
    eq(token_daemon.check("login", "a", headers={"Authorization": "Bearer " + TOKEN}), 200,
       "POST /check with the token")

    # A real answer held against another path's contract is refused.
    r = d.admin("/healthz")
    refuses("/healthz's real answer as /readyz's", "GET", "/readyz", r.status, r.headers, r.body)
    r = d.check("drip", "z")
    refuses("/check's real answer as /json's", "POST", "/json", r.status, r.headers, r.body)


def listed(op, code):
    """True if the operation describes an answer with status code."""
    return openapi_check._lookup(op.get("responses", {}), code) is not None


def coverage():
    """Every route is in the contract, and every operation lists every
    status its path can send."""
    spec = openapi_check.load()
    unrouted = sorted(spec["x-unrouted-responses"])
    harness.ok("404" in unrouted and "405" not in unrouted,
               "x-unrouted-responses has 404, not 405 (a path no route serves is never 405): %s"
               % unrouted)
    for route in route_table.routes():
        path = route_table.example(route)
        item = next((item for rx, _t, item in spec["_routes"] if rx.match(path)), None)
        if not harness.ok(item is not None, "%s (%s) is a path of the contract" % (path, route)):
            continue
        ops = {m.upper(): op for m, op in item.items()
               if m in openapi_check.METHODS and isinstance(op, dict)}
        want = route.methods or [m.upper() for m in openapi_check.METHODS]
        harness.eq(sorted(ops), sorted(want), "%s: the contract's methods are the table's" % path)
        for method, op in sorted(ops.items()):
            codes = ["404"] + unrouted + ([] if route.methods is None else ["405"])
            missing = sorted({c for c in codes if not listed(op, c)})
            harness.eq(missing, [], "%s %s lists 404, 405 and %s itself"
                       % (method, path, "/".join(unrouted)))


def other_method(route):
    """A method the daemon knows that route does not take."""
    return next(m for m in ("GET", "POST", "PUT") if m not in route.methods)


def every_route(d, off):
    """d has admin_listen; off has neither, nor a token, nor admin_on_listen.
    Each answer goes through Daemon.request, held against the contract."""
    for route in route_table.routes():
        path = route_table.example(route)
        method = route.methods[0] if route.methods else "GET"
        own, other = ((d.port, d.admin_port) if route.role == "CHECKS"
                      else (d.admin_port, d.port))
        r = d.request("BREW", path, port=own)
        harness.eq((r.status, (r.json or {}).get("error")), (501, "not_implemented"),
                   "BREW %s: 501, as the contract describes" % path)
        if route.methods is not None:
            r = d.request(other_method(route), path, port=own)
            harness.eq((r.status, r.headers.get("allow")), (405, route.allow),
                       "%s %s: 405 with Allow: %s, as the contract describes"
                       % (other_method(route), path, route.allow))
        r = d.request(method, path, port=other)
        harness.eq((r.status, (r.json or {}).get("error")), (404, "not_found"),
                   "%s %s on the %s listener: 404, as the contract describes"
                   % (method, path, "admin" if route.role == "CHECKS" else "check"))
        if route.role == "KEYS":
            # The body is the disabled admin API's own message: not asserted.
            harness.eq(off.request(method, path).status, 404,
                       "%s %s on listen without a token or admin_on_listen: 404, as the "
                       "contract describes" % (method, path))


def main():
    lint()
    validator()
    coverage()
    tokfile = os.path.join(harness.make_tempdir(), "token")
    with open(tokfile, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(tokfile, 0o600)
    d = Daemon(None, POLICY, admin=True, extra="backend: memory\n").start()
    t = Daemon(None, POLICY, extra="backend: memory\nauth_token_file: %s\n" % tokfile).start()
    off = Daemon(None, POLICY, extra="backend: memory\n").start()
    live(d, t)
    every_route(d, off)
    harness.eq(d.stop(), 0, "the daemon exits cleanly")
    harness.eq(t.stop(), 0, "the token daemon exits cleanly")
    harness.eq(off.stop(), 0, "the daemon without an admin API exits cleanly")
    harness.done()


if __name__ == "__main__":
    harness.run(main)
