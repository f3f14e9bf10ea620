# SPDX-License-Identifier: Apache-2.0
"""test_run.py: tools/run.sh, the README's first command, as a user runs it.

- A Redis that the test started (holding a sentinel key) already answers on
  REDIS_PORT: run.sh says so, starts its own redis-server on another port,
  and the daemon answers /check on PORT from that one; the test's Redis gets
  no rl:* key. SIGTERM stops run.sh, its daemon and its Redis.
- REDIS_URL names the test's Redis: used on purpose, no redis-server started.
- BACKEND=memory: /check answers with no Redis and no redis-server started.
- POLICY=FILE: a policy file without listen, backend or redis gets
  run.sh's port and Redis; an edit to it and a SIGHUP to the daemon apply
  the edit (the daemon reads FILE, not a copy); a --config argument is
  refused (exit 64). An error in FILE is reported as FILE:line:col.
- PORT taken (a socket that listens and never answers): run.sh exits
  non-zero with the daemon's bind error, and never says it is up.
- A SIGHUP (a terminal's hang-up) or SIGQUIT (Ctrl-\\) to run.sh's process
  group: run.sh exits 128 + the signal, and leaves no process of the group
  and no temp directory behind. The same when run.sh's own terminal (a
  pty) goes away: what the kernel sends then stops everything.
- What run.sh installs (tools/build.sh -> `tools/deps.sh`, no flag) names no
  test tool and no server but redis-server; `--test` adds them.

RATELIMITD (set by make check) is the built daemon, so run.sh does not
build."""
import http.client
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRC = os.environ.get("RL_SRCDIR", ".")
BINARY = harness.find_program("RATELIMITD", "./ratelimitd")
# Test tools and servers: never in the list that the README's first command
# installs (redis-server is run.sh's throwaway Redis, and no service).
NOT_FOR_RUN = ("nginx", "caddy", "apache2", "lighttpd", "valgrind", "clang", "clang-format",
               "libclang-rt-14-dev", "python3-grpcio", "python3-grpc-tools", "nghttp2-client",
               "podman", "buildah", "man-db", "groff-base", "redis-sentinel", "mmdebstrap",
               "lintian", "debhelper", "prometheus", "shellcheck")
CHECK = json.dumps({"policy": "login", "key": "ip:192.0.2.7"})


def check(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("POST", "/check", CHECK, {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def processes(field, value):
    """(pid, command name) of every process whose /proc/PID/stat field
    (1: the parent, 2: the process group, 3: the session) is value."""
    found = []
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[field]) == value:
                with open("/proc/%s/comm" % d) as f:
                    found.append((int(d), f.read().strip()))
        except (OSError, ValueError, IndexError):
            pass
    return found


def children(pid):
    """The command names of pid's child processes."""
    return [name for _, name in processes(1, pid)]


def daemon_of(proc):
    """The pid of run.sh's ratelimitd."""
    pids = [p for p, name in processes(1, proc.pid) if name == "ratelimitd"]
    harness.eq(len(pids), 1, "one ratelimitd runs under run.sh")
    return pids[0]


def run_sh(env_extra, tmp, name, **kwargs):
    env = dict(os.environ, RATELIMITD=os.path.abspath(BINARY), **env_extra)
    log = os.path.join(tmp, name + ".log")
    proc = harness.spawn(["sh", os.path.join(SRC, "tools", "run.sh")], log, env=env, **kwargs)
    return proc, log


def run_sh_to_end(env_extra):
    """run.sh run to its end: (exit status, stdout and stderr together)."""
    env = dict(os.environ, RATELIMITD=os.path.abspath(BINARY), **env_extra)
    res = subprocess.run(["sh", os.path.join(SRC, "tools", "run.sh")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return res.returncode, res.stdout


def answered(proc, port, log):
    """The first 200 to /check from run.sh's daemon that Redis decided: 503
    until its Redis is connected, or, under a policy whose failure_mode is
    open (the default, as in POLICY=FILE's), a degraded 200 without
    figures."""
    def up():
        if proc.poll() is not None:
            raise RuntimeError("run.sh exited %s:\n%s" % (proc.returncode, harness.tail(log)))
        got = check(port)
        return got if got[0] == 200 and not got[1].get("degraded") else None
    return harness.wait_until(up, 15, 0.1, "run.sh's daemon to answer /check")


def stop(proc, log, what):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(15)
    except Exception:
        rc = None
    harness.eq(rc, 0, "%s: SIGTERM stops run.sh, exit 0" % what)


def deps_lists():
    def listed(*flags):
        res = subprocess.run(["sh", os.path.join(SRC, "tools", "deps.sh"), "--list"] + list(flags),
                             capture_output=True, text=True, check=True)
        return res.stdout.split()
    run, test = listed(), listed("--test")
    with open(os.path.join(SRC, "tools", "build.sh")) as f:
        harness.ok(re.search(r"(?m)^sh tools/deps\.sh$", f.read()),
                   "tools/build.sh (so run.sh) installs tools/deps.sh's default list")
    harness.ok("redis-server" in run and "gcc" in run, "the default list builds and has run.sh's Redis")
    bad = sorted(set(run) & set(NOT_FOR_RUN))
    harness.eq(bad, [], "the default list has no test tool and no server but redis-server")
    harness.ok(set(run) < set(test) and {"nginx", "valgrind", "podman"} <= set(test),
               "--test adds the test tools to it")
    harness.ok("redis-server" not in listed("--build"), "--build (the image's build stage): no Redis")


def main():
    deps_lists()
    if not BINARY:
        harness.skip_all("ratelimitd is not built (set RATELIMITD)")
    if not harness.find_program("REDIS_SERVER", "redis-server") or not harness.find_program(
            "REDIS_CLI", "redis-cli"):
        harness.skip_all("redis-server or redis-cli is not installed (tools/deps.sh)")
    tmp = harness.make_tempdir("rl-run-")
    theirs_port = harness.free_port()
    theirs = harness.RedisServer(extra_args=["--port", str(theirs_port), "--bind", "127.0.0.1"])
    theirs.start()
    with theirs.client() as c:
        c.command("SET", "sentinel", "theirs")

    # 1. A Redis answers on REDIS_PORT already: left alone.
    port = harness.free_port()
    proc, log = run_sh({"PORT": str(port), "REDIS_PORT": str(theirs_port)}, tmp, "occupied")
    status, body = answered(proc, port, log)
    harness.ok(status == 200 and body.get("allowed") is True,
               "the daemon answers /check on PORT %d: %s %s" % (port, status, body.get("allowed")))
    with open(log) as f:
        out = f.read()
    harness.ok("already answers on 127.0.0.1:%d" % theirs_port in out,
               "run.sh says something already answers on REDIS_PORT")
    ours = re.findall(r"started redis-server on (127\.0\.0\.1:\d+)", out)
    harness.ok(ours and ours[0] != "127.0.0.1:%d" % theirs_port,
               "run.sh started its own Redis on another port: %s" % ours)
    harness.ok("redis-server" in children(proc.pid), "a redis-server runs under run.sh")
    if ours:
        host, p = ours[0].split(":")
        with harness.RedisClient(host=host, port=int(p)) as c:
            keys = c.command("KEYS", "rl:*")
        harness.ok(len(keys) > 0, "the decision's keys are in run.sh's Redis: %d" % len(keys))
    with theirs.client() as c:
        harness.eq(c.command("KEYS", "rl:*"), [], "the test's Redis got no rl:* key")
        harness.eq(c.command("DBSIZE"), 1, "the test's Redis holds only its sentinel key")
    stop(proc, log, "occupied port")
    harness.ok(not children(proc.pid), "run.sh's daemon and Redis are gone")
    if ours:
        try:
            with harness.RedisClient(host=host, port=int(p), timeout=1) as c:
                c.command("PING")
            gone = False
        except OSError:
            gone = True
        harness.ok(gone, "run.sh's Redis on %s stopped with it" % ours[0])

    # 2. REDIS_URL: the test's Redis, on purpose.
    port = harness.free_port()
    url = "redis://127.0.0.1:%d/0" % theirs_port
    proc, log = run_sh({"PORT": str(port), "REDIS_URL": url}, tmp, "url")
    status, body = answered(proc, port, log)
    harness.eq(status, 200, "REDIS_URL: /check answers")
    harness.ok("redis-server" not in children(proc.pid), "REDIS_URL: no redis-server started")
    with theirs.client() as c:
        keys = c.command("KEYS", "rl:*")
        harness.ok(len(keys) > 0, "REDIS_URL: the decision is in that Redis (%d keys)" % len(keys))
        harness.eq(c.command("GET", "sentinel"), "theirs", "its sentinel key is untouched")
    stop(proc, log, "REDIS_URL")

    # 3. BACKEND=memory: no Redis at all (REDIS_PORT names the test's Redis,
    # which must not matter).
    port = harness.free_port()
    with theirs.client() as c:
        before = c.command("DBSIZE")
    proc, log = run_sh({"PORT": str(port), "BACKEND": "memory", "REDIS_PORT": str(theirs_port)},
                       tmp, "memory")
    status, body = answered(proc, port, log)
    harness.ok(status == 200 and body.get("allowed") is True, "BACKEND=memory: /check answers")
    names = children(proc.pid)
    harness.ok("redis-server" not in names and "ratelimitd" in names,
               "BACKEND=memory: only the daemon runs under run.sh: %s" % names)
    with open(log) as f:
        harness.ok("backend: memory, no Redis" in f.read(), "BACKEND=memory: run.sh says no Redis")
    with theirs.client() as c:
        harness.eq(c.command("DBSIZE"), before, "BACKEND=memory: the test's Redis unchanged")
    stop(proc, log, "BACKEND=memory")

    # 4. POLICY=FILE: the user's own policy (the README's quickstart has no
    # listen, backend nor redis), with run.sh's port and Redis added, while
    # the test's Redis still answers on REDIS_PORT.
    mine = os.path.join(tmp, "quickstart.yaml")
    with open(mine, "w") as f:
        f.write("policies:\n  login:\n    tiers:\n"
                "      - {name: burst, algorithm: token_bucket, limit: 10, window: 1m, burst: 3}\n")
    with theirs.client() as c:
        before = sorted(c.command("KEYS", "*"))  # step 2 wrote there on purpose
    port = harness.free_port()
    proc, log = run_sh({"PORT": str(port), "REDIS_PORT": str(theirs_port), "POLICY": mine},
                       tmp, "policy")
    status, body = answered(proc, port, log)
    harness.ok(status == 200 and body.get("limit") == 3,
               "POLICY=FILE: the daemon answers from that file's policy: %s %s"
               % (status, body.get("limit")))
    with theirs.client() as c:
        harness.eq(sorted(c.command("KEYS", "*")), before,
                   "POLICY=FILE: the test's Redis is left as it was")
    reload_applies(proc, port, log, mine)
    stop(proc, log, "POLICY=FILE")
    env = dict(os.environ, RATELIMITD=os.path.abspath(BINARY))
    res = subprocess.run(["sh", os.path.join(SRC, "tools", "run.sh"), "--config", mine], env=env,
                         capture_output=True, text=True, timeout=30)
    harness.ok(res.returncode == 64 and "POLICY=" in res.stderr,
               "a --config argument is refused (it would bypass run.sh's port and Redis): %s"
               % res.stderr.strip())

    # A wrong BACKEND is a usage error, before anything starts.
    proc, log = run_sh({"BACKEND": "postgres"}, tmp, "bad")
    harness.eq(proc.wait(10), 64, "BACKEND=postgres: exit 64")

    error_names_file(tmp)
    port_taken(tmp)
    for sig in (signal.SIGHUP, signal.SIGQUIT):
        group_signal(tmp, sig)
    terminal_closed(tmp)


def reload_applies(proc, port, log, mine):
    """FILE edited (burst 3 -> 5) and the daemon sent a SIGHUP: its answers
    take the edit. The daemon of a copy of FILE would say changes=none."""
    with open(mine, "w") as f:
        f.write("policies:\n  login:\n    tiers:\n"
                "      - {name: burst, algorithm: token_bucket, limit: 10, window: 1m, burst: 5}\n")
    os.kill(daemon_of(proc), signal.SIGHUP)

    def reloaded():
        got = check(port)
        return got if got[1].get("limit") == 5 else None
    try:
        harness.wait_until(reloaded, 15, 0.1, "the edit of POLICY=FILE to apply")
        applied = True
    except TimeoutError as e:
        harness.diag("%s\n%s" % (e, harness.tail(log)))
        applied = False
    harness.ok(applied, "POLICY=FILE edited, SIGHUP to the daemon: the edit applies")


def error_names_file(tmp):
    """An error in FILE is said as FILE:line:col, the file the user wrote."""
    bad = os.path.join(tmp, "typo.yaml")
    with open(bad, "w") as f:
        f.write("policies:\n  login:\n    tiers:\n"
                "      - {name: burst, algorithm: token_bucket, limit: 10, windw: 1m, burst: 3}\n")
    rc, out = run_sh_to_end({"PORT": str(harness.free_port()), "BACKEND": "memory",
                             "POLICY": bad})
    harness.ok(rc != 0 and ("%s:4:" % bad) in out and "unknown field" in out,
               "an error in POLICY=FILE names that file: exit %d: %s" % (rc, out.strip()))


def port_taken(tmp):
    """PORT taken by a socket that listens and never answers: the daemon
    cannot bind, run.sh passes its message on, exits non-zero, and never
    announced the daemon."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        rc, out = run_sh_to_end({"PORT": str(port), "BACKEND": "memory"})
    harness.ok(rc != 0, "PORT taken: run.sh exits non-zero: %d" % rc)
    harness.ok("Address already in use" in out or "cannot bind" in out,
               "PORT taken: the daemon's own message is shown")
    harness.ok("ratelimitd on http://" not in out,
               "PORT taken: run.sh never says the daemon is up:\n%s" % out.strip())


def group_signal(tmp, sig):
    """sig to run.sh's whole process group, as a terminal's hang-up (HUP)
    or Ctrl-\\ (QUIT) sends it: run.sh, its daemon and its Redis stop, the
    temp directory goes."""
    name = signal.Signals(sig).name
    tmpdir = os.path.join(tmp, "tmp-" + name)
    os.mkdir(tmpdir)
    port = harness.free_port()
    proc, log = run_sh({"PORT": str(port), "REDIS_PORT": str(harness.free_port()),
                        "TMPDIR": tmpdir}, tmp, name, start_new_session=True)
    answered(proc, port, log)
    names = children(proc.pid)
    harness.ok("ratelimitd" in names and "redis-server" in names,
               "%s: run.sh runs a daemon and a Redis: %s" % (name, names))
    harness.ok(os.listdir(tmpdir), "%s: run.sh made its temp directory in TMPDIR" % name)
    os.killpg(proc.pid, sig)
    try:
        rc = proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    harness.eq(rc, 128 + sig, "%s to the process group: run.sh exits 128 + %d" % (name, sig))

    def group_gone():
        return not processes(2, proc.pid)
    try:
        harness.wait_until(group_gone, 15, 0.1, "run.sh's process group to end")
    except TimeoutError:
        pass
    left = processes(2, proc.pid)
    harness.eq(left, [], "%s: no process of run.sh's group is left" % name)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
    harness.eq(os.listdir(tmpdir), [], "%s: run.sh's temp directory is gone" % name)



def terminal_closed(tmp):
    """run.sh on a terminal of its own, as the leader of its session, and
    the terminal goes away (the pty's master closed, as a terminal window
    is): the kernel's hang-up stops run.sh, its daemon and its Redis, and
    the temp directory goes."""
    tmpdir = os.path.join(tmp, "tmp-pty")
    os.mkdir(tmpdir)
    port = harness.free_port()
    env = dict(os.environ, RATELIMITD=os.path.abspath(BINARY), PORT=str(port),
               REDIS_PORT=str(harness.free_port()), TMPDIR=tmpdir)
    run = os.path.abspath(os.path.join(SRC, "tools", "run.sh"))
    pid, fd = pty.fork()
    if pid == 0:
        os.execve("/bin/sh", ["sh", run], env)
    harness.at_exit(lambda: [os.kill(p, signal.SIGKILL) for p, _ in processes(3, pid)])
    out = []

    def up():
        # Read what run.sh writes, so that it never blocks on a full pty.
        while select.select([fd], [], [], 0)[0]:
            out.append(os.read(fd, 4096).decode("utf-8", "replace"))
        check(port)
        return True
    try:
        harness.wait_until(up, 15, 0.1, "run.sh on a pty to answer /check")
    except TimeoutError as e:
        harness.diag("%s\n%s" % (e, "".join(out)))
    names = [name for _, name in processes(3, pid)]
    harness.ok("ratelimitd" in names and "redis-server" in names,
               "on a pty: run.sh runs a daemon and a Redis in its session: %s" % names)
    os.close(fd)

    def ended():
        done, status = os.waitpid(pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None
    try:
        rc = harness.wait_until(ended, 30, 0.1, "run.sh to end with its terminal")
    except TimeoutError:
        rc = None
    harness.eq(rc, 128 + signal.SIGHUP, "terminal closed: run.sh exits 129 (its hang-up)")
    try:
        harness.wait_until(lambda: not processes(3, pid), 15, 0.1, "run.sh's session to end")
    except TimeoutError:
        pass
    harness.eq(processes(3, pid), [], "terminal closed: no process of run.sh's session is left")
    harness.eq(os.listdir(tmpdir), [], "terminal closed: run.sh's temp directory is gone")


harness.run(main)
