# SPDX-License-Identifier: Apache-2.0
"""test_http1.py: the HTTP/1.1 front over raw sockets: pipelined requests
answered in order, keep-alive, HEAD, chunked bodies, Expect: 100-continue,
HTTP/1.0, the framing errors (400 smuggling, 413, 431, 505) as JSON and
counted in /metrics, a refused body still being sent read to the end of the
stream (lingering, no reset), a client trickling one byte at a time answered 408
within request_timeout, idle_timeout counted from a connection's last
request, and limits changed by a reload applying to a connection already
open."""
import json
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import openapi_check  # noqa: E402
import promtext  # noqa: E402
from daemon import Daemon  # noqa: E402

POLICY = """policies:
  open:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1000000, window: 1h}
  one:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1, window: 1h}
"""


class Conn:
    """One raw connection and a reader of the answers on it."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data if isinstance(data, bytes) else data.encode())

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def read_until(self, sep):
        while sep not in self.buf:
            self._fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def response(self, head_only=False):
        """(status, headers with lower-case names, body)."""
        head = self.read_until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            if line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        n = 0 if head_only else int(headers.get("content-length", 0))
        while len(self.buf) < n:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        # Which request an answer is for is not tracked on a raw stream
        # (pipelined, split, malformed): some answer of the contract with
        # this status must describe it.
        openapi_check.validate_any(status, headers, body, head=head_only)
        return status, headers, body

    def closed(self, timeout=3):
        """True if the daemon closes the connection (after what it sent)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except socket.timeout:
            return False
        except OSError:
            return True

    def close(self):
        self.sock.close()


def post(body, extra=""):
    if isinstance(body, str):
        body = body.encode()
    return (("POST /check HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n"
             % (extra, len(body))).encode() + body)


def check_body(policy, key):
    return json.dumps({"policy": policy, "key": key})


def test_pipelining(d):
    c = Conn(d.port)
    # A check (answered when Redis replies) and, behind it, answers the
    # daemon has at once: they must wait for the check's.
    c.send(post(check_body("open", "p1")) + b"GET /healthz HTTP/1.1\r\n\r\n"
           + post(check_body("open", "p2")) + post("{") + post(check_body("open", "p3")))
    got = [c.response() for _ in range(5)]
    statuses = [s for s, _, _ in got]
    harness.eq(statuses, [200, 200, 200, 400, 200], "five pipelined requests, five answers")
    keys = [json.loads(b)["checks"][0]["key"] if s == 200 and b.startswith(b'{"allowed"')
            else json.loads(b).get("status") or json.loads(b).get("error") for s, _, b in got]
    harness.eq(keys, ["p1", "ok", "p2", "invalid_json", "p3"], "answered in request order")
    harness.ok(all(h.get("content-type") == "application/json" and
                   h.get("cache-control") == "no-store" for _, h, _ in got),
               "each with its JSON content type and Cache-Control: no-store")
    # Many at once, split at odd places.
    reqs = b"".join(post(check_body("open", "q%d" % i)) for i in range(40))
    for i in range(0, len(reqs), 97):
        c.send(reqs[i:i + 97])
    keys = [json.loads(c.response()[2])["checks"][0]["key"] for _ in range(40)]
    harness.eq(keys, ["q%d" % i for i in range(40)],
               "40 pipelined checks sent in 97-byte pieces: answered in order")
    c.close()


def test_keepalive_head_chunked(d):
    c = Conn(d.port)
    c.send("HEAD /healthz HTTP/1.1\r\n\r\n")
    s, h, _ = c.response(head_only=True)
    harness.eq((s, h.get("content-length")), (200, "16"),
               "HEAD: the head with the length of the body it leaves out")
    c.send("GET /healthz HTTP/1.1\r\n\r\n")
    s, h, b = c.response()
    harness.eq((s, b), (200, b'{"status":"ok"}\n'),
               "no body bytes were sent for HEAD: the next answer follows cleanly")
    body = check_body("open", "chunked").encode()
    c.send(b"POST /check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           + b"%x\r\n%s\r\n" % (5, body[:5]) + b"%x;ext=1\r\n%s\r\n" % (len(body) - 5, body[5:])
           + b"0\r\n\r\n")
    s, h, b = c.response()
    harness.eq((s, json.loads(b)["checks"][0]["key"]), (200, "chunked"),
               "a chunked body (with a chunk extension) is decoded")
    c.send(post(check_body("open", "close"), "Connection: close\r\n"))
    s, h, _ = c.response()
    harness.eq((s, h.get("connection")), (200, "close"), "Connection: close is answered in kind")
    harness.ok(c.closed(), "and the connection is closed")
    c.close()

    c = Conn(d.port)
    c.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    s, h, _ = c.response()
    harness.eq((s, h.get("connection")), (200, "keep-alive"), "HTTP/1.0 keep-alive kept")
    c.send("GET /healthz HTTP/1.0\r\n\r\n")
    s, h, _ = c.response()
    harness.eq((s, h.get("connection")), (200, "close"), "plain HTTP/1.0: closed")
    harness.ok(c.closed(), "and the connection is closed")
    c.close()


def test_continue(d):
    c = Conn(d.port)
    body = check_body("open", "continue").encode()
    c.send(b"POST /check HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
           % len(body))
    interim = c.read_until(b"\r\n\r\n")
    harness.eq(interim, b"HTTP/1.1 100 Continue\r\n\r\n", "100 Continue before the body")
    c.send(body)
    s, _, b = c.response()
    harness.eq((s, json.loads(b)["checks"][0]["key"]), (200, "continue"),
               "then the answer once the body came")
    c.send(b"POST /check HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 99999\r\n\r\n")
    s, h, b = c.response()
    harness.eq((s, json.loads(b)["error"], h.get("connection")),
               (413, "body_too_large", "close"),
               "a body announced over max_body: 413 at once, never 100 Continue")
    c.close()


def test_linger(d):
    """A client still sending a body the daemon refused reads the whole 413
    and then the end of the stream (FIN), not a reset: the daemon shuts its
    side and drops what the client still sends (front/conn.c) instead of
    closing with unread input, which makes the kernel reset the connection.
    The 64 KiB sent at once outlast the one read that finds the head."""
    c = Conn(d.port)
    c.send(b"POST /check HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 65536)
    s, h, b = c.response()
    harness.eq((s, json.loads(b)["error"], h.get("connection")),
               (413, "body_too_large", "close"), "a body over max_body still being sent: 413")
    try:
        end = "end of stream" if c.buf == b"" and c.sock.recv(65536) == b"" else "more bytes"
    except ConnectionResetError:
        end = "reset"
    harness.eq(end, "end of stream", "then the end of the stream, not a reset")
    c.close()


def metric(d, status):
    m = promtext.parse(d.admin("/metrics").body.decode())
    return promtext.value(m, "ratelimitd_http_responses_total", status=str(status))


def test_errors_counted(d):
    cases = [
        ("smuggling", post("0\r\n\r\n", "Transfer-Encoding: chunked\r\n")
         + b"GET /smuggled HTTP/1.1\r\n\r\n", 400, "bad_request"),
        ("413", post("x" * 5000), 413, "body_too_large"),
        ("431", "GET /healthz HTTP/1.1\r\nX-Big: %s\r\n\r\n" % ("x" * 9000), 431,
         "headers_too_large"),
        ("bad chunk size", "POST /check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
         400, "bad_request"),
        ("505", "GET /healthz HTTP/2.0\r\n\r\n", 505, "http_version_not_supported"),
    ]
    for name, raw, status, code in cases:
        before = metric(d, status)
        c = Conn(d.port)
        c.send(raw)
        s, h, b = c.response()
        j = json.loads(b)
        harness.eq((s, j.get("error"), isinstance(j.get("message"), str), h.get("connection")),
                   (status, code, True, "close"), "%s: %d %s as JSON, then close" % (name, status,
                                                                                     code))
        harness.ok(c.closed(), "%s: the connection is closed after the answer" % name)
        harness.eq(metric(d, status) - before, 1, "%s: counted in /metrics" % name)
        c.close()
    # The smuggled request was never answered: only one answer came.
    c = Conn(d.port)
    c.send(post("0\r\n\r\n", "Transfer-Encoding: chunked\r\n") + b"GET /healthz HTTP/1.1\r\n\r\n")
    c.response()
    harness.eq(c.buf, b"", "nothing follows the 400: the smuggled request is not served")
    c.close()


def test_slow_client(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True,
               extra="request_timeout: 2s\nidle_timeout: 30s\n").start()
    before = metric(d, 408)
    c = Conn(d.port)
    req = post(check_body("open", "slow"))
    t0 = time.monotonic()
    answer = None
    c.sock.settimeout(0.5)
    for i in range(len(req)):
        try:
            c.send(req[i:i + 1])
        except OSError:
            break
        try:
            c._fill()
            break
        except socket.timeout:
            continue
        except (EOFError, OSError):
            break
    took = time.monotonic() - t0
    c.sock.settimeout(5)
    try:
        answer = c.response()
    except (EOFError, OSError):
        pass
    harness.ok(answer is not None and answer[0] == 408 and
               json.loads(answer[2])["error"] == "request_timeout",
               "a client sending one byte every 0.5 s is answered 408 (%r)" % (answer,))
    harness.ok(1.5 < took < 3.5, "within request_timeout (2 s): after %.2f s" % took)
    harness.ok(c.closed(), "and closed")
    harness.eq(metric(d, 408) - before, 1, "408 counted in /metrics")
    c.close()
    harness.eq(d.check("open", "s").status, 200, "others are served meanwhile")
    harness.eq(d.stop(), 0, "exits 0")


def test_idle_from_last_request(redis):
    # idle_timeout counts from a connection's last request, not from the
    # first: the timer armed after request 1 fires before request 3 comes
    # (4 s > 3 s), and must then find the deadline moved by request 2 (3
    # comes 2 s after it, 1 s inside idle_timeout). Only lateness of this
    # client or of the box widens the first margin; the second is 1 s.
    d = Daemon("unix:" + redis.socket_path, POLICY, extra="idle_timeout: 3s\n").start()
    c = Conn(d.port)
    statuses = []
    for i in range(3):
        if i:
            time.sleep(2)
        try:
            c.send(post(check_body("open", "idle%d" % i)))
            statuses.append(c.response()[0])
        except (EOFError, OSError):
            statuses.append("closed")
            break
    harness.eq(statuses, [200, 200, 200],
               "idle_timeout 3s: requests 2 s apart on one connection, 4 s after the first")
    t0 = time.monotonic()
    closed = c.closed(timeout=9)
    took = time.monotonic() - t0
    harness.ok(closed and took > 2.5, "then closed idle_timeout after the last (after %.1f s)" % took)
    c.close()
    harness.eq(d.stop(), 0, "exits 0")


def test_reload_applies_to_open_connection(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, extra="max_body: 1024\n").start()
    c = Conn(d.port)
    body = json.dumps({"policy": "open", "key": "r" * 200})
    c.send(post(body))
    harness.eq(c.response()[0], 200, "a 200-byte body under max_body 1024")
    d.write_config(POLICY, extra="max_body: 100\n")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "policies reloaded" in d.logs(), 5, what="reload")
    c.send(post(body))
    s, h, b = c.response()
    harness.eq((s, json.loads(b)["error"]), (413, "body_too_large"),
               "after a reload to max_body 100, the same open connection gets 413")
    c.close()

    c = Conn(d.port)
    c.send(post(check_body("open", "tok")))
    harness.eq(c.response()[0], 200, "no token needed yet")
    token = os.path.join(d.dir, "token")
    with open(token, "w") as f:
        f.write("0123456789abcdef0123\n")
    d.write_config(POLICY, extra="max_body: 100\nauth_token_file: %s\n" % token)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: d.logs().count("policies reloaded") == 2, 5, what="reload")
    c.send(post(check_body("open", "tok")))
    s, h, _ = c.response()
    harness.eq((s, h.get("www-authenticate")), (401, "Bearer"),
               "a token configured by a reload is required on an open connection")
    c.close()
    c = Conn(d.port)
    c.send(post(check_body("open", "tok"), "Authorization: Bearer 0123456789abcdef0123\r\n"))
    harness.eq(c.response()[0], 200, "and the right token is accepted")
    c.send(post(check_body("open", "tok"), "Authorization: Bearer 0123456789abcdef012\r\n"))
    harness.eq(c.response()[0], 401, "a token one byte short is refused")
    c.close()
    harness.eq(d.stop(), 0, "exits 0")


def test_drain_keeps_answers(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY).start()
    idle = Conn(d.port)
    idle.send("GET /healthz HTTP/1.1\r\n\r\n")
    idle.response()
    d.send_signal(signal.SIGTERM)
    harness.ok(idle.closed(), "SIGTERM closes an idle keep-alive connection")
    idle.close()
    harness.eq(d.proc.wait(10), 0, "and the daemon exits 0")


def test_two_workers(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True, extra="workers: 2\n").start()
    statuses = [d.check("open", "w%d" % i).status for i in range(40)]
    harness.eq(statuses, [200] * 40,
               "workers: 2 bind the same address (SO_REUSEPORT) and both serve")
    harness.eq(d.admin("/readyz").status, 200, "admin_listen is served with two workers")
    other = Daemon("unix:" + redis.socket_path, POLICY, port=d.port)
    try:
        other.start(wait_ready=False)
        started = True
    except RuntimeError:
        started = False
    harness.ok(not started and "cannot bind" in other.logs(),
               "another daemon cannot take the address of a running one")
    harness.eq(d.stop(), 0, "exits 0")


def main():
    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, POLICY, extra="max_body: 4096\n").start()
    test_pipelining(d)
    test_keepalive_head_chunked(d)
    test_continue(d)
    test_linger(d)
    test_errors_counted(d)
    harness.eq(d.stop(), 0, "SIGTERM exits 0")
    test_slow_client(redis)
    test_idle_from_last_request(redis)
    test_reload_applies_to_open_connection(redis)
    test_drain_keeps_answers(redis)
    test_two_workers(redis)


harness.run(main)
