# SPDX-License-Identifier: Apache-2.0
"""test_handover.py: the USR2 hand-over (src/handover.c), as nginx's
binary upgrade. The daemon runs from a copy of the binary in a temporary
directory, with 2 workers (2 SO_REUSEPORT sockets on listen, both passed)
and admin_listen:

- under load (4 clients on fresh connections, 4 on kept-alive ones), USR2:
  the new process serves, the old exits 0, and the clients see 0 refused,
  0 failed (a kept-alive connection the old one closes while idle is sent
  again on a fresh one, as HTTP clients do: counted apart); then the new
  one hands over in turn;
- a new binary that cannot be started leaves the old one serving, the
  reason in the log: a policy file made invalid before USR2 (exit status
  1), a policy file whose listen changed (the passed socket is elsewhere:
  a restart's business), a new process that closes the socket and lives
  on (killed, within seconds, not waited for), one never ready (stopped
  after HANDOVER_TIMEOUT_S, 60 s), a binary that crashes before ready (killed by a signal), a binary
  path that is not executable (Permission denied);
- to systemd (a notification socket here), the old process, still the
  main PID and still running, says MAINPID= the new one (NotifyAccess=main
  is enough), and the new one READY=1 and WATCHDOG=1 (WATCHDOG_PID
  rewritten for it);
- with a Redis backend, a new process whose Redis is not answering yet
  accepts nothing: the old answers every check until the new one is
  ready (0 failed with failure_mode closed);
- over gRPC (Envoy's ShouldRateLimit, 8 channels): 0 failed through 3
  hand-overs;
- a second USR2 while a hand-over is under way is refused, with a log
  line; the binary at the path is the one started (the file was replaced,
  as an upgrade does, while the old process ran).

With backend: memory the counters move with the hand-over: key k's
remaining after each is the limit less every check either process
answered (none lost, none decided twice); so do its run-time overrides. The Redis case needs
redis-server."""
import ctypes
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import BINARY, WRAPPER  # noqa: E402
from restart_load import BODY, HEADERS, GrpcLoad, Load  # noqa: E402
from supervisor import descriptors  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
HANDOVER_TIMEOUT_S = 60  # handover.h
LIMIT = 10 ** 9
# A week's window: the counts below hold within one (a boundary crossed
# meanwhile is detected, and said, rather than taken for a loss).
POLICY = ("policies:\n  p: {failure_mode: closed, tiers: [{name: t, algorithm: fixed_window, "
          "limit: %d, window: 7d}]}\n" % LIMIT)
CONFIG = "listen: 127.0.0.1:%d\nadmin_listen: 127.0.0.1:%d\nworkers: 2\nbackend: memory\n" + POLICY
GRPC = ("listen: 127.0.0.1:%d\nadmin_listen: 127.0.0.1:%d\ngrpc_listen: 127.0.0.1:%d\n"
        "workers: 2\nbackend: memory\n" + POLICY +
        "domains:\n  - domain: edge\n    descriptors:\n      - key: k\n"
        "        rate_limit: {unit: day, requests_per_unit: 1000000000}\n")
# Setup's TCP port (the first %d) unused: listen is the unix socket.
UNIX = ("# %d\nadmin_listen: 127.0.0.1:%d\nlisten: unix:%s\nworkers: 2\nbackend: memory\n"
        + POLICY)
REDIS = ("listen: 127.0.0.1:%d\nadmin_listen: 127.0.0.1:%d\nworkers: 2\n"
         "redis: {url: \"unix:%s\", timeout: 1s}\n" + POLICY)


class Setup:
    def __init__(self, config=CONFIG, *args):
        self.dir = harness.make_tempdir("rl-handover-")
        self.port, self.admin = harness.free_port(), harness.free_port()
        self.binary = os.path.join(self.dir, "ratelimitd")
        shutil.copy(BINARY, self.binary)
        self.config = os.path.join(self.dir, "ratelimitd.yaml")
        self.write_config(config % ((self.port, self.admin) + args))
        self.log = os.path.join(self.dir, "log")
        self.notify = Notify(os.path.join(self.dir, "notify"))
        # As systemd starts it with WatchdogSec=: WATCHDOG_PID its own pid.
        watchdog = 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$@"'
        self.proc = harness.spawn(["sh", "-c", watchdog, "sh"] + WRAPPER +
                                  [self.binary, "--config", self.config], self.log,
                                  env=dict(os.environ, NOTIFY_SOCKET=self.notify.path,
                                           WATCHDOG_USEC="1000000"))
        self.pid = self.proc.pid
        self.fds = []  # open descriptors of each new process
        self.spent = 0  # checks allowed on key k so far
        self.window = None  # the window's end, as the first probe saw it
        harness.wait_until(lambda: self.count("ratelimitd started") == 1, timeout=60,
                           what="the daemon")

    def probe(self):
        """One check on key k: its remaining, and the window's end."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("POST", "/check", body=BODY, headers=HEADERS)
            answer = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        self.spent += 1
        end = round((time.time() * 1000 + answer["reset_ms"]) / 60000)  # minutes
        self.window = self.window or end
        return answer["remaining"], end

    def write_config(self, text):
        with open(self.config + ".tmp", "w") as f:
            f.write(text)
        os.rename(self.config + ".tmp", self.config)

    def text(self):
        with open(self.log) as f:
            return f.read()

    def count(self, what):
        return self.text().count(what)

    def replace_binary(self, script):
        """An upgrade's replacement: a new file renamed over the path."""
        tmp = self.binary + ".new"
        with open(tmp, "w") as f:
            f.write("#!/bin/sh\n" + script)
        os.chmod(tmp, 0o755)
        os.rename(tmp, self.binary)

    def serving(self):
        try:
            with socket.create_connection(("127.0.0.1", self.admin), timeout=5) as c:
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return c.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False


class Notify:
    """A systemd notification socket: keeps (sender pid, message, whether
    the sender was still running then) and releases sd_notify_barrier's
    waits by closing the descriptors they send."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.messages = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        creds = struct.calcsize("3i")
        while True:
            data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(creds) +
                                                socket.CMSG_SPACE(16 * 4))
            pid = None
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", value[:creds])[0]
                elif level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    for fd in struct.unpack("%di" % (len(value) // 4), value):
                        os.close(fd)
            self.messages.append((pid, data.decode(), running(pid)))

    def said(self, pid, text):
        return [m for m in self.messages if m[0] == pid and text in m[1]]


def running(pid):
    """Alive and not yet a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, TypeError):
        return False


def wait_exit(pid, timeout=60):
    """The status of pid, a child of the test (its parent, or this test as
    subreaper once the parent is gone); None if it does not end in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    return None


def handover(s, what):
    """USR2 to s.pid under load; the new pid, the load's counts."""
    ready = s.count("the new process is ready")
    load = Load(s.port, fresh=4, kept=4).start()
    harness.wait_until(lambda: load.ok >= 200, timeout=60, what="answers before")
    os.kill(s.pid, signal.SIGUSR2)
    harness.wait_until(lambda: s.count("the new process is ready") > ready, timeout=60,
                       what="the new process ready")
    new = int(re.findall(r'ready; draining" new_pid=(\d+)', s.text())[-1])
    code = s.proc.wait(60) if s.proc and s.proc.pid == s.pid else wait_exit(s.pid)
    s.proc = None
    before = load.ok
    harness.wait_until(lambda: load.ok >= before + 200, timeout=60, what="answers after")
    ok, refused, failed, again = load.stop()
    s.spent += ok
    remaining, end = s.probe()
    if end == s.window:
        harness.eq(remaining, LIMIT - s.spent,
                   "%s: backend memory's counters carried: key k's remaining is the limit less "
                   "every check answered, by either process (%d)" % (what, s.spent))
    else:
        harness.skip(1, "a window boundary passed during the test")
    harness.eq(code, 0, "%s: the old process (%d) exits 0" % (what, s.pid))
    harness.eq((refused, failed), (0, 0),
               "%s: %d answers, 0 refused, 0 failed (%d sent again after an idle keep-alive "
               "close) %s" % (what, ok, again, load.failures[:3]))
    harness.ok(s.serving(), "%s: the new process (%d) serves" % (what, new))
    main = s.notify.said(s.pid, "MAINPID=%d" % new)
    harness.ok(len(main) == 1 and main[0][2],
               "%s: the old (main) process told systemd MAINPID=%d while still running "
               "(sd_notify_barrier held its exit)" % (what, new))
    harness.ok(s.notify.said(new, "READY=1"), "%s: the new one sent READY=1" % what)
    harness.wait_until(lambda: s.notify.said(new, "WATCHDOG=1"), timeout=30,
                       what="the new process's watchdog")
    harness.ok(True, "%s: the new one keeps the watchdog (WATCHDOG_PID its own)" % what)
    s.pid = new
    s.fds.append(descriptors(new))
    harness.at_exit(lambda: kill_quietly(new))


def override(s, method, body=None):
    """A run-time override of key "vip" on the admin listener: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", s.admin, timeout=10)
    try:
        conn.request(method, "/v1/overrides/p/vip", body=body)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        conn.close()


def kill_quietly(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def not_ready(what):
    """With Redis: a new process whose Redis does not answer yet (a
    second redis-server, stopped: connections wait, no answer comes) takes
    no connection until it is ready; meanwhile the old one answers every
    check. Then its Redis answers, and the hand-over completes. Without the
    hold, the new process would answer the checks it accepted 503
    (failure_mode closed)."""
    first, second = harness.RedisServer().start(), harness.RedisServer().start()
    s = Setup(REDIS, first.socket_path)
    harness.wait_until(lambda: s.serving(), timeout=60, what="ready")
    s.write_config(REDIS % (s.port, s.admin, second.socket_path))
    second.proc.send_signal(signal.SIGSTOP)
    load = Load(s.port, fresh=4, kept=4).start()
    starting = s.count("handing over to a new process")
    os.kill(s.pid, signal.SIGUSR2)
    harness.wait_until(lambda: s.count("handing over to a new process") > starting, timeout=30,
                       what="the hand-over under way")
    before = load.ok
    harness.wait_until(lambda: load.ok >= before + 500, timeout=60, what="answers meanwhile")
    harness.ok(s.count("the new process is ready") == 0,
               "%s: the new process is not ready while its Redis is stopped" % what)
    second.proc.send_signal(signal.SIGCONT)
    harness.wait_until(lambda: s.count("the new process is ready") > 0, timeout=60,
                       what="the new process ready")
    harness.eq(s.proc.wait(60), 0, "%s: the old process exits 0" % what)
    before = load.ok
    harness.wait_until(lambda: load.ok >= before + 200, timeout=60, what="answers after")
    ok, refused, failed, again = load.stop()
    harness.eq((refused, failed), (0, 0),
               "%s: %d answers, 0 refused, 0 failed (%d sent again) %s"
               % (what, ok, again, load.failures[:3]))
    new = int(re.findall(r'ready; draining" new_pid=(\d+)', s.text())[-1])
    harness.at_exit(lambda: kill_quietly(new))
    harness.ok(s.serving(), "%s: the new process serves" % what)
    os.kill(new, signal.SIGTERM)
    harness.eq(wait_exit(new), 0, "%s: the new process exits 0 at SIGTERM" % what)


def grpc_handover(what, rounds=3):
    """Envoy's clients over gRPC (8 channels) through hand-overs: calls
    that reach the old process during its drain are answered, not refused
    or cut off."""
    import rls_client
    if rls_client._missing():
        for _ in range(3):
            harness.skip(rls_client._missing())
        return
    rls_client.require()
    s = Setup(GRPC, harness.free_port())
    port = int(re.search(r"grpc_listen: 127.0.0.1:(\d+)", open(s.config).read()).group(1))
    load = GrpcLoad(port, "edge", [[("k", "v")]], clients=8).start()
    codes = []
    for _ in range(rounds):
        before = load.ok
        harness.wait_until(lambda: load.ok >= before + 200, timeout=60, what="gRPC answers")
        ready = s.count("the new process is ready")
        os.kill(s.pid, signal.SIGUSR2)
        harness.wait_until(lambda: s.count("the new process is ready") > ready, timeout=60,
                           what="the new process ready")
        codes.append(s.proc.wait(60) if s.proc else wait_exit(s.pid))
        s.proc = None
        s.pid = int(re.findall(r'ready; draining" new_pid=(\d+)', s.text())[-1])
        harness.at_exit(lambda pid=s.pid: kill_quietly(pid))
    before = load.ok
    harness.wait_until(lambda: load.ok >= before + 200, timeout=60, what="gRPC answers after")
    ok, refused, failed, again = load.stop()
    harness.eq(codes, [0] * rounds, "%s: each old process exits 0" % what)
    harness.eq((refused, failed), (0, 0), "%s: %d answers through %d hand-overs, 0 refused, "
               "0 failed (%d cancelled by the client at a GOAWAY, unsent, sent again) %s"
               % (what, ok, rounds, again, load.failures[:3]))
    os.kill(s.pid, signal.SIGTERM)
    harness.eq(wait_exit(s.pid), 0, "%s: the last process exits 0 at SIGTERM" % what)


def unix_answers(path):
    """A check through the unix socket at path: its status, or the error."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(10)
            c.connect(path)
            c.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(BODY), BODY))
            return c.recv(64).split(b" ")[1].decode()
    except OSError as e:
        return str(e)


def unix_listen(what):
    """listen on a unix socket: the file is the new process's after the
    hand-over (the old one, exiting, leaves it), and answers there."""
    d = harness.make_tempdir("rl-handover-unix-")
    path = os.path.join(d, "ratelimitd.sock")
    s = Setup(UNIX, path)
    harness.eq(unix_answers(path), "200", "%s: a check through the socket file" % what)
    ready = s.count("the new process is ready")
    os.kill(s.pid, signal.SIGUSR2)
    harness.wait_until(lambda: s.count("the new process is ready") > ready, timeout=60,
                       what="the new process ready")
    harness.eq(s.proc.wait(60), 0, "%s: the old process exits 0" % what)
    harness.eq(unix_answers(path), "200",
               "%s: the socket file is still there, the new process answering on it" % what)
    new = int(re.findall(r'ready; draining" new_pid=(\d+)', s.text())[-1])
    harness.at_exit(lambda: kill_quietly(new))
    os.kill(new, signal.SIGTERM)
    harness.eq(wait_exit(new), 0, "%s: the new process exits 0 at SIGTERM" % what)
    harness.ok(not os.path.exists(path), "%s: and removes the file" % what)


def failed_start(s, what, reason, timeout=60):
    before = s.count("hand-over failed")
    os.kill(s.pid, signal.SIGUSR2)
    harness.wait_until(lambda: s.count("hand-over failed") > before, timeout=timeout,
                       what="the failure")
    line = [l for l in s.text().splitlines() if "hand-over failed" in l][-1]
    harness.ok(reason in line, "%s: logged (%s)" % (what, line.split("msg=", 1)[1]))
    harness.ok(s.serving() and wait_exit(s.pid, 0) is None, "%s: the old process serves on" % what)


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    harness.ok(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0,
               "the test reaps the processes the hand-overs start")
    s = Setup()
    s.probe()
    harness.eq(override(s, "PUT", '{"tiers":{"t":{"limit":7}},"note":"kept"}')[0], 200,
               "a run-time override set before the hand-over")
    handover(s, "first hand-over")
    status, o = override(s, "GET")
    harness.eq((status, o.get("tiers"), o.get("note")), (200, {"t": {"limit": 7}}, "kept"),
               "backend memory's run-time overrides carried by the hand-over")
    handover(s, "second hand-over")
    harness.eq(s.fds[1], s.fds[0], "the second new process has as many descriptors open as "
               "the first: nothing leaks from one to the next")

    s.write_config("listen: [not a string\n")
    failed_start(s, "invalid policy file", "exited with status 1 before it was ready")
    s.write_config(CONFIG % (harness.free_port(), s.admin))
    failed_start(s, "a changed listen", "exited with status 1 before it was ready")
    harness.ok("listen 127.0.0.1:" in s.text() and "needs a restart, not a hand-over" in s.text(),
               "a changed listen: the new process says a restart is needed")
    s.write_config(CONFIG % (s.port, s.admin))

    real = os.path.join(s.dir, "ratelimitd.real")
    shutil.copy(BINARY, real)
    s.replace_binary("kill -SEGV $$\n")
    failed_start(s, "a crash before ready", "killed by signal 11 before it was ready")

    s.replace_binary('eval "exec $RATELIMITD_HANDOVER_FD>&-"\nexec sleep 30\n')
    failed_start(s, "a new process that closes its socket and lives on",
                 "closed the socket before it was ready (killed)")

    os.chmod(s.binary, 0o644)
    failed_start(s, "not executable", "cannot run the binary: Permission denied")

    # Never ready, its socket open: stopped at HANDOVER_TIMEOUT_S (60 s).
    s.replace_binary("exec sleep 600\n")
    start = time.monotonic()
    failed_start(s, "a new process never ready", "killed by signal 15 before it was ready",
                 timeout=HANDOVER_TIMEOUT_S + 60)
    took = time.monotonic() - start
    harness.ok(HANDOVER_TIMEOUT_S - 1 <= took and "not ready in time; stopping it" in s.text(),
               "a new process never ready: stopped after %.0f s (HANDOVER_TIMEOUT_S), said so"
               % took)

    go = os.path.join(s.dir, "go")
    s.replace_binary('i=0\nwhile [ ! -e "%s" ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); '
                     'done\nexec "%s" "$@"\n' % (go, real))
    starting = s.count("handing over to a new process")
    os.kill(s.pid, signal.SIGUSR2)
    harness.wait_until(lambda: s.count("handing over to a new process") > starting,
                       timeout=30, what="the hand-over under way")
    os.kill(s.pid, signal.SIGUSR2)
    harness.wait_until(lambda: "SIGUSR2 refused: a hand-over is under way" in s.text(),
                       timeout=30, what="the refusal")
    harness.ok(True, "a second USR2 during a hand-over: refused, logged")
    ready = s.count("the new process is ready")
    open(go, "w").close()
    harness.wait_until(lambda: s.count("the new process is ready") > ready, timeout=60,
                       what="the replaced binary ready")
    harness.eq(wait_exit(s.pid), 0, "the old process exits 0 once the replacement is ready")
    s.pid = int(re.findall(r'ready; draining" new_pid=(\d+)', s.text())[-1])
    harness.ok(s.serving() and os.readlink("/proc/%d/exe" % s.pid) == real,
               "the binary now at the path serves (%s)" % real)
    os.kill(s.pid, signal.SIGTERM)
    harness.eq(wait_exit(s.pid), 0, "it exits 0 at SIGTERM")
    not_ready("redis backend")
    grpc_handover("gRPC")
    unix_listen("unix socket")


harness.run(main)
