# SPDX-License-Identifier: Apache-2.0
"""test_limits.py: backpressure and client limits: max_inflight with both
overload actions, max_connections, idle_timeout against a slow client
(slowloris), a flood of 1000 connections (bounded memory, /healthz keeps
answering), running out of file descriptors, and who may connect to a unix
socket (a live one is not taken over; listen_mode and listen_group)."""
import os
import grp
import shutil
import signal
import socket
import stat
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import openapi_check  # noqa: E402
from daemon import Daemon  # noqa: E402

POLICY = """policies:
  open:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1000000, window: 1h}
  closed:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1000000, window: 1h}
"""


def test_max_inflight(redis):
    for action, want in (("reject", (503, "overloaded")), ("failure_mode", (200, None))):
        d = Daemon("unix:" + redis.socket_path, POLICY, timeout="3s",
                   extra="max_inflight: 2\noverload: %s\n" % action).start()
        results = []
        redis.proc.send_signal(signal.SIGSTOP)
        try:
            threads = [threading.Thread(target=lambda: results.append(d.check("open", "x")))
                       for _ in range(2)]
            for t in threads:
                t.start()
            time.sleep(0.3)
            t0 = time.monotonic()
            third = d.check("open", "x")
            took = time.monotonic() - t0
        finally:
            redis.proc.send_signal(signal.SIGCONT)
        for t in threads:
            t.join(10)
        got = (third.status, third.json.get("error") if action == "reject" else None)
        harness.eq(got, want, "overload %s: the check past max_inflight gets %r" % (action, want))
        if action == "failure_mode":
            harness.eq(third.json.get("degraded"), True, "answered per failure_mode (degraded)")
        harness.ok(took < 0.5, "at once (%.3f s), not queued" % took)
        harness.ok(len(results) == 2 and all(r.status == 200 and r.json.get("degraded") is None
                                             for r in results),
                   "the two in flight were decided by Redis once it answered")
        harness.eq(d.stop(), 0, "exits 0")


def test_pending_after_deadline(redis):
    """Checks answered at their deadline still wait in Redis's queue: they
    count against max_inflight until Redis replies."""
    d = Daemon("unix:" + redis.socket_path, POLICY + """  local:
    failure_mode: local
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1, window: 1h}
""", timeout="200ms", extra="max_inflight: 2\noverload: failure_mode\n").start()
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        first = [d.check("open", "p") for _ in range(2)]
        harness.ok(all(r.json.get("degraded") for r in first),
                   "two checks answered at their deadline")
        t0 = time.monotonic()
        third = d.check("closed", "p")
        took = time.monotonic() - t0
        harness.ok(third.status == 503 and took < 0.25,
                   "a third is over max_inflight though nothing is unanswered (%.3f s)" % took)
        local = [d.check("local", "p") for _ in range(2)]
        harness.eq([(r.status, r.json.get("local")) for r in local], [(200, True), (429, True)],
                   "overload with failure_mode local decides from memory")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    harness.wait_until(lambda: d.check("open", "p2").json.get("degraded") is None, 10,
                       what="decisions after SIGCONT")
    harness.ok(True, "once Redis replies, the queue drains and checks are decided again")
    harness.eq(d.stop(), 0, "exits 0")


def listen_unix(d, sock, extra=""):
    """Rewrites d's policy file to listen on the unix socket sock (the admin
    port stays TCP, for readiness); extra: more top-level lines. Returns the
    text written."""
    text = open(d.config).read().replace("listen: 127.0.0.1:%d" % d.port,
                                         "listen: unix:%s\n%s" % (sock, extra))
    with open(d.config, "w") as f:
        f.write(text)
    return text


def test_unix_socket_in_use(redis):
    tmp = harness.make_tempdir()
    sock = os.path.join(tmp, "rl.sock")
    a = Daemon("unix:" + redis.socket_path, POLICY, admin=True)
    text = listen_unix(a, sock)
    a.start()
    b = Daemon("unix:" + redis.socket_path, POLICY, admin=True)
    with open(b.config, "w") as f:
        f.write(text.replace("admin_listen: 127.0.0.1:%d" % a.admin_port,
                             "admin_listen: 127.0.0.1:%d" % b.admin_port))
    proc = harness.spawn([os.environ.get("RATELIMITD", "./ratelimitd"), "--config", b.config],
                         b.logfile)
    harness.eq(proc.wait(10), 1, "a second daemon on a live unix socket exits 1")
    harness.ok("in use by another process" in b.logs(), "saying the socket is in use")
    harness.eq(a.admin("/healthz").status, 200, "the first keeps its socket")
    harness.eq(a.stop(), 0, "exits 0")
    harness.ok(not os.path.exists(sock), "and removes its socket file")


def unix_check(sock):
    """POST /check over the unix socket: the status code."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(10)
        c.connect(sock)
        body = b'{"policy":"open","key":"u"}'
        c.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        data = b""
        while True:  # Connection: close: the answer ends with the stream
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
        if not data.startswith(b"HTTP/1.1 ") or b"\r\n\r\n" not in data:
            return None
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = dict((k.strip(), v.strip()) for k, v in (l.split(":", 1) for l in lines[1:]))
        status = int(lines[0].split(" ")[1])
        openapi_check.validate("POST", "/check", status, headers, body)
        return status


def test_unix_socket_perm(redis):
    # A group other than the test's own, so that the chown is seen: as root
    # any group will do; otherwise one of the test user's other groups.
    own = os.getgid()
    others = [g for g in os.getgroups() if g != own]
    gid = 1 if os.geteuid() == 0 else (others[0] if others else own)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    tmp = harness.make_tempdir()
    sock = os.path.join(tmp, "rl.sock")
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True)
    listen_unix(d, sock, 'listen_mode: "0660"\nlisten_group: %s\n' % group)
    d.start()
    st = os.stat(sock)
    harness.eq((oct(stat.S_IMODE(st.st_mode)), st.st_gid), (oct(0o660), gid),
               "listen_mode \"0660\" and listen_group %s are on the socket file" % group)
    harness.eq(unix_check(sock), 200, "a check over the socket is answered")
    harness.eq(d.stop(), 0, "exits 0")
    harness.ok(not os.path.exists(sock), "and removes its socket file")

    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or not setpriv:
        harness.ok(True, "# SKIP a group the daemon is not in needs root to set up")
        harness.ok(True, "# SKIP (the same)")
        return
    # As nobody (no supplementary groups) the chown to group 1 must fail:
    # a clear error and exit 1, and no socket file left behind.
    for path, mode in ((tmp, 0o777), (d.dir, 0o755), (d.config, 0o644)):
        os.chmod(path, mode)
    proc = harness.spawn([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                          os.environ.get("RATELIMITD", "./ratelimitd"), "--config", d.config],
                         os.path.join(d.dir, "nobody.log"))
    harness.eq(proc.wait(10), 1, "a daemon not in listen_group exits 1")
    with open(os.path.join(d.dir, "nobody.log")) as f:
        log = f.read()
    harness.ok("cannot give %s to group %s" % (sock, group) in log and not os.path.exists(sock),
               "saying it cannot give the socket to the group, leaving no file: %r" % log[-300:])


def test_huge_key(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, extra="max_body: 4194304\n").start()
    res = d.check("open", "k" * (1 << 20))
    harness.eq((res.status, res.json.get("error")), (400, "invalid_key"),
               "a 1 MiB key (within max_body) is refused: keys are at most 1024 bytes")
    harness.eq(redis.client().command("KEYS", "rl:{open:kkkk*"), [], "and nothing is written")
    harness.eq(d.stop(), 0, "exits 0")


def test_max_connections(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, extra="max_connections: 16\n",
               admin=True).start()
    conns = []
    for _ in range(16):
        c = d.connection()
        c.request("POST", "/check", '{"policy":"open","key":"c"}')
        conns.append((c, c.getresponse().read()))
    extra = d.connection()
    extra.request("POST", "/check", '{"policy":"open","key":"c"}')
    r = extra.getresponse()
    harness.eq((r.status, r.getheader("Connection")), (503, "close"),
               "the 17th connection gets 503 and is closed")
    harness.ok(b"too_many_connections" in r.read(), "with error too_many_connections")
    harness.eq((d.admin("/healthz").status, d.admin("/metrics").status), (200, 200),
               "the admin port still answers probes and scrapes")
    for c, _ in conns[:4]:
        c.close()
    time.sleep(0.2)
    harness.eq(d.check("open", "c").status, 200, "once connections close, new ones are served")
    for c, _ in conns[4:]:
        c.request("POST", "/check", '{"policy":"open","key":"c"}')
        assert c.getresponse().read()
    harness.ok(True, "the 12 counted connections still work (keep-alive)")
    harness.eq(d.stop(), 0, "exits 0")


def test_slowloris(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, extra="idle_timeout: 1s\n").start()
    s = socket.create_connection(("127.0.0.1", d.port))
    s.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\n")  # and never the rest
    s.settimeout(5)
    t0 = time.monotonic()
    try:
        data = s.recv(100)
    except OSError:
        data = b""
    took = time.monotonic() - t0
    harness.ok(0.5 < took < 3.5, "a client too slow to send its request is cut off after "
               "idle_timeout (%.2f s, got %r)" % (took, data[:40]))
    s.close()
    harness.eq(d.check("open", "s").status, 200, "others are served meanwhile")
    harness.eq(d.stop(), 0, "exits 0")


def test_flood(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY, extra="idle_timeout: 10s\n").start()
    for _ in range(200):
        d.check("open", "warm")
    before = harness.rss_kib(d.proc.pid)
    socks = []
    for i in range(1000):
        s = socket.create_connection(("127.0.0.1", d.port))
        # Half send a partial request, half a whole one they never read.
        s.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n"
                  if i % 2 else
                  b'POST /check HTTP/1.1\r\nHost: x\r\nContent-Length: 29\r\n\r\n'
                  b'{"policy":"open","key":"fl"}\n')
        socks.append(s)
    t0 = time.monotonic()
    health = d.request("GET", "/healthz", timeout=5)
    took = time.monotonic() - t0
    harness.eq(health.status, 200, "/healthz answers during a flood of 1000 connections")
    harness.ok(took < 1.0, "promptly (%.3f s)" % took)
    during = harness.rss_kib(d.proc.pid)
    harness.ok(during - before < 64 * 1024,
               "memory stays bounded: RSS %d KiB before, %d KiB with 1000 connections open"
               % (before, during))
    harness.diag("flood: RSS %d KiB before, %d KiB during (%+d KiB)" % (before, during,
                                                                      during - before))
    for s in socks:
        s.close()
    harness.eq(d.check("open", "after").status, 200, "served normally afterwards")
    harness.eq(d.stop(), 0, "exits 0")


def test_out_of_descriptors(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY)
    d.start(wrapper=["prlimit", "--nofile=64:64"])
    harness.ok("descriptor limit" in d.logs(), "max_connections above the fd limit is logged")
    socks = []
    for _ in range(100):
        try:
            socks.append(socket.create_connection(("127.0.0.1", d.port), timeout=1))
        except OSError:
            break
    time.sleep(0.5)
    with open("/proc/%d/stat" % d.proc.pid) as f:
        ticks0 = sum(int(x) for x in f.read().split()[13:15])
    time.sleep(1.0)
    with open("/proc/%d/stat" % d.proc.pid) as f:
        ticks1 = sum(int(x) for x in f.read().split()[13:15])
    harness.ok(ticks1 - ticks0 < 30, "out of descriptors, the daemon does not spin "
               "(%d CPU ticks in 1 s)" % (ticks1 - ticks0))
    for s in socks:
        s.close()
    harness.wait_until(lambda: d.check("open", "fd", timeout=2).status == 200, 5,
                       what="accepting again")
    harness.ok(True, "accepting resumes once descriptors are free")
    harness.eq(d.stop(), 0, "exits 0")


def main():
    redis = harness.RedisServer().start()
    test_max_inflight(redis)
    test_huge_key(redis)
    test_pending_after_deadline(redis)
    test_unix_socket_in_use(redis)
    test_unix_socket_perm(redis)
    test_max_connections(redis)
    test_slowloris(redis)
    test_flood(redis)
    test_out_of_descriptors(redis)


harness.run(main)
