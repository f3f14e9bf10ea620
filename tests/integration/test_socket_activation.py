# SPDX-License-Identifier: Apache-2.0
"""test_socket_activation.py: listening sockets passed at start
(LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES: systemd's socket activation;
src/lib/listen_fds.c).

- A restart loop under load: a supervisor here holds the socket, as
  systemd does for ratelimitd.socket, and starts the daemon (2 workers,
  sharing the one socket) with it again and again (SIGTERM, wait for the exit, start): 4 clients on fresh
  connections see 0 refused, 0 failed; connections made between two
  daemons wait in the backlog. With state_file, the key's remaining after
  the loop is the limit less every check answered.
- Matching, with systemd-socket-activate: by FileDescriptorName= (the name
  wins over the address the field says), by address (no names, the
  sockets passed in the other order than the fields); a passed socket
  matched to no field and a field not passed are start-up errors naming
  them; LISTEN_PID not the daemon's: the sockets are not its own, it binds
  its address.
- SIGHUP keeps the passed socket: a changed limit applies, a changed
  listen is refused (a restart field) and the passed socket still serves.

redis_unready needs redis-server; the rest, no Redis (backend: memory)."""
import os
import http.client
import json
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import BINARY, WRAPPER  # noqa: E402
from restart_load import BODY, HEADERS, Load  # noqa: E402
from supervisor import bound, spawn_with  # noqa: E402

# A week's window: the loop's count holds within one (a boundary crossed
# meanwhile is detected, and said, rather than taken for a loss).
POLICY = "policies:\n  p: {tiers: [{name: t, algorithm: fixed_window, limit: %d, window: 7d}]}\n"
LIMIT = 10 ** 9
RESTARTS = 5
ACTIVATE = harness.find_program("SYSTEMD_SOCKET_ACTIVATE", "systemd-socket-activate")


def write_config(d, listen, limit=LIMIT, admin=None, workers=1, extra=""):
    path = os.path.join(d, "ratelimitd.yaml")
    with open(path + ".tmp", "w") as f:
        f.write("listen: %s\nbackend: memory\nworkers: %d\n%s" % (listen, workers, extra))
        if admin:
            f.write("admin_listen: %s\n" % admin)
        f.write(POLICY % limit)
    os.rename(path + ".tmp", path)
    return path


def serving(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return c.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def started(log, n):
    def seen():
        with open(log) as f:
            return f.read().count("ratelimitd started") >= n
    return seen


def probe(port):
    """One check on the load's key: its remaining and its window's end (in
    minutes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/check", body=BODY, headers=HEADERS)
        answer = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    return answer["remaining"], round((time.time() * 1000 + answer["reset_ms"]) / 60000)


def restart_loop(d):
    port = harness.free_port()
    state = os.path.join(d, "state")
    config = write_config(d, "127.0.0.1:%d" % port, workers=2, extra="state_file: %s\n" % state)
    log = os.path.join(d, "loop.log")
    sock = bound(port)
    proc = spawn_with([sock], ["listen"], config, log)
    harness.wait_until(started(log, 1), timeout=60, what="the first daemon")
    _, window = probe(port)
    load = Load(port, fresh=4).start()
    codes = []
    for i in range(RESTARTS):
        # Each daemon answers some checks before it goes.
        before = load.ok
        harness.wait_until(lambda: load.ok >= before + 50, timeout=60, what="answers")
        proc.send_signal(signal.SIGTERM)
        codes.append(proc.wait(60))
        proc = spawn_with([sock], ["listen"], config, log)
        harness.wait_until(started(log, i + 2), timeout=60, what="daemon %d" % (i + 2))
    before = load.ok
    harness.wait_until(lambda: load.ok >= before + 50, timeout=60, what="answers")
    ok, refused, failed, _ = load.stop()
    harness.eq(codes, [0] * RESTARTS, "each of %d daemons exits 0 at SIGTERM" % RESTARTS)
    harness.ok(ok > 0, "%d answers through %d restarts" % (ok, RESTARTS))
    harness.eq((refused, failed), (0, 0), "0 refused, 0 failed (%s)" % load.failures[:3])
    remaining, end = probe(port)
    if end == window:
        harness.eq(remaining, LIMIT - ok - 2, "with state_file, the key's remaining after %d "
                   "restarts is the limit less every check answered (%d)" % (RESTARTS, ok + 2))
    else:
        harness.skip("a window boundary passed during the loop")
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    sock.close()


def reload_keeps(d):
    port, other = harness.free_port(), harness.free_port()
    config = write_config(d, "127.0.0.1:%d" % port, limit=1)
    log = os.path.join(d, "reload.log")
    sock = bound(port)
    proc = spawn_with([sock], ["listen"], config, log)
    harness.wait_until(started(log, 1), timeout=60, what="the daemon")
    one = Load(port, fresh=0)
    harness.eq([one._fresh(), one._fresh()], [200, 429], "limit 1: the second check is denied")
    write_config(d, "127.0.0.1:%d" % port, limit=5)
    proc.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "reloaded" in open(log).read(), timeout=30, what="the reload")
    harness.eq(one._fresh(), 200, "after a SIGHUP reload to limit 5 the passed socket serves "
               "a third check, allowed")
    write_config(d, "127.0.0.1:%d" % other, limit=5)
    proc.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "reload refused" in open(log).read(), timeout=30,
                       what="the refusal")
    harness.ok("field=listen" in open(log).read(),
               "a changed listen under activation: reload refused, naming listen")
    harness.ok(serving(port) and not serving(other),
               "the passed socket still serves; nothing bound at the new address")
    proc.send_signal(signal.SIGTERM)
    harness.eq(proc.wait(60), 0, "exits 0")
    sock.close()


def activate(d, listens, names, config, name):
    """systemd-socket-activate with these sockets; it waits for a first
    connection to start the daemon: made here."""
    argv = [ACTIVATE] + ["-l%s" % l for l in listens]
    if names:
        argv.append("--fdname=" + ":".join(names))
    log = os.path.join(d, name + ".log")
    proc = harness.spawn(argv + WRAPPER + [BINARY, "--config", config], log)
    port = int(listens[0].rsplit(":", 1)[1])
    harness.wait_until(lambda: "Listening on " + listens[-1] in open(log).read(), timeout=30,
                       what="systemd-socket-activate listening")
    return proc, log, port


def matching(d):
    p1, p2, p3 = harness.free_port(), harness.free_port(), harness.free_port()
    # By name: the socket named listen serves checks wherever it is.
    config = write_config(d, "127.0.0.1:%d" % p1)
    proc, log, _ = activate(d, ["127.0.0.1:%d" % p3], ["listen"], config, "byname")
    harness.ok(serving(p3), "by name: the socket named listen serves, at its own address")
    harness.ok(not serving(p1), "and the field's address is not bound")
    proc.send_signal(signal.SIGTERM)
    harness.eq(proc.wait(60), 0, "exits 0")
    # By address: no names, passed admin first.
    config = write_config(d, "127.0.0.1:%d" % p1, admin="127.0.0.1:%d" % p2)
    proc, log, _ = activate(d, ["127.0.0.1:%d" % p2, "127.0.0.1:%d" % p1], [], config, "byaddr")
    c = Load(p1, fresh=0)
    harness.eq(c._fresh(), 200, "by address: POST /check on listen's socket")
    harness.ok(serving(p2), "and /healthz on admin_listen's")
    proc.send_signal(signal.SIGTERM)
    harness.eq(proc.wait(60), 0, "exits 0")


def errors(d):
    p1, p2, p3 = harness.free_port(), harness.free_port(), harness.free_port()
    config = write_config(d, "127.0.0.1:%d" % p1)
    proc, log, _ = activate(d, ["127.0.0.1:%d" % p1, "127.0.0.1:%d" % p2], [], config, "extra")
    serving(p1)  # the first connection starts it
    harness.eq(proc.wait(60), 1, "a passed socket matched to no field: exit 1")
    harness.ok("passed socket 4 (name unknown) matches none" in open(log).read(),
               "naming it: " + harness.tail(log, 300).strip().splitlines()[-1])
    config = write_config(d, "127.0.0.1:%d" % p1, admin="127.0.0.1:%d" % p2)
    proc, log, _ = activate(d, ["127.0.0.1:%d" % p1], ["listen"], config, "missing")
    serving(p1)
    harness.eq(proc.wait(60), 1, "a field set and not passed: exit 1")
    harness.ok("admin_listen 127.0.0.1:%d: no socket was passed" % p2 in open(log).read(),
               "naming it: " + harness.tail(log, 300).strip().splitlines()[-1])
    # LISTEN_PID of another process: the socket is not the daemon's.
    config = write_config(d, "127.0.0.1:%d" % p1)
    sock = bound(p3)
    log = os.path.join(d, "notours.log")
    proc = spawn_with([sock], ["listen"], config, log, listen_pid="1")
    harness.wait_until(started(log, 1), timeout=60, what="the daemon")
    harness.ok(serving(p1), "LISTEN_PID not its own: the daemon binds its listen address")
    sock.close()
    harness.ok(not serving(p3), "and never accepts on the socket it was not meant to take")
    proc.send_signal(signal.SIGTERM)
    harness.eq(proc.wait(60), 0, "exits 0")


def check_status(port, out, sent):
    """POST /check on a new connection; out gets the status (or the
    error), sent is set once the request is written."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as c:
            c.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(BODY), BODY))
            sent.set()
            out.append(int(c.recv(64).split(b" ")[1]))
    except (OSError, IndexError, ValueError) as e:
        sent.set()
        out.append(repr(e))


def redis_unready(d):
    """A daemon started on a held socket while its Redis does not answer
    (SIGSTOP): connections wait in the backlog until it is ready, so the
    check that waited is decided (200), not answered by failure_mode
    closed (503); with Redis stopped for good, past the hold (5 s) the
    check gets failure_mode's 503."""
    redis = harness.RedisServer().start()
    port = harness.free_port()
    config = os.path.join(d, "redis.yaml")
    with open(config, "w") as f:
        f.write("listen: 127.0.0.1:%d\nredis:\n  url: unix:%s\n  timeout: 200ms\n"
                % (port, redis.socket_path)
                + POLICY.replace("{tiers:", "{failure_mode: closed, tiers:") % LIMIT)
    sock = bound(port)
    for stopped_for_good in (False, True):
        log = os.path.join(d, "unready%d.log" % stopped_for_good)
        redis.proc.send_signal(signal.SIGSTOP)
        proc = spawn_with([sock], ["listen"], config, log)
        harness.wait_until(started(log, 1), timeout=60, what="the daemon to start")
        out, sent = [], threading.Event()
        t = threading.Thread(target=check_status, args=(port, out, sent))
        t.start()
        sent.wait(60)
        if not stopped_for_good:
            time.sleep(1)  # room for an unready answer, were one given
            redis.proc.send_signal(signal.SIGCONT)
        t.join(90)
        if stopped_for_good:
            harness.eq(out, [503], "Redis stopped for good: past the hold, failure_mode's 503")
            redis.proc.send_signal(signal.SIGCONT)
        else:
            harness.eq(out, [200], "a check sent while Redis did not answer waited for "
                       "readiness and was decided (200, not failure_mode's 503)")
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    sock.close()
    redis.stop()


def main():
    d = harness.make_tempdir("rl-activation-")
    restart_loop(d)
    reload_keeps(d)
    redis_unready(d)
    if not ACTIVATE:
        for _ in range(13):  # matching's and errors' points
            harness.skip("systemd-socket-activate not installed (Debian package systemd)")
        return
    matching(d)
    errors(d)


harness.run(main)
