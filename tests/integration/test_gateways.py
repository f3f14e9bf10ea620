# SPDX-License-Identifier: Apache-2.0
"""test_gateways.py: ratelimitd behind the real nginx (auth_request) and the
real Caddy (forward_auth), with the configurations shipped in conf/ and shown
in docs/gateways.md, used as they are but for addresses:

- conf/ratelimitd-gateway.yaml: its `listen:` and `url:` lines point at a
  free port and the test's redis-server, its Redis `timeout:` is 2s (a
  loaded test machine must not turn a slow reply into failure_mode's
  answer); for Caddy its `deny_status: 403` line is dropped, as the file's
  comment says to do; in a second run of each gateway, `missing_key:
  shared` becomes `skip`.
- conf/nginx-auth-request.conf: 127.0.0.1:8080 (ratelimitd), 127.0.0.1:8000
  (the service) and `listen 80` are replaced with free ports; the file is
  included in a minimal nginx.conf (events, temp paths in a temp dir), as
  Debian's nginx.conf includes conf.d/*.conf.
- conf/Caddyfile: the environment sets BIND, PORT, RATELIMITD, APP and
  CADDY_ADMIN.

$NGINX and $CADDY name the programs (default: nginx and caddy on PATH or in
/usr/sbin); a gateway that is not installed is a skipped test point.

Each gateway gets its own redis-server and ratelimitd. The service behind
it is a Python HTTP server recording what reaches it. Clients connect from
127.0.0.2 (an untrusted client) or from 127.0.0.1 (a trusted load balancer
in front of the gateway, passing X-Forwarded-For). Checked: allowed requests
reach the service with X-RateLimit-* copied, the client sees them too;
after exactly the limit the client gets 429 with Retry-After and the
service sees nothing; a client cannot pick its key with X-Forwarded-For or
its cost with X-RateLimit-Cost; addresses behind the trusted proxy get a
counter each; the API-key policy counts per X-Api-Key, requests without it
share one counter; a request body is not sent to ratelimitd; the
gateway's map of costs applies; with Redis
gone, the failure_mode: open policy lets requests through and the closed
one answers 503 with Retry-After. With missing_key: skip, a request
without the key's header is served uncounted and nobody gets figures (Caddy
2.6.2 would copy its placeholder's text)."""
import http.client
import http.server
import json
import os
import shutil
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR", ".")
PER_IP_LIMIT = 60
API_KEY_LIMIT = 120


def conf_text(name):
    with open(os.path.join(SRCDIR, "conf", name)) as f:
        return f.read()


def substitute(text, old, new, what):
    """text with old replaced by new; old must occur exactly once, so that a
    change of the shipped file that the test no longer matches fails here
    rather than testing something else."""
    if text.count(old) != 1:
        raise RuntimeError("%s: %r occurs %d times, want once" % (what, old, text.count(old)))
    return text.replace(old, new)


class Service:
    """The protected service: answers 200 to anything and records each
    request's method, path, headers (lower-case names) and body length."""

    def __init__(self):
        self.seen = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with outer.lock:
                    outer.seen.append({
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": len(body),
                    })
                out = b"served\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_HEAD = handle_any

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        harness.at_exit(self.server.shutdown)

    def count(self):
        with self.lock:
            return len(self.seen)

    def last(self):
        with self.lock:
            return self.seen[-1] if self.seen else None


def start_ratelimitd(redis, for_caddy, missing_key_skip=False):
    port = harness.free_port()
    d = Daemon("unix:" + redis.socket_path, "", port=port)
    text = conf_text("ratelimitd-gateway.yaml")
    text = substitute(text, "listen: 127.0.0.1:8080\n", "listen: 127.0.0.1:%d\n" % port,
                      "ratelimitd-gateway.yaml")
    text = substitute(text, "url: redis://127.0.0.1:6379/0\n",
                      "url: unix:%s\n" % redis.socket_path, "ratelimitd-gateway.yaml")
    # On a loaded test machine (or under valgrind) a Redis reply can take
    # longer than 50 ms, and failure_mode would answer instead.
    text = substitute(text, "timeout: 50ms\n", "timeout: 2s\n", "ratelimitd-gateway.yaml")
    if for_caddy:
        text = substitute(text, "deny_status: 403\n", "", "ratelimitd-gateway.yaml")
    if missing_key_skip:
        text = substitute(text, "missing_key: shared\n", "missing_key: skip\n",
                          "ratelimitd-gateway.yaml")
    with open(d.config, "w") as f:
        f.write(text)
    return d.start()


def wait_listening(proc, port, log, what):
    def up():
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s:\n%s" % (what, proc.returncode,
                                                           harness.tail(log)))
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    try:
        harness.wait_until(up, timeout=15, what=what + " to listen")
    except TimeoutError as e:
        raise RuntimeError("%s\n%s" % (e, harness.tail(log)))


def start_nginx(binary, rl_port, app_port):
    tmp = harness.make_tempdir("rl-nginx-")
    port = harness.free_port()
    conf = conf_text("nginx-auth-request.conf")
    what = "nginx-auth-request.conf"
    conf = substitute(conf, "server 127.0.0.1:8080;", "server 127.0.0.1:%d;" % rl_port, what)
    conf = substitute(conf, "server 127.0.0.1:8000;", "server 127.0.0.1:%d;" % app_port, what)
    conf = substitute(conf, "listen 80;", "listen 127.0.0.1:%d;" % port, what)
    with open(os.path.join(tmp, "ratelimitd.conf"), "w") as f:
        f.write(conf)
    temps = "".join("    %s_temp_path %s/%s;\n" % (t, tmp, t)
                    for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    main = (
        # As root, nginx's workers would run as nobody, who cannot enter the
        # private temp dir.
        ("user root root;\n" if os.geteuid() == 0 else "")
        + "worker_processes 1;\n"
        "pid %s/nginx.pid;\n"
        "error_log %s/error.log info;\n"
        "events { worker_connections 256; }\n"
        "http {\n"
        "    access_log %s/access.log;\n"
        "%s"
        "    include %s/ratelimitd.conf;\n"
        "}\n" % (tmp, tmp, tmp, temps, tmp))
    with open(os.path.join(tmp, "nginx.conf"), "w") as f:
        f.write(main)
    log = os.path.join(tmp, "stderr.log")
    # -e: nginx opens its compiled-in error log before reading the config,
    # which an unprivileged user may not write.
    argv = [binary, "-e", os.path.join(tmp, "error.log"), "-p", tmp,
            "-c", os.path.join(tmp, "nginx.conf"), "-g", "daemon off;"]
    proc = harness.spawn(argv, log)
    wait_listening(proc, port, log, "nginx")
    return port, os.path.join(tmp, "error.log")


def start_caddy(binary, rl_port, app_port):
    tmp = harness.make_tempdir("rl-caddy-")
    port = harness.free_port()
    env = dict(os.environ,
               HOME=tmp, XDG_DATA_HOME=os.path.join(tmp, "data"),
               XDG_CONFIG_HOME=os.path.join(tmp, "config"),
               BIND="127.0.0.1", PORT=str(port),
               RATELIMITD="127.0.0.1:%d" % rl_port,
               APP="127.0.0.1:%d" % app_port,
               CADDY_ADMIN="off")
    log = os.path.join(tmp, "caddy.log")
    proc = harness.spawn([binary, "run", "--config", os.path.join(SRCDIR, "conf", "Caddyfile"),
                          "--adapter", "caddyfile"], log, env=env)
    wait_listening(proc, port, log, "caddy")
    return port, log


class Client:
    """HTTP to the gateway from a chosen loopback source address."""

    def __init__(self, port):
        self.port = port
        # Every X-RateLimit-* or Retry-After header of every answer that is
        # empty: a gateway copying what ratelimitd did not send.
        self.empty = []

    def get(self, path, source="127.0.0.2", headers=None, method="GET", body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10,
                                          source_address=(source, 0))
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            self.empty += ["%s %s: %s" % (method, path, k) for k, v in r.getheaders()
                           if k.lower().startswith(("x-ratelimit-", "retry-after"))
                           and not v.strip()]
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            conn.close()


def int_header(headers, name):
    try:
        return int(headers.get(name))
    except (TypeError, ValueError):
        return None


def check_gateway(name, client, service, redis, deny_body):
    """The behaviour both gateways must show, on their own stack."""
    t = name + ": "

    # Allowed: the service sees the figures, the client too.
    status, headers, _ = client.get("/hello")
    seen = service.last()
    harness.eq(status, 200, t + "an allowed request is served")
    harness.ok(seen is not None and seen["path"] == "/hello", t + "it reached the service")
    seen_h = seen["headers"] if seen else {}
    harness.eq((seen_h.get("x-ratelimit-limit"), seen_h.get("x-ratelimit-remaining")),
               (str(PER_IP_LIMIT), str(PER_IP_LIMIT - 1)),
               t + "the service gets X-RateLimit-Limit and -Remaining from ratelimitd")
    harness.ok(int_header(seen_h, "x-ratelimit-reset") is not None,
               t + "the service gets X-RateLimit-Reset")
    harness.eq((headers.get("x-ratelimit-limit"), headers.get("x-ratelimit-remaining")),
               (str(PER_IP_LIMIT), str(PER_IP_LIMIT - 1)),
               t + "the client gets X-RateLimit-Limit and -Remaining")
    harness.ok("retry-after" not in headers, t + "no Retry-After while allowed")

    # A forged figure or cost from the caller goes nowhere (cost 0 would
    # pass uncounted).
    status, headers, _ = client.get("/hello", headers={"X-RateLimit-Cost": "0",
                                                       "X-RateLimit-Remaining": "999"})
    seen_h = service.last()["headers"]
    harness.eq((status, headers.get("x-ratelimit-remaining"), seen_h.get("x-ratelimit-remaining")),
               (200, str(PER_IP_LIMIT - 2), str(PER_IP_LIMIT - 2)),
               t + "X-RateLimit-Cost from the caller is dropped (cost 1), a forged "
               "X-RateLimit-Remaining is replaced")

    # Exactly the limit, then 429 with Retry-After, and the service sees
    # nothing more.
    statuses = []
    for _ in range(PER_IP_LIMIT - 2):
        statuses.append(client.get("/hello")[0])
    harness.eq(statuses, [200] * (PER_IP_LIMIT - 2),
               t + "requests up to the limit (%d) are served" % PER_IP_LIMIT)
    served = service.count()
    status, headers, body = client.get("/hello")
    harness.eq(status, 429, t + "request %d gets 429" % (PER_IP_LIMIT + 1))
    ra = int_header(headers, "retry-after")
    harness.ok(ra is not None and 1 <= ra <= 60, t + "with Retry-After in 1..60 s (%r)" % ra)
    harness.eq((headers.get("x-ratelimit-limit"), headers.get("x-ratelimit-remaining")),
               (str(PER_IP_LIMIT), "0"), t + "with X-RateLimit-Limit and Remaining: 0")
    harness.ok(deny_body(body), t + "the denial's body (%r)" % body[:120])
    harness.eq(service.count(), served, t + "a denied request does not reach the service")

    # The client cannot move to another counter with X-Forwarded-For: its
    # own address (untrusted) is the right-most.
    status, _, _ = client.get("/hello", headers={"X-Forwarded-For": "198.51.100.9"})
    harness.eq(status, 429, t + "a forged X-Forwarded-For from an untrusted client changes nothing")

    # Behind a trusted load balancer (127.0.0.1): each address in
    # X-Forwarded-For counts apart.
    def via_lb(addr):
        s, h, _ = client.get("/hello", source="127.0.0.1", headers={"X-Forwarded-For": addr})
        return s, h.get("x-ratelimit-remaining")

    first = via_lb("203.0.113.7")
    other = via_lb("203.0.113.8")
    again = via_lb("203.0.113.7")
    harness.eq([first, other, again],
               [(200, str(PER_IP_LIMIT - 1)), (200, str(PER_IP_LIMIT - 1)),
                (200, str(PER_IP_LIMIT - 2))],
               t + "two clients behind the trusted proxy have a counter each")

    # The API-key policy: per X-Api-Key, whichever address it comes from;
    # without the header one shared counter.
    def api(key, source="127.0.0.2"):
        hdrs = {"X-Api-Key": key} if key is not None else {}
        s, h, _ = client.get("/api/items", source=source, headers=hdrs)
        return s, h.get("x-ratelimit-remaining")

    got = [api("k1"), api("k1"), api("k2"), api("k1", source="127.0.0.1"), api(None), api(None)]
    n = API_KEY_LIMIT
    harness.eq(got, [(200, str(n - 1)), (200, str(n - 2)), (200, str(n - 1)),
                     (200, str(n - 3)), (200, str(n - 1)), (200, str(n - 2))],
               t + "/api/ counts per X-Api-Key (not per address); requests without one share "
               "one counter")
    harness.eq(service.last()["headers"].get("x-ratelimit-limit"), str(API_KEY_LIMIT),
               t + "the service behind /api/ gets the API-key policy's limit")

    # A request body reaches the service and is not sent to ratelimitd
    # (which would refuse one over max_body).
    # The gateway's map makes it cost 5.
    big = b"x" * 100000
    status, headers, _ = client.get("/api/upload", method="POST", body=big,
                                    headers={"X-Api-Key": "k3", "Content-Type": "text/plain"})
    seen = service.last()
    harness.eq((status, seen["method"], seen["path"], seen["body"]),
               (200, "POST", "/api/upload", len(big)),
               t + "a POST with a 100 kB body is checked and served whole")
    harness.eq(headers.get("x-ratelimit-remaining"), str(API_KEY_LIMIT - 5),
               t + "/api/upload costs 5, as the gateway's map says")

    # Redis gone: failure_mode open lets requests through, closed is 503
    # with Retry-After.
    redis.stop()
    status, _, _ = client.get("/hello", source="127.0.0.1",
                              headers={"X-Forwarded-For": "203.0.113.9"})
    harness.eq(status, 200, t + "without Redis, per_ip (failure_mode: open) is served")
    status, headers, _ = client.get("/api/items", headers={"X-Api-Key": "k1"})
    harness.eq((status, headers.get("retry-after")), (503, "1"),
               t + "without Redis, api_key (failure_mode: closed) is 503 with Retry-After: 1")
    harness.eq(client.empty, [], t + "no answer has an empty X-RateLimit-* or Retry-After")


def readme_shows(name):
    """docs/gateways.md shows the file as it is (an indented code block)."""
    with open(os.path.join(SRCDIR, "docs", "gateways.md")) as f:
        readme = f.read()
    block = "".join(("    " + line if line.strip() else "\n")
                    for line in conf_text(name).splitlines(True))
    harness.ok(block in readme, "docs/gateways.md shows conf/%s verbatim" % name)


def gateway_program(env_var, name):
    """$env_var if set (a path, or a name on PATH; None if not found), else
    name on PATH or in /usr/sbin (where Debian puts nginx, often not on a
    user's PATH)."""
    if os.environ.get(env_var):
        return harness.find_program(env_var, name)
    path = os.path.join("/usr/sbin", name)
    return shutil.which(name) or (path if os.access(path, os.X_OK) else None)


def main():
    for name in ("ratelimitd-gateway.yaml", "nginx-auth-request.conf", "Caddyfile"):
        readme_shows(name)

    if not harness.find_program("REDIS_SERVER", "redis-server"):
        harness.skip_all("redis-server not found")
    nginx = gateway_program("NGINX", "nginx")
    caddy = gateway_program("CADDY", "caddy")

    # The shipped policy file is valid as it is.
    tmp = harness.make_tempdir()
    log = os.path.join(tmp, "check.log")
    proc = harness.spawn([harness.find_program("RATELIMITD", "./ratelimitd"), "--config",
                          os.path.join(SRCDIR, "conf", "ratelimitd-gateway.yaml"),
                          "--check-config"], log)
    harness.eq(proc.wait(30), 0, "conf/ratelimitd-gateway.yaml passes --check-config")
    if proc.returncode:
        harness.diag(harness.tail(log))

    def ratelimitd_denial(body):
        # ratelimitd's own answer, keyed by the client's address.
        try:
            j = json.loads(body)
            return j["allowed"] is False and j["checks"][0]["key"] == "127.0.0.2"
        except (ValueError, KeyError, TypeError, IndexError):
            return False

    gateways = [("nginx", nginx, start_nginx, lambda body: body == b"Too Many Requests\n"),
                ("caddy", caddy, start_caddy, ratelimitd_denial)]
    for name, program, start, deny_body in gateways:
        if not program:
            harness.skip("%s is not installed (tools/deps.sh installs it)" % name)
            continue
        failed = harness.failed_count()
        client, service, redis, log = gateway_stack(program, start, name == "caddy")
        check_gateway(name, client, service, redis, deny_body)
        client, service, redis, log2 = gateway_stack(program, start, name == "caddy",
                                                     missing_key_skip=True)
        check_skip(name, client, service)
        if harness.failed_count() > failed:
            harness.diag("%s's log:\n%s\n%s" % (name, harness.tail(log), harness.tail(log2)))


def gateway_stack(program, start, for_caddy, missing_key_skip=False):
    """A redis-server, ratelimitd, the service and the gateway in front."""
    redis = harness.RedisServer().start()
    service = Service()
    rl = start_ratelimitd(redis, for_caddy, missing_key_skip)
    port, log = start(program, rl.port, service.port)
    return Client(port), service, redis, log


def check_skip(name, client, service):
    """With missing_key: skip, a request lacking the key's header is served
    uncounted, and neither the client nor the service gets figures (a
    gateway must not copy what ratelimitd did not send)."""
    t = name + ", missing_key: skip: "

    def figures(headers):
        return sorted(k for k in headers
                      if k.startswith("x-ratelimit-") and k != "x-ratelimit-cost")

    status, headers, _ = client.get("/api/items")
    seen = service.last()
    harness.eq(status, 200, t + "a request without X-Api-Key is served")
    harness.eq((figures(headers), figures(seen["headers"]) if seen else None), ([], []),
               t + "no X-RateLimit-* figures to the client or the service")
    status, headers, _ = client.get("/api/items", headers={"X-Api-Key": "k1"})
    harness.eq((status, headers.get("x-ratelimit-remaining")), (200, str(API_KEY_LIMIT - 1)),
               t + "with the key, the request is counted")
    harness.eq(client.empty, [], t + "no answer has an empty X-RateLimit-* or Retry-After")

harness.run(main)
