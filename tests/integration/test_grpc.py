# SPDX-License-Identifier: Apache-2.0
"""test_grpc.py: the gRPC front's transport (grpc_listen) with a real gRPC
client (python3-grpcio, messages from proto/ through rls_client.py) and
raw HTTP/2 frames: the health service, gRPC errors that leave the
connection usable, 200 concurrent streams on one connection, HTTP/2 floods
(rapid reset as in CVE-2023-44487, PING, SETTINGS) cut off with memory
bounded, unix sockets, the bearer token, idle connections (idle_timeout
counted from the last call), and a drain that still answers a call in
flight.

The points that need a `domains:` section (a call that reaches Redis) skip
with a message when this build does not know the section yet."""
import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import rls_client as rc  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

POLICY = """policies:
  p:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1000000, window: 1h}
"""
DOMAINS = """domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: slow
        rate_limit: {unit: hour, requests_per_unit: 1000}
"""
TOKEN = "grpc-test-token-0123456789"
PATH_HEALTH = b"/grpc.health.v1.Health/Check"

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


# HPACK: :method POST (static 3), :scheme http (static 6), :path as a
# literal without indexing with the static name 4.
def request_headers(path=b"/x"):
    return b"\x83\x86\x04" + bytes([len(path)]) + path


def raw_conn(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(PREFACE + frame(SETTINGS, 0, 0))
    return s


def read_frames(s, seconds, until=None):
    """Frames the server sends until it closes or `seconds` pass (or a frame
    satisfies `until`): a list of (type, flags, stream, payload), and
    whether it closed."""
    buf, out = b"", []
    deadline = time.monotonic() + seconds
    closed = False
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except (ConnectionResetError, BrokenPipeError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
        while len(buf) >= 9:
            n = struct.unpack(">I", b"\0" + buf[:3])[0]
            if len(buf) < 9 + n:
                break
            out.append((buf[3], buf[4], struct.unpack(">I", buf[5:9])[0] & 0x7fffffff,
                        buf[9:9 + n]))
            buf = buf[9 + n:]
            if until and until(out[-1]):
                return out, closed
    return out, closed


def goaway_code(frames):
    for t, _, _, p in frames:
        if t == GOAWAY and len(p) >= 8:
            return struct.unpack(">I", p[4:8])[0]
    return None


def start(redis, extra="", policy=POLICY, grpc_addr=None):
    port = harness.free_port()
    addr = grpc_addr or "127.0.0.1:%d" % port
    d = Daemon("unix:" + redis.socket_path, policy, extra=("grpc_listen: %s\n" % addr) + extra,
               timeout="2s")
    d.start()
    d.grpc_addr = addr
    d.grpc_port = port
    return d


def domains_supported():
    """This build knows the `domains:` section (after the domains branch)."""
    tmp = harness.make_tempdir()
    path = os.path.join(tmp, "probe.yaml")
    with open(path, "w") as f:
        f.write(POLICY + DOMAINS)
    r = subprocess.run([BINARY, "--config", path, "-t"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    return r.returncode == 0


def test_health(redis):
    d = start(redis)
    ch = rc.channel(d.grpc_addr)
    harness.eq(rc.health_check(ch), rc.SERVING, "Health/Check \"\": SERVING")
    harness.eq(rc.health_check(ch, "envoy.service.ratelimit.v3.RateLimitService"), rc.SERVING,
               "Health/Check of the RLS service: SERVING")
    code, _ = rc.rpc_error(rc.health_check, ch, "no.such.Service")
    harness.eq(code, "NOT_FOUND", "Health/Check of another service: NOT_FOUND")
    redis.stop()
    try:
        harness.wait_until(lambda: rc.health_check(ch) == rc.NOT_SERVING, timeout=10,
                           what="NOT_SERVING")
        harness.ok(True, "Redis down: NOT_SERVING")
    except Exception as e:
        harness.ok(False, "Redis down: NOT_SERVING (%s)" % e)
    redis.restart()
    harness.wait_until(lambda: rc.health_check(ch) == rc.SERVING, timeout=15, what="SERVING")
    harness.ok(True, "Redis back: SERVING again")
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0")


def test_errors(redis):
    d = start(redis)
    ch = rc.channel(d.grpc_addr)
    code, _ = rc.rpc_error(rc.raw_call, ch, "/envoy.service.ratelimit.v3.RateLimitService/Nope",
                           b"")
    harness.eq(code, "UNIMPLEMENTED", "an unknown method: UNIMPLEMENTED")
    code, _ = rc.rpc_error(rc.raw_call, ch, "/grpc.health.v1.Health/Watch", b"")
    harness.eq(code, "UNIMPLEMENTED", "Health/Watch: UNIMPLEMENTED")
    code, msg = rc.rpc_error(rc.raw_call, ch, rc.RLS_PATH, b"\x0a\xff\xff\xff\xff\x0f")
    harness.eq(code, "INVALID_ARGUMENT", "malformed protobuf: INVALID_ARGUMENT")
    harness.ok("RateLimitRequest" in (msg or ""), "with a message saying why: %r" % msg)
    # The same channel (one HTTP/2 connection) still works.
    harness.eq(rc.health_check(ch), rc.SERVING, "the connection survives a malformed message")
    code, _ = rc.rpc_error(rc.should_rate_limit, ch, "", [[("k", "v")]])
    harness.eq(code, "INVALID_ARGUMENT", "no domain: INVALID_ARGUMENT")
    code, _ = rc.rpc_error(rc.raw_call, ch, rc.RLS_PATH, b"\x0a" * 20000)
    harness.eq(code, "RESOURCE_EXHAUSTED", "a message over max_body: RESOURCE_EXHAUSTED")
    call = ch.unary_unary(rc.RLS_PATH, request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=rc.message("RateLimitResponse").FromString)
    req = rc.build_request("edge", [[("k", "v" * 200)]])
    code, _ = rc.rpc_error(call, req, timeout=10, compression=rc.grpc.Compression.Gzip)
    harness.eq(code, "UNIMPLEMENTED", "a compressed message: UNIMPLEMENTED")
    resp = rc.should_rate_limit(ch, "unknown-domain", [[("k", "v")]])
    harness.eq(resp.overall_code, rc.CODE_OK, "and then a good call is answered")
    metrics = d.admin("/metrics").body.decode()
    harness.ok('ratelimitd_rls_requests_total{front="grpc",code="invalid"} 2' in metrics,
               "the malformed message and the one without a domain counted as invalid")
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0")


def test_concurrent(redis):
    d = start(redis)
    ch = rc.channel(d.grpc_addr)
    futures = [rc.should_rate_limit_future(ch, "any", [[("n", str(i))]]) for i in range(200)]
    codes = []
    for f in futures:
        try:
            codes.append(f.result(timeout=30).overall_code)
        except rc.grpc.RpcError as e:
            codes.append(e.code().name)
    harness.eq(codes.count(rc.CODE_OK), 200, "200 concurrent streams on one connection answered")
    metrics = d.admin("/metrics").body.decode()
    harness.ok("ratelimitd_grpc_connections_total 1" in metrics,
               "one connection counted in ratelimitd_grpc_connections_total")
    harness.ok("ratelimitd_grpc_streams_total 200" in metrics,
               "200 streams counted in ratelimitd_grpc_streams_total")
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0")


def protocol_errors(d):
    for line in d.admin("/metrics").body.decode().splitlines():
        if line.startswith("ratelimitd_grpc_protocol_errors_total "):
            return int(line.split()[1])
    return None


def flood(port, make_frames, count, batch=200):
    """Sends count flood units (preface first) without reading, as long as
    the server reads; returns (frames seen, closed)."""
    s = raw_conn(port)
    s.settimeout(5)
    sent = 0
    try:
        while sent < count:
            s.sendall(b"".join(make_frames(sent + i) for i in range(batch)))
            sent += batch
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    frames, closed = read_frames(s, 5)
    s.close()
    return frames, closed


def test_floods(redis):
    d = start(redis)
    pid = d.proc.pid
    before = harness.rss_kib(pid)

    def rapid_reset(i):
        sid = 2 * i + 1
        return frame(HEADERS, END_HEADERS, sid, request_headers()) + \
            frame(RST_STREAM, 0, sid, struct.pack(">I", 8))
    frames, closed = flood(d.grpc_port, rapid_reset, 20000)
    code = goaway_code(frames)
    harness.ok(code is not None, "a rapid-reset flood gets GOAWAY (code %s)" % code)
    harness.ok(closed, "and the connection is closed")
    harness.eq(protocol_errors(d), 1, "counted in ratelimitd_grpc_protocol_errors_total")

    def pings(i):
        return frame(PING, 0, 0, struct.pack(">Q", i))
    frames, closed = flood(d.grpc_port, pings, 200000)
    harness.ok(closed, "a PING flood (not reading the acks) is cut off")

    many = b"".join(struct.pack(">HI", 0x3, 100) for _ in range(100))
    s = raw_conn(d.grpc_port)
    s.sendall(frame(SETTINGS, 0, 0, many))
    frames, closed = read_frames(s, 5)
    s.close()
    harness.ok(goaway_code(frames) is not None and closed,
               "a SETTINGS frame of 100 entries: GOAWAY and closed")

    # Flooding again changes nothing: memory stays bounded.
    for _ in range(3):
        flood(d.grpc_port, rapid_reset, 20000)
    after = harness.rss_kib(pid)
    harness.ok(after - before < 32 * 1024,
               "RSS bounded through the floods (%d kB -> %d kB)" % (before, after))
    harness.eq(protocol_errors(d), 6, "each flood counted once")
    ch = rc.channel(d.grpc_addr)
    harness.eq(rc.health_check(ch), rc.SERVING, "the daemon keeps serving other connections")
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0")


def test_garbage(redis):
    """Random bytes, with and without the preface, and random frames: the
    daemon never dies and keeps serving."""
    import random
    rnd = random.Random(10)
    d = start(redis)
    for i in range(60):
        blob = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 3000)))
        if i % 3 == 1:
            blob = PREFACE + blob
        elif i % 3 == 2:
            ftype = rnd.choice([DATA, HEADERS, 2, RST_STREAM, SETTINGS, 5, PING, GOAWAY, 8, 9])
            payload = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 64)))
            blob = PREFACE + frame(SETTINGS, 0, 0) + \
                frame(ftype, rnd.getrandbits(8), rnd.choice([0, 1, 2, 3, 0x7fffffff]), payload)
        try:
            s = socket.create_connection(("127.0.0.1", d.grpc_port), timeout=5)
            s.sendall(blob)
            read_frames(s, 0.05)
            s.close()
        except OSError:
            pass
    harness.ok(d.proc.poll() is None, "60 connections of random bytes and frames: still running")
    ch = rc.channel(d.grpc_addr)
    harness.eq(rc.health_check(ch), rc.SERVING, "and serving")
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0")


def server_settings(frames):
    """The entries of the server's first SETTINGS frame, as a dict."""
    for t, flags, _, p in frames:
        if t == SETTINGS and not flags & 1:
            return {struct.unpack(">H", p[i:i + 2])[0]: struct.unpack(">I", p[i + 2:i + 6])[0]
                    for i in range(0, len(p) - 5, 6)}
    return {}


def test_idle(redis):
    d = start(redis, extra="idle_timeout: 500ms\ngrpc_max_streams: 7\n")
    s = raw_conn(d.grpc_port)
    frames, closed = read_frames(s, 5)
    s.close()
    harness.ok(closed, "an idle connection is closed after idle_timeout")
    settings = server_settings(frames)
    harness.eq(settings.get(3), 7, "SETTINGS_MAX_CONCURRENT_STREAMS is grpc_max_streams")
    harness.eq(settings.get(6), 16384, "SETTINGS_MAX_HEADER_LIST_SIZE 16384")
    harness.ok(settings.get(5) in (None, 16384), "the default frame size")
    harness.eq(goaway_code(frames), 0, "a GOAWAY NO_ERROR before the close")
    # A stream the client opens and never ends waits for the client, not
    # for the core: it holds no connection past idle_timeout.
    s = raw_conn(d.grpc_port)
    authority = b"\x01\x09localhost"  # literal :authority (static index 1)
    s.sendall(frame(HEADERS, END_HEADERS, 1, request_headers(PATH_HEALTH) + authority))
    frames, closed = read_frames(s, 5)
    s.close()
    harness.ok(closed and not any(t == RST_STREAM for t, _, _, _ in frames),
               "a request never ended: the connection still closes after idle_timeout")
    # A client that opens no flow-control window for the answer holds it
    # back, and the connection no longer than idle_timeout either.
    s = socket.create_connection(("127.0.0.1", d.grpc_port), timeout=5)
    content_type = b"\x0f\x10\x10application/grpc"  # literal, static index 31
    s.sendall(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 0)) +
              frame(HEADERS, END_HEADERS, 1,
                    request_headers(PATH_HEALTH) + authority + content_type) +
              frame(DATA, END_STREAM, 1, b"\0\0\0\0\0"))
    frames, closed = read_frames(s, 5)
    s.close()
    harness.ok(closed and any(t == HEADERS for t, _, _, _ in frames),
               "an answer the client's window holds back: closed after idle_timeout")
    harness.eq(d.stop(), 0, "the daemon exits 0")


def test_idle_from_last_call(redis):
    # As test_http1's: idle_timeout counts from the last call, not the
    # first. The timer armed after call 1 fires before call 3 comes (4 s >
    # 3 s) and must find the deadline moved by call 2 (3 comes 2 s after it).
    d = start(redis, extra="idle_timeout: 3s\n")
    s = raw_conn(d.grpc_port)
    authority = b"\x01\x09localhost"  # literal :authority (static index 1)
    content_type = b"\x0f\x10\x10application/grpc"  # literal, static index 31
    answered = []
    for i, sid in enumerate((1, 3, 5)):
        if i:
            time.sleep(2)
        try:
            s.sendall(frame(HEADERS, END_HEADERS, sid,
                            request_headers(PATH_HEALTH) + authority + content_type) +
                      frame(DATA, END_STREAM, sid, b"\0\0\0\0\0"))
        except OSError:
            answered.append("closed")
            break
        frames, closed = read_frames(
            s, 5, until=lambda f, sid=sid: f[0] == HEADERS and f[1] & END_STREAM and f[2] == sid)
        ends = [f for f in frames if f[0] == HEADERS and f[1] & END_STREAM and f[2] == sid]
        answered.append("answered" if ends else "closed" if closed else "no answer")
    harness.eq(answered, ["answered"] * 3,
               "idle_timeout 3s: calls 2 s apart on one connection, 4 s after the first")
    t0 = time.monotonic()
    _, closed = read_frames(s, 9)
    took = time.monotonic() - t0
    s.close()
    harness.ok(closed and took > 2.5, "then closed idle_timeout after the last (after %.1f s)" % took)
    harness.eq(d.stop(), 0, "the daemon exits 0")


def test_workers(redis):
    d = start(redis, extra="workers: 2\n")
    answered = 0
    for _ in range(8):  # separate connections: the kernel spreads them
        ch = rc.channel(d.grpc_addr)
        if rc.should_rate_limit(ch, "any", [[("k", "v")]]).overall_code == rc.CODE_OK:
            answered += 1
        ch.close()
    harness.eq(answered, 8, "workers: 2, each with its own grpc_listen socket: all answered")
    harness.eq(d.stop(), 0, "the daemon exits 0")


def test_unix(redis):
    tmp = harness.make_tempdir()
    path = os.path.join(tmp, "grpc.sock")
    d = start(redis, grpc_addr="unix:" + path, extra="listen_mode: \"0600\"\n")
    harness.eq(os.stat(path).st_mode & 0o777, 0o600, "the socket file has listen_mode")
    ch = rc.channel("unix:" + path)
    harness.eq(rc.health_check(ch), rc.SERVING, "Health/Check over a unix socket")
    resp = rc.should_rate_limit(ch, "none", [[("k", "v")]])
    harness.eq(resp.overall_code, rc.CODE_OK, "ShouldRateLimit over a unix socket")
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0")
    harness.ok(not os.path.exists(path), "the socket file is removed at exit")


def test_token(redis):
    tmp = harness.make_tempdir()
    tok = os.path.join(tmp, "token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(tok, 0o600)
    d = start(redis, extra="auth_token_file: %s\n" % tok)
    ch = rc.channel(d.grpc_addr)
    code, _ = rc.rpc_error(rc.should_rate_limit, ch, "d", [[("k", "v")]])
    harness.eq(code, "UNAUTHENTICATED", "no token: UNAUTHENTICATED")
    code, _ = rc.rpc_error(rc.should_rate_limit, ch, "d", [[("k", "v")]],
                           metadata=[("authorization", "Bearer wrong-token-0123456789")])
    harness.eq(code, "UNAUTHENTICATED", "a wrong token: UNAUTHENTICATED")
    code, resp = rc.rpc_error(rc.should_rate_limit, ch, "d", [[("k", "v")]],
                              metadata=[("authorization", "Bearer " + TOKEN)])
    harness.ok(code is None and resp.overall_code == rc.CODE_OK, "the token: answered (%s)"
               % code)
    harness.eq(rc.health_check(ch), rc.SERVING, "health checks need no token")
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0")


def test_max_connections(redis):
    d = start(redis, extra="max_connections: 16\n")
    held = [socket.create_connection(("127.0.0.1", d.port), timeout=5) for _ in range(16)]
    time.sleep(0.2)
    ch = rc.channel(d.grpc_addr)
    code, msg = rc.rpc_error(rc.should_rate_limit, ch, "d", [[("k", "v")]])
    harness.eq(code, "UNAVAILABLE",
               "16 HTTP connections held, max_connections 16: a gRPC call is UNAVAILABLE")
    ch.close()
    for s in held:
        s.close()
    time.sleep(0.2)
    ch = rc.channel(d.grpc_addr)
    code, _ = rc.rpc_error(rc.should_rate_limit, ch, "d", [[("k", "v")]])
    harness.eq(code, None, "once they close, a new gRPC connection is served")
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0")


def test_domains(redis):
    """Needs rls.c and domains.c (the other branches of the issue)."""
    if not domains_supported():
        for what in ("ShouldRateLimit end to end", "a reset stream cancels its call",
                     "drain answers a call in flight"):
            harness.skip("%s: this build has no `domains:` section yet" % what)
        return
    d = start(redis, policy=POLICY + DOMAINS)
    ch = rc.channel(d.grpc_addr)

    def four_calls(fresh):
        return [rc.should_rate_limit(ch, "edge", [[("user", fresh)]]) for _ in range(4)]

    # A minute may end in the middle of the calls on a slow box (valgrind).
    got = harness.in_one_window(60, four_calls, "the 4 calls of 3 per minute")
    codes = [r.overall_code for r in got]
    remaining = [r.statuses[0].limit_remaining for r in got]
    r = got[-1]
    harness.eq(codes, [rc.CODE_OK] * 3 + [rc.CODE_OVER_LIMIT], "3 per minute: OK x3, OVER_LIMIT")
    harness.eq(remaining, [2, 1, 0, 0], "limit_remaining counts down")
    st = r.statuses[0]
    harness.eq((st.current_limit.requests_per_unit, rc.UNITS.get(st.current_limit.unit)),
               (3, "MINUTE"), "current_limit 3 per MINUTE")
    harness.ok(any(h.key.lower() == "retry-after" for h in r.response_headers_to_add),
               "response_headers_to_add has Retry-After when over limit")

    # A client that gives up resets its stream: the call is cancelled, and
    # the connection goes on.
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        code, _ = rc.rpc_error(rc.should_rate_limit, ch, "edge", [[("slow", "0")]], timeout=0.3)
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    harness.eq(code, "DEADLINE_EXCEEDED", "a call the client gives up on (RST_STREAM)")
    r = rc.should_rate_limit(ch, "edge", [[("slow", "0")]])
    harness.eq(r.overall_code, rc.CODE_OK, "the connection goes on after the reset")

    # A drain still answers a call waiting for Redis.
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        fut = rc.should_rate_limit_future(ch, "edge", [[("slow", "1")]], timeout=20)
        time.sleep(0.3)
        d.send_signal(signal.SIGTERM)
        time.sleep(0.3)
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    code, resp = rc.rpc_error(fut.result, timeout=20)
    harness.ok(code is None and resp.overall_code == rc.CODE_OK,
               "SIGTERM: the call in flight is answered (%s)" % code)
    ch.close()
    harness.eq(d.stop(), 0, "the daemon exits 0 after the drain")


def main():
    rc.require()
    redis = harness.RedisServer()
    redis.start()
    test_errors(redis)
    test_concurrent(redis)
    test_floods(redis)
    test_garbage(redis)
    test_idle(redis)
    test_idle_from_last_call(redis)
    test_workers(redis)
    test_unix(redis)
    test_token(redis)
    test_max_connections(redis)
    test_domains(redis)
    test_health(redis)


harness.run(main)
