# SPDX-License-Identifier: Apache-2.0
"""test_auth.py: forward-auth, /auth/<policy> with any method, end to end
against a real Redis and with the memory backend: exact limits per key;
${ip} from the peer (clients bound to different loopback addresses); a
trusted proxy's X-Forwarded-For giving a counter per client and an
untrusted peer's being ignored; ${header:X-Api-Key}; a composite template;
missing_key skip, shared and reject; X-RateLimit-Cost; deny_status per
policy and top-level, /check keeping 429; HEAD, POST with a body, other
methods; the bearer token; unknown policies; Envoy's appended path;
failure_mode open and closed with Redis down."""
import http.client
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import openapi_check  # noqa: E402
from daemon import BINARY, Daemon, Response  # noqa: E402

# 127.0.0.2 plays the gateway (a trusted proxy); 127.0.0.1 and 127.0.0.3
# are clients that reach the daemon directly.
POLICY = """trusted_proxies: ["127.0.0.2"]
policies:
  ip:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 2, window: 1h}
  api:
    key: "${header:X-Api-Key}"
    deny_status: 403
    tiers:
      - {name: t, algorithm: fixed_window, limit: 2, window: 1h}
  combo:
    key: "${header:X-Tenant}:${ip}"
    missing_key: shared
    tiers:
      - {name: t, algorithm: fixed_window, limit: 10, window: 1h}
  strict:
    key: "${header:X-Api-Key}"
    missing_key: reject
    tiers:
      - {name: t, algorithm: fixed_window, limit: 10, window: 1h}
  costly:
    key: "c"
    tiers:
      - {name: t, algorithm: fixed_window, limit: 10, window: 1h}
  open:
    failure_mode: open
    tiers:
      - {name: t, algorithm: fixed_window, limit: 10, window: 1h}
  closed:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: fixed_window, limit: 10, window: 1h}
"""


def auth(d, path, source="127.0.0.1", method="GET", headers=None, body=None):
    """One request to the check port from the given loopback address."""
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10,
                                      source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        res = Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()
    openapi_check.validate(method, path, res.status, res.headers, res.body)
    return res


def key_of(res):
    return res.json["checks"][0]["key"] if res.json and "checks" in res.json else None


def test_ip_from_peer(d):
    one = [auth(d, "/auth/ip") for _ in range(3)]
    harness.eq([r.status for r in one], [200, 200, 429], "the limit is exact: 2 of 3 allowed")
    harness.eq(key_of(one[0]), "127.0.0.1", "${ip} is the peer")
    last = one[2]
    harness.eq((last.headers.get("x-ratelimit-limit"), last.headers.get("x-ratelimit-remaining"),
                last.json["allowed"]), ("2", "0", False), "the denial carries /check's figures")
    harness.ok(last.headers.get("retry-after") is not None and
               int(last.headers["retry-after"]) > 0, "and Retry-After")
    other = auth(d, "/auth/ip", source="127.0.0.3")
    harness.eq((other.status, key_of(other)), (200, "127.0.0.3"),
               "another peer has its own counter")
    spoof = auth(d, "/auth/ip", source="127.0.0.3", headers={"X-Forwarded-For": "9.9.9.9",
                                                             "X-Real-IP": "9.9.9.8"})
    harness.eq((spoof.status, key_of(spoof), spoof.json["remaining"]), (200, "127.0.0.3", 0),
               "an untrusted peer's X-Forwarded-For and X-Real-IP are ignored")


def test_trusted_proxy(d):
    def via(xff):
        return auth(d, "/auth/ip", source="127.0.0.2", headers={"X-Forwarded-For": xff})
    a = [via("6.6.6.6, 198.51.100.1") for _ in range(3)]
    harness.eq([r.status for r in a], [200, 200, 429],
               "through the trusted proxy, the client's limit is exact")
    harness.eq(key_of(a[0]), "198.51.100.1",
               "the right-most untrusted X-Forwarded-For entry, not what the client wrote")
    b = via("198.51.100.2")
    harness.eq((b.status, key_of(b)), (200, "198.51.100.2"), "another client, another counter")
    chain = via("198.51.100.3, 127.0.0.2")
    harness.eq(key_of(chain), "198.51.100.3", "trusted hops are walked over")
    garbage = via("198.51.100.4, not-an-address")
    harness.eq(key_of(garbage), "127.0.0.2",
               "an entry that is not an address: the last trusted hop, never the garbage")
    real = auth(d, "/auth/ip", source="127.0.0.2", headers={"X-Real-IP": "198.51.100.5"})
    harness.eq(key_of(real), "198.51.100.5", "X-Real-IP when there is no X-Forwarded-For")
    raw = ("GET /auth/ip HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.6\r\n"
           "X-Forwarded-For: 127.0.0.2\r\nConnection: close\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10,
                                 source_address=("127.0.0.2", 0))
    s.sendall(raw.encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    harness.ok(b'"key":"198.51.100.6"' in data,
               "the walk goes on over an earlier X-Forwarded-For line")


def test_header_keys(d, r):
    k = [auth(d, "/auth/api", headers={"X-Api-Key": "key-1"}) for _ in range(3)]
    harness.eq([x.status for x in k], [200, 200, 403],
               "${header:X-Api-Key}: exact, denied with the policy's deny_status 403")
    harness.eq(key_of(k[0]), "key-1", "the key is the header's value")
    harness.ok(k[2].headers.get("retry-after") is not None and
               k[2].headers.get("x-ratelimit-remaining") == "0",
               "the 403 carries Retry-After and X-RateLimit-*")
    harness.eq(auth(d, "/auth/api", headers={"X-Api-Key": "key-2"}).status, 200,
               "another API key is counted apart")
    chk = d.check("api", "key-1")
    harness.eq(chk.status, 429, "the same denial on /check is still 429")

    before = len(r.command("KEYS", "*"))
    skipped = [auth(d, "/auth/api") for _ in range(3)] + [
        auth(d, "/auth/api", headers={"X-Api-Key": ""})]
    harness.eq([x.status for x in skipped], [200] * 4,
               "missing_key skip: a request without the header is allowed, however many")
    harness.eq(skipped[0].json, {"allowed": True, "skipped": True, "policy": "api",
                                 "missing": "X-Api-Key"}, "the skip body")
    harness.ok("x-ratelimit-limit" not in skipped[0].headers, "and no X-RateLimit-* headers")
    harness.eq(len(r.command("KEYS", "*")), before, "nothing was counted in Redis")

    c = auth(d, "/auth/combo", headers={"X-Tenant": "acme"})
    harness.eq(key_of(c), "acme:127.0.0.1", "a composite template")
    shared = [auth(d, "/auth/combo") for _ in range(2)]
    harness.eq([key_of(x) for x in shared], ["-:127.0.0.1"] * 2,
               "missing_key shared: counted under -")
    harness.eq(shared[1].json["remaining"], 8, "one shared counter")

    rej = auth(d, "/auth/strict")
    harness.eq((rej.status, rej.json.get("error")), (400, "missing_key"),
               "missing_key reject: 400 missing_key")
    harness.eq(auth(d, "/auth/strict", headers={"x-api-key": "k"}).status, 200,
               "header names match in any case")


def test_cost(d):
    a = auth(d, "/auth/costly", headers={"X-RateLimit-Cost": "3"})
    harness.eq((a.status, a.json["remaining"]), (200, 7), "X-RateLimit-Cost: 3 takes 3")
    z = auth(d, "/auth/costly", headers={"X-RateLimit-Cost": "0"})
    harness.eq(z.json["remaining"], 7, "cost 0 takes nothing")
    for bad in ("-1", "abc", "1.5", "1000000001", ""):
        res = auth(d, "/auth/costly", headers={"X-RateLimit-Cost": bad})
        harness.eq((res.status, res.json.get("error")), (400, "invalid_cost"),
                   "X-RateLimit-Cost %r: 400 invalid_cost" % bad)
    big = auth(d, "/auth/costly", headers={"X-RateLimit-Cost": "8"})
    harness.eq(big.status, 429, "a cost past what is left is denied (429 by default)")


def test_methods_and_paths(d):
    head = auth(d, "/auth/costly", method="HEAD")
    harness.eq((head.status, head.body, head.headers.get("x-ratelimit-remaining")), (200, b"", "6"),
               "HEAD: the headers, no body")
    post = auth(d, "/auth/costly", method="POST", body=b'{"policy":"ip","key":"x","cost":5}')
    harness.eq((post.status, key_of(post), post.json["remaining"]), (200, "c", 5),
               "POST: the body is ignored")
    env = auth(d, "/auth/costly/api/v1/users?x=1")
    harness.eq((env.status, env.json["checks"][0]["policy"]), (200, "costly"),
               "a path after the policy (Envoy ext_authz) and the query are ignored")
    put = auth(d, "/auth/costly", method="PUT")
    harness.eq((put.status, key_of(put), put.json["remaining"]), (200, "c", 3),
               "PUT, as Envoy ext_authz forwards it: decided and counted like GET")
    for path in ("/auth/nope", "/auth/", "/auth//costly"):
        res = auth(d, path)
        harness.eq((res.status, res.json.get("error")), (404, "unknown_policy"),
                   "%s: 404 unknown_policy" % path)


def test_failure_modes(redis, d):
    redis.proc.send_signal(signal.SIGKILL)
    redis.proc.wait()
    o = auth(d, "/auth/open")
    harness.eq((o.status, o.json.get("allowed"), o.json.get("degraded")), (200, True, True),
               "Redis down, failure_mode open: 200 degraded")
    c = auth(d, "/auth/closed")
    harness.eq((c.status, c.json.get("error"), c.headers.get("retry-after")),
               (503, "backend_unavailable", "1"), "failure_mode closed: 503 as on /check")


def test_memory_and_token(redis):
    tokdir = harness.make_tempdir()
    tokfile = os.path.join(tokdir, "token")
    with open(tokfile, "w") as f:
        f.write("0123456789abcdef0123\n")
    d = Daemon("redis://127.0.0.1:1/0", """deny_status: 401
policies:
  ip:
    tiers:
      - {name: t, algorithm: token_bucket, limit: 3, window: 1h}
""", extra="backend: memory\nauth_token_file: %s\n" % tokfile).start()
    good = {"Authorization": "Bearer 0123456789abcdef0123"}
    harness.eq(auth(d, "/auth/ip").status, 401, "without the token: 401")
    harness.eq(auth(d, "/auth/ip", headers={"Authorization": "Bearer wrong-token-000000"}).status,
               401, "a wrong token: 401")
    res = [auth(d, "/auth/ip", headers=good) for _ in range(4)]
    harness.eq([x.status for x in res], [200, 200, 200, 401],
               "memory backend: exact, denied with the top-level deny_status 401")
    harness.eq(res[3].headers.get("www-authenticate"), None,
               "a denial's 401 is not a token challenge")
    harness.eq(d.stop(), 0, "exits 0")


def test_readme_example():
    """The policy file of docs/gateways.md's "Keys from the request" loads as written."""
    with open(os.path.join(os.environ.get("RL_SRCDIR", "."), "docs", "gateways.md")) as f:
        readme = f.read()
    section = readme.split("## Keys from the request", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = os.path.join(harness.make_tempdir(), "keys.yaml")
    with open(path, "w") as f:
        f.write(block)
    res = subprocess.run([BINARY, "--config", path, "--check-config"], capture_output=True)
    harness.eq((res.returncode, res.stderr.decode()[-300:]), (0, ""),
               "docs/gateways.md's key template example passes --check-config")


def main():
    if not BINARY:
        harness.bail_out("ratelimitd binary not found (set RATELIMITD)")
    redis = harness.RedisServer().start()
    r = redis.client()
    d = Daemon("unix:" + redis.socket_path, POLICY).start()
    test_ip_from_peer(d)
    test_trusted_proxy(d)
    test_header_keys(d, r)
    test_cost(d)
    test_methods_and_paths(d)
    test_failure_modes(redis, d)
    harness.eq(d.stop(), 0, "SIGTERM exits 0")
    test_memory_and_token(redis)
    test_readme_example()


harness.run(main)
