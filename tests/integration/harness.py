# SPDX-License-Identifier: Apache-2.0
"""harness.py: what every integration test shares.

- RedisServer: a private redis-server on a unix socket in a fresh temporary
  directory, stopped (and its directory removed) when the test exits, even
  on an exception or SIGTERM.
- RedisClient: a minimal synchronous RESP2 client; error replies raise
  RedisError.
- TAP output for automake's tap-driver: ok(), eq(), diag(), skip(),
  skip_all(), failed_count(), done(), or run(main) to turn an unexpected
  exception into "Bail out!".
- Small helpers for tests that start the daemon: find_program(),
  free_port(), wait_until(), make_tempdir().

A test imports it with its own directory on sys.path:

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

Nothing here knows about ratelimitd itself.
"""

import atexit
import faulthandler
import os
import pty
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# A crash of the test's own process (a C extension: grpcio) prints every
# Python thread's stack into the test's log rather than nothing.
faulthandler.enable()

# ---------------------------------------------------------------- processes

_cleanups = []


def _run_cleanups():
    while _cleanups:
        fn = _cleanups.pop()
        try:
            fn()
        except Exception as e:  # keep cleaning up the rest
            sys.stderr.write("harness: cleanup failed: %r\n" % (e,))


atexit.register(_run_cleanups)


def _exit_on_sigterm(signum, frame):
    # atexit handlers only run on a normal exit: make SIGTERM (a test
    # harness timeout) one, so that servers are still stopped.
    sys.exit(128 + signum)


if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def at_exit(fn):
    """Runs fn() when the test exits, after anything registered later."""
    _cleanups.append(fn)


def token_file(token):
    """A file holding token, as auth_token_file wants it (mode 0600, in a
    fresh temporary directory); its path."""
    path = os.path.join(make_tempdir(), "token")
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def make_tempdir(prefix="rl-test-"):
    """A fresh directory, removed with its contents when the test exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    at_exit(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


# Linux: the child gets SIGTERM if the test is killed outright (SIGKILL skips
# atexit), so no server outlives its test. Set by util-linux's setpriv in the
# child rather than by a preexec_fn: with a preexec_fn Python must fork(),
# which runs the pthread_atfork handlers of whatever the test has loaded, and
# grpcio's abort the test ("thread_pool.cc: assertion failed: state_ ==
# State::kRunning") when a fork meets its thread pool stopping after a
# channel's close; without one, subprocess uses vfork, which runs none.
_PDEATHSIG = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []


def module_preload_env(argv, env=None):
    """env (default: ours) for argv, with ASan's runtime preloaded when argv
    is a redis-server that loads the Redis module (--loadmodule) or may
    (--enable-module-command: MODULE LOAD) and the module is built with the
    sanitizers (configure --enable-sanitizers sets
    $RATELIMITD_MODULE_PRELOAD): the instrumented module needs it first in
    the process. None when nothing is to be added to env."""
    preload = os.environ.get("RATELIMITD_MODULE_PRELOAD")
    if not preload or not ("--loadmodule" in argv or "--enable-module-command" in argv):
        return env
    env = dict(os.environ if env is None else env)
    env["LD_PRELOAD"] = preload
    env["ASAN_OPTIONS"] = ":".join(x for x in (env.get("ASAN_OPTIONS"),
                                               "verify_asan_link_order=0") if x)
    return env


def spawn(argv, log_path, **kwargs):
    """Starts argv with stdout and stderr appended to log_path; the process
    is terminated when the test exits (and gets SIGTERM if the test dies
    outright). A redis-server loading the instrumented module gets ASan's
    runtime (module_preload_env). Returns the Popen."""
    env = module_preload_env(argv, kwargs.pop("env", None))
    if env is not None:
        kwargs["env"] = env
    log = open(log_path, "ab")
    try:
        proc = subprocess.Popen(
            _PDEATHSIG + list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            **kwargs
        )
    finally:
        log.close()
    at_exit(lambda: stop_process(proc))
    return proc


def stop_process(proc, timeout=5.0):
    """SIGTERM, then SIGKILL after timeout seconds; returns the exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def find_program(env_var, default):
    """The program named by $env_var (if set and non-empty), else default;
    as an absolute path, or None if it cannot be found."""
    name = os.environ.get(env_var) or default
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name)


def _ephemeral_low():
    """The lowest port the kernel gives outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out by free_port, one file each, shared by every test
# process of the machine (make check -j runs several).
_PORTS_DIR = os.path.join(tempfile.gettempdir(), "ratelimitd-test-ports")


def _claim_port(port):
    """Whether port is now this process's: no other live test process
    holds it (a claim whose process is gone is taken over). A test that
    checked a port free and then bound it a moment later could otherwise
    lose it to another test that checked it in that moment."""
    os.makedirs(_PORTS_DIR, exist_ok=True)
    path = os.path.join(_PORTS_DIR, str(port))
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                with open(path) as f:
                    os.kill(int(f.read() or 0), 0)
                return False  # a live process holds it
            except (ProcessLookupError, ValueError):
                try:
                    os.unlink(path)  # its process is gone
                except FileNotFoundError:
                    pass
                continue
            except (OSError, PermissionError):
                return False
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        at_exit(lambda: os.path.exists(path) and os.unlink(path))
        return True
    return False


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago and that no other
    test process has been given (_claim_port), taken below the kernel's
    ephemeral range: a port bind(0) hands out is in that range, where any
    outgoing connection (to Redis, say) may take it before the daemon binds
    it."""
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _claim_port(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fatal(Exception):
    """An error no retry may swallow: wait_until raises it at once (an
    answer the API contract does not describe is one, openapi_check.py)."""


def wait_until(predicate, timeout=10.0, interval=0.02, what="condition"):
    """Polls predicate() until it returns a true value, which is returned.
    Exceptions from predicate count as "not yet", but for Fatal ones, raised
    at once. Raises TimeoutError after timeout seconds, naming `what` and the
    last exception."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = predicate()
            if v:
                return v
        except Fatal:
            raise
        except Exception as e:
            last = e
        if time.monotonic() >= deadline:
            raise TimeoutError(
                "timed out after %.1fs waiting for %s (last error: %r)" % (timeout, what, last)
            )
        time.sleep(interval)


def in_one_window(seconds, body, what="the counts", fresh_keys=True):
    """Runs body(fresh) inside one fixed window of `seconds` (windows start
    at multiples of it since the epoch, as fixed_window's and Envoy's units
    do) and returns what body returns.

    A test that counts inside such a window sees the count restart when a
    boundary passes, and a slow machine (valgrind) makes that likely, not
    rare. So when a boundary passed while body ran, body runs again with a
    new `fresh` (a string for its keys, so that nothing counted before is
    seen), after waiting for the next boundary when what is left of the
    window is shorter than the last run took. A body whose counters cannot
    be new (a configuration names its keys, or share_threshold makes every
    value one counter) passes fresh_keys=False: a second run then always
    starts at a boundary, in a window nothing has counted in. Three runs at
    most: a body slower than the window fails with its durations. body
    reports no test point: it returns what it saw, compared afterwards."""
    took = []
    for attempt in range(3):
        left = seconds - time.time() % seconds
        if took and (not fresh_keys or left < took[-1] * 1.5):
            time.sleep(left + 0.005)
        fresh = "%d-%d" % (attempt, random.getrandbits(32))
        start = time.time()
        got = body(fresh)
        end = time.time()
        took.append(end - start)
        if start // seconds == end // seconds:
            return got
        diag("%s crossed a %g s window boundary (%.2f s); once more" % (what, seconds, end - start))
    raise Fatal("%s: every run crossed a %g s window boundary (%s s)"
                % (what, seconds, ", ".join("%.2f" % t for t in took)))


def rss_kib(pid):
    """The resident set size of process pid, in KiB (Linux)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def run_on_tty(argv, timeout=10):
    """Runs argv on a terminal of its own (a pty), as a user at a shell
    would: (exit code, or None if it was still running after timeout and
    was killed; what it wrote). A program that prompts (OpenSSL asking for
    a key's passphrase) waits here instead of failing."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    out, rc, deadline = b"", None, time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:  # EIO: the child closed its side
                data = b""
            out += data
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
    if rc is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os.close(fd)
    return rc, out.decode("utf-8", "replace")


def tail(path, nbytes=2000):
    """The last nbytes of a log file, for diagnostics."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - nbytes))
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return "(no log: %s)" % e


# --------------------------------------------------------------------- RESP


class RedisError(Exception):
    """An error reply from Redis. .message is its text, e.g. "ERR ..."."""

    def __init__(self, message):
        super().__init__(message)
        self.message = message


class RedisClient:
    """A minimal synchronous RESP2 client on a unix socket (path) or TCP
    (host, port). command(*args) sends one command and returns its reply:
    str for simple and bulk strings (bytes if decode=False), int, None for a
    null, list for an array (an error inside an array is a RedisError
    object); an error reply is raised as RedisError."""

    def __init__(self, path=None, host="127.0.0.1", port=None, timeout=5.0, decode=True):
        if path is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address = path
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (host, port)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(address)
        except OSError:
            self.sock.close()
            raise
        self.reader = self.sock.makefile("rb")
        self.decode = decode

    def close(self):
        self.reader.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def _encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, bytes):
                b = a
            elif isinstance(a, str):
                b = a.encode("utf-8")
            elif isinstance(a, int) and not isinstance(a, bool):
                b = str(a).encode()
            else:
                raise TypeError("RESP argument must be bytes, str or int: %r" % (a,))
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def _line(self):
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by Redis")
        return line[:-2]

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode("utf-8", "replace")
        if kind == b"-":
            return RedisError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.reader.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed by Redis")
            data = data[:-2]
            return data.decode("utf-8", "surrogateescape") if self.decode else data
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._reply() for _ in range(n)]
        raise ConnectionError("unexpected RESP reply: %r" % (line,))

    def command(self, *args):
        self.sock.sendall(self._encode(args))
        reply = self._reply()
        if isinstance(reply, RedisError):
            raise reply
        return reply


def module_args():
    """["--loadmodule", path] when $RL_TEST_LOADMODULE names the module
    (ratelimitd.so): every redis-server the tests start then has it, and a
    daemon (redis.module: auto) decides through it; [] otherwise."""
    path = os.environ.get("RL_TEST_LOADMODULE")
    return ["--loadmodule", os.path.abspath(path)] if path else []


class RedisServer:
    """A private redis-server: start() it, then client() or socket_path.

    The binary is $REDIS_SERVER, else redis-server on PATH. It listens only on
    a unix socket in a fresh temporary directory (no TCP port), saves
    nothing, and is stopped when the test exits."""

    def __init__(self, binary=None, extra_args=()):
        self.binary = binary or find_program("REDIS_SERVER", "redis-server")
        self.extra_args = list(extra_args)
        self.proc = None
        self.dir = None
        self.socket_path = None
        self.log_path = None

    def start(self, timeout=10.0):
        if not self.binary:
            raise RuntimeError("redis-server not found (set REDIS_SERVER)")
        self.dir = make_tempdir("rl-redis-")
        self.socket_path = os.path.join(self.dir, "redis.sock")
        self.log_path = os.path.join(self.dir, "redis.log")
        argv = [
            self.binary,
            "--port", "0",
            "--unixsocket", self.socket_path,
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", self.dir,
        ] + ([] if "--loadmodule" in self.extra_args else module_args()) + self.extra_args
        self.argv = argv
        return self._launch(timeout)

    def restart(self, timeout=10.0):
        """Stops the server (if still running) and starts a new process on the
        same socket, with no data: what a daemon sees when Redis restarts."""
        self.stop()
        return self._launch(timeout)

    def instrumented(self):
        """Whether this server loads a module built with the sanitizers
        (configure --enable-sanitizers): it then runs with ASan's runtime
        preloaded (spawn), and its log carries any report
        (sanitizer_reports)."""
        return module_preload_env(self.argv) is not None

    def sanitizer_reports(self):
        """The sanitizer lines in the log so far (ASan, UBSan, LeakSanitizer
        at exit): [] for a clean run. Meaningful once the server stopped."""
        with open(self.log_path, errors="replace") as f:
            return [line.rstrip() for line in f
                    if "Sanitizer" in line or "runtime error:" in line]

    def _launch(self, timeout):
        self.proc = spawn(self.argv, self.log_path)

        def answers():
            if self.proc.poll() is not None:
                raise RuntimeError(
                    "redis-server exited with status %s:\n%s"
                    % (self.proc.returncode, tail(self.log_path))
                )
            with RedisClient(self.socket_path, timeout=1.0) as c:
                try:
                    return c.command("PING") == "PONG"
                except RedisError as e:
                    # A server with requirepass is up, just not ours to use.
                    return e.message.startswith("NOAUTH")

        try:
            wait_until(answers, timeout, what="redis-server to answer PING")
        except TimeoutError as e:
            raise RuntimeError("%s\n%s" % (e, tail(self.log_path)))
        return self

    def client(self, **kwargs):
        """A new connection to this server."""
        return RedisClient(self.socket_path, **kwargs)

    def stop(self):
        """Stops the server; returns its exit status (None if never run)."""
        if self.proc is not None:
            return stop_process(self.proc)
        return None


def module_sanitizers_clean(server, what):
    """One test point: server (a RedisServer loading the module), stopped
    now, ran the instrumented module without a sanitizer report: no
    overflow, use after free, undefined behaviour or leak in Redis. Skipped
    when the module is not instrumented (a build without
    --enable-sanitizers; tools/test.sh's distcheck has them)."""
    if not server.instrumented():
        skip("%s: the module is not built with the sanitizers" % what)
        return
    status = server.stop()
    reports = server.sanitizer_reports()
    if not ok(not reports and status == 0,
              "%s: Redis ran the instrumented module with no sanitizer report (exit %s)"
              % (what, status)):
        diag("\n".join(reports[:20]))


# ---------------------------------------------------------------------- TAP


def decision_code():
    """The decision code as the daemon carries it: (the EVAL script of
    $RATELIMITD --print-script, the Function library of $LOCAL_DRIVER
    --print-library), as bytes. Skips the whole test without
    redis-server; bails out without the built programs."""
    if find_program("REDIS_SERVER", "redis-server") is None:
        skip_all("redis-server not found (Debian package redis-server)")
    exe = os.environ.get("RATELIMITD")
    if not exe:
        bail_out("set RATELIMITD to the built daemon")
    driver = find_program("LOCAL_DRIVER", os.path.join("tests", "unit", "local_driver"))
    if not driver:
        bail_out("local_driver not found: build it (make check) or set LOCAL_DRIVER")
    script = subprocess.run([exe, "--print-script"], stdout=subprocess.PIPE, check=True).stdout
    lib = subprocess.run([driver, "--print-library"], stdout=subprocess.PIPE, check=True).stdout
    return script, lib


def flush_repeatedly(client, flush, times=20, gap=0.05):
    """Sends the command flush (FUNCTION FLUSH, SCRIPT FLUSH) times times,
    gap seconds apart, as operators and restarts make them: each one alone
    (back to back in one millisecond, a flush can land between every reload
    and its retry, past the reloads a call may make)."""
    for _ in range(times):
        client.command(*flush)
        time.sleep(gap)


def fixed_window_count(client, key):
    """The units taken in a fixed_window key's current window, as the
    script stores them ("f:<window end µs>:<n>"), or None with no key."""
    v = client.command("GET", key)
    return v.rsplit(":", 1)[1] if v else None


class Tap:
    """Test points in the Test Anything Protocol, plan printed last."""

    def __init__(self, out=sys.stdout):
        self.out = out
        self.count = 0
        self.failed = 0

    def _print(self, text):
        self.out.write(text + "\n")
        self.out.flush()

    def diag(self, message):
        """Prints message as TAP comment lines."""
        for line in str(message).splitlines() or [""]:
            self._print("# " + line)

    def ok(self, cond, desc):
        """One test point; returns cond as a bool."""
        self.count += 1
        if not cond:
            self.failed += 1
        # '#' would start a TAP directive in the description.
        desc = str(desc).replace("\\", "\\\\").replace("#", "\\#").replace("\n", " ")
        self._print("%sok %d - %s" % ("" if cond else "not ", self.count, desc))
        return bool(cond)

    def eq(self, got, want, desc):
        """ok(got == want), showing both when they differ."""
        if self.ok(got == want, desc):
            return True
        self.diag("   got: %r" % (got,))
        self.diag("  want: %r" % (want,))
        return False

    def skip(self, reason):
        """One test point skipped (e.g. an optional program missing)."""
        self.count += 1
        self._print("ok %d # SKIP %s" % (self.count, str(reason).replace("\n", " ")))

    def skip_all(self, reason):
        """Skips the whole test (e.g. redis-server missing): exits 0."""
        self._print("1..0 # SKIP %s" % reason)
        sys.exit(0)

    def bail_out(self, reason):
        self._print("Bail out! %s" % str(reason).replace("\n", " "))
        sys.exit(1)

    def failed_count(self):
        """How many test points have failed so far."""
        return self.failed

    def done(self):
        """Prints the plan and exits: 0 iff every test point passed."""
        self._print("1..%d" % self.count)
        if self.failed:
            self.diag("failed %d of %d" % (self.failed, self.count))
        sys.exit(1 if self.failed else 0)

    def run(self, main):
        """Runs main(), then done(); an exception becomes a diagnostic and a
        "Bail out!" so the driver reports an error rather than a pass."""
        try:
            main()
        except SystemExit:
            raise
        except BaseException as e:
            import traceback

            self.diag(traceback.format_exc())
            self.bail_out("%s: %s" % (type(e).__name__, e))
        self.done()


_tap = Tap()
ok = _tap.ok
eq = _tap.eq
diag = _tap.diag
skip = _tap.skip
failed_count = _tap.failed_count
skip_all = _tap.skip_all
bail_out = _tap.bail_out
done = _tap.done
run = _tap.run
