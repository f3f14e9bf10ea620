# SPDX-License-Identifier: Apache-2.0
"""test_defaults.py: safe defaults and the small things a user hits, each
against the real daemon:

- the admin API on keys (/v1/keys/) is served on `listen` only with an
  auth_token_file or `admin_on_listen: true` (else 404, whose message names
  the fields that turn it on, and the start line warns once), always on
  admin_listen; a reload applies admin_on_listen;
- every status is counted under its own label (403 from deny_status, 501),
  never "other";
- backend: memory exports no Redis series, logs clock=local, and warns
  about a redis: section at its line (-t and the start line);
- an unknown method is 501 with a JSON body, a known one not allowed 405
  with Allow;
- messages name what they are about (the policy, max_body, an empty body),
  and --check-config counts in the singular and the plural;
- the start line names every listener, a reload line what changed, and
  Redis down for seconds logs one "connect failed" line per connection, the
  next ones folded into a count.

Most cases run with backend: memory (no Redis needed); the last needs
redis-server."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import promtext  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

POLICY = """policies:
  api:
    key: "${header:X-Key}"
    tiers: [{name: m, algorithm: fixed_window, limit: 1, window: 1h}]
"""
MEMORY = "backend: memory\n"
NO_REDIS = "redis://127.0.0.1:1/0"
TOKEN = "t0ken-for-the-defaults-test"
AUTH = {"Authorization": "Bearer " + TOKEN}
WARNING = "the admin API (/v1/keys/) is not served"


def read(path):
    with open(path) as f:
        return f.read()


def started_line(d):
    return next((l for l in d.logs().splitlines() if "ratelimitd started" in l), "")


def test_admin_default():
    d = Daemon(NO_REDIS, POLICY, extra=MEMORY).start()
    for method, path in (("GET", "/v1/keys/api/k"), ("DELETE", "/v1/keys/api/k"),
                         ("GET", "/rlconfig")):
        r = d.request(method, path)
        harness.eq((r.status, (r.json or {}).get("error")), (404, "not_found"),
                   "no token, no admin_listen: %s %s is 404 on listen" % (method, path))
        message = (r.json or {}).get("message", "")
        harness.ok(all(f in message for f in ("admin_listen", "auth_token_file",
                                              "admin_on_listen: true")),
                   "its message says which field turns the admin API on: %r" % message)
    harness.eq(d.request("GET", "/nowhere").json["message"], "no such path",
               "a path served nowhere is still just not found")
    harness.eq(d.request("GET", "/healthz").status, 200, "listen still serves /healthz")
    harness.eq(d.logs().count(WARNING), 1, "the start warns once that /v1/keys/ is not served")
    # admin_on_listen: true, by a reload: now served without a token.
    d.write_config(POLICY, extra=MEMORY + "admin_on_listen: true\n")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "fields_changed=admin_on_listen" in d.logs(), 10,
                       what="the reload line naming admin_on_listen")
    r = d.request("GET", "/v1/keys/api/k")
    harness.eq(r.status, 200, "admin_on_listen: true (reloaded): GET /v1/keys/ served on listen")
    harness.eq(d.request("DELETE", "/v1/keys/api/k").status, 200,
               "admin_on_listen: true: DELETE served without a token")
    d.write_config(POLICY, extra=MEMORY)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: d.logs().count("policies reloaded") == 2, 10, what="second reload")
    harness.eq(d.request("DELETE", "/v1/keys/api/k").status, 404,
               "admin_on_listen removed by a reload: 404 again")
    harness.eq(d.logs().count(WARNING), 1, "still one warning in all")
    harness.eq(d.stop(), 0, "exits 0")


def test_admin_token():
    d = Daemon(NO_REDIS, POLICY, extra=MEMORY + "auth_token_file: %s\n" % harness.token_file(TOKEN)).start()
    r = d.request("DELETE", "/v1/keys/api/k")
    harness.eq(r.status, 401, "auth_token_file: /v1/keys/ on listen asks for the token")
    harness.eq(d.request("DELETE", "/v1/keys/api/k", headers=AUTH).status, 200,
               "auth_token_file: /v1/keys/ on listen with the token")
    harness.ok(WARNING not in d.logs(), "no warning when a token guards listen")
    harness.eq(d.stop(), 0, "exits 0")


def test_admin_listen():
    d = Daemon(NO_REDIS, POLICY, extra=MEMORY, admin=True).start()
    harness.eq(d.request("DELETE", "/v1/keys/api/k").status, 404,
               "admin_listen: /v1/keys/ is 404 on listen")
    harness.eq(d.request("DELETE", "/v1/keys/api/k", port=d.admin_port).status, 200,
               "admin_listen: /v1/keys/ served there without a token")
    harness.ok(WARNING not in d.logs(), "no warning with admin_listen")
    line = started_line(d)
    harness.ok("listen=127.0.0.1:%d" % d.port in line
               and "admin_listen=127.0.0.1:%d" % d.admin_port in line,
               "the start line names listen and admin_listen: %s" % line)
    harness.eq(d.stop(), 0, "exits 0")


def test_statuses_and_messages():
    d = Daemon(NO_REDIS, POLICY, extra=MEMORY + "deny_status: 403\nmax_body: 100\n").start()
    harness.eq(d.request("GET", "/auth/api", headers={"X-Key": "a"}).status, 200, "first allowed")
    r = d.request("GET", "/auth/api", headers={"X-Key": "a"})
    harness.eq(r.status, 403, "deny_status: 403 on the second")

    r = d.request("BREW", "/check", body="{}")
    harness.eq((r.status, (r.json or {}).get("error")), (501, "not_implemented"),
               "BREW /check: 501 with a JSON body")
    r = d.request("PUT", "/check", body="{}")
    harness.eq((r.status, r.headers.get("allow")), (405, "POST"), "PUT /check: 405 with Allow")

    r = d.request("GET", "/auth/nope")
    harness.eq((r.status, r.json["message"]), (404, 'no policy named "nope"'),
               "/auth/nope names the policy")
    d2 = Daemon(NO_REDIS, POLICY, extra=MEMORY + "admin_on_listen: true\n").start()
    r = d2.request("GET", "/v1/keys/nope/k")
    harness.eq((r.status, r.json["message"]), (404, 'no policy named "nope"'),
               "the admin API names the unknown policy")
    harness.eq(d2.stop(), 0, "exits 0")
    r = d.request("POST", "/check", body="x" * 200)
    harness.eq((r.status, r.json["message"]),
               (413, "the request body is larger than max_body (100 bytes)"),
               "the 413 gives the limit")
    r = d.request("POST", "/check", body="")
    harness.eq((r.status, r.json["message"]), (400, "empty body: a JSON object is required"),
               "an empty body says so")

    m = promtext.parse(d.admin("/metrics").body.decode())
    v = lambda status: promtext.value(m, "ratelimitd_http_responses_total", status=status)
    harness.eq((v("403"), v("501"), v("405"), v("413")), (1, 1, 1, 1),
               "403, 501, 405, 413 each under its own label")
    harness.ok("status=\"other\"" not in d.admin("/metrics").body.decode(),
               "no status=\"other\" series")
    harness.eq(d.stop(), 0, "exits 0")


def test_memory():
    d = Daemon(NO_REDIS, POLICY, extra=MEMORY).start()
    text = d.admin("/metrics").body.decode()
    harness.ok("ratelimitd_redis" not in text, "backend: memory: no ratelimitd_redis_* series")
    line = started_line(d)
    harness.ok("backend=memory" in line and "clock=local" in line and "clock=redis" not in line,
               "the start line logs the memory backend's own clock: %s" % line)
    harness.eq(d.stop(), 0, "exits 0")

    path = os.path.join(harness.make_tempdir(), "p.yaml")
    with open(path, "w") as f:
        f.write("backend: memory\nredis:\n  url: redis://127.0.0.1:6379/0\n" + POLICY)
    res = subprocess.run([BINARY, "--check-config", "--config", path], capture_output=True,
                         text=True)
    want = "%s:3:3: redis: not used with backend: memory" % path
    harness.ok(res.returncode == 0 and "warning: " + want in res.stderr,
               "-t warns about a redis: section with backend: memory, at its line: %s"
               % res.stderr.strip())
    log = os.path.join(os.path.dirname(path), "log")
    port = harness.free_port()
    with open(path, "w") as f:
        f.write("listen: 127.0.0.1:%d\nbackend: memory\nredis:\n  url: redis://127.0.0.1:6379/0\n"
                % port + POLICY)
    proc = harness.spawn([BINARY, "--config", path], log)
    harness.wait_until(lambda: "ratelimitd started" in read(log), 10, what="the start")
    harness.stop_process(proc)
    text = read(log)
    harness.ok("level=warn" in text and "%s:4:3: redis: not used" % path in text,
               "the daemon logs the warning at start")


def test_plurals():
    tmp = harness.make_tempdir()
    for n, want in ((1, "1 policy, 0 domains"), (2, "2 policies, 0 domains")):
        path = os.path.join(tmp, "p%d.yaml" % n)
        with open(path, "w") as f:
            f.write(MEMORY + "policies:\n" + "".join(
                "  p%d: {tiers: [{name: m, algorithm: fixed_window, limit: 1, window: 1h}]}\n" % i
                for i in range(n)))
        res = subprocess.run([BINARY, "-t", "-c", path], capture_output=True, text=True)
        harness.eq(res.stdout.strip(), "%s: ok, %s" % (path, want), "-t: %s" % want)


def test_start_and_reload_lines():
    grpc = harness.free_port()
    d = Daemon(NO_REDIS, POLICY, extra=MEMORY + "grpc_listen: 127.0.0.1:%d\n" % grpc).start()
    harness.ok("grpc_listen=127.0.0.1:%d" % grpc in started_line(d),
               "the start line names grpc_listen")
    d.write_config(POLICY.replace("limit: 1,", "limit: 2,")
                   + "  extra: {tiers: [{name: m, algorithm: gcra, limit: 1, window: 1s}]}\n",
                   extra=MEMORY + "grpc_listen: 127.0.0.1:%d\nmax_body: 1000\n" % grpc)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "policies reloaded" in d.logs(), 10, what="the reload line")
    line = next(l for l in d.logs().splitlines() if "policies reloaded" in l)
    harness.ok("fields_changed=max_body" in line and "policies_added=extra" in line
               and "policies_changed=api" in line and "policies_removed" not in line,
               "the reload line names what changed: %s" % line)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: d.logs().count("policies reloaded") == 2, 10, what="2nd reload")
    line = [l for l in d.logs().splitlines() if "policies reloaded" in l][1]
    harness.ok("changes=none" in line, "a reload of the same file says so: %s" % line)
    harness.eq(d.stop(), 0, "exits 0")


def test_redis_down(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY).start()
    before = len(d.logs().splitlines())
    redis.stop()
    time.sleep(5)
    lines = d.logs().splitlines()[before:]
    failed = [l for l in lines if "redis connect failed" in l]
    roles = {l.split("role=")[1].split()[0] for l in failed}
    # Each connection retries every 50 ms to 2 s: about 10 attempts in 5 s.
    harness.ok(len(failed) <= 2 * len(roles) and len(failed) >= 1,
               "Redis down 5 s: %d 'connect failed' lines for %d connections" % (len(failed),
                                                                                   len(roles)))
    redis.restart()
    harness.wait_until(lambda: d.admin("/readyz").status == 200, 15, what="ready again")
    harness.wait_until(lambda: "failed_attempts=" in d.logs(), 10,
                       what="a connected line with failed_attempts")
    harness.ok(any("redis connected" in l and "failed_attempts=" in l
                   for l in d.logs().splitlines()[before:]),
               "the connected line counts the failed attempts")
    harness.eq(d.stop(), 0, "exits 0")


def main():
    test_admin_default()
    test_admin_token()
    test_admin_listen()
    test_statuses_and_messages()
    test_memory()
    test_plurals()
    test_start_and_reload_lines()
    if not harness.find_program("REDIS_SERVER", "redis-server"):
        harness.skip("redis-server not found: the Redis-down log test")
        return
    redis = harness.RedisServer().start()
    test_redis_down(redis)


harness.run(main)
