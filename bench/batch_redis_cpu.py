#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""batch_redis_cpu.py [SIZES...]: Redis's own CPU per request, sent alone
or in batches (redis.batch), with no daemon in the way.

Starts a private redis-server (unix socket, temp dir), loads the Function
library ($LOCAL_DRIVER --print-library, default tests/unit/local_driver),
and sends REQUESTS (default 20000) fixed_window checks on spread keys
(100000, limit never reached, `clock: redis`) in rounds of DEPTH (default
64) requests written at once, as a worker does at the end of a loop turn:
DEPTH single FCALLs pipelined (size 1), or DEPTH/size FCALLs of size
requests each. Prints per size, best of RUNS (default 3): Redis's main
thread CPU (user + sys, INFO cpu) per request, and the part inside the
calls (INFO commandstats). Bounded: every read has a timeout.

CLOCK=local sends the time in each request (`clock: local`) instead of ""
(the server's TIME). LIBRARIES=a.lua,b.lua... compares library texts
(e.g. saved --print-library outputs of two builds) on one Redis: each
round runs every library once, in rotated order, after a FLUSHALL (every
key new), and the medians over RUNS rounds are printed per library, with
the median of the per-round differences from the first library: the box's
noise moves both sides of a pair alike. Two names in LIBRARIES are built
in, floors for the same requests: `minimal`, a bare INCRBY + PEXPIRE per
key; `getset`, a GET and a SET ... PX of a constant value per key with a
9-integer reply per request (the Redis work a check cannot avoid).
"""
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

POLICY = "0 fixed_window 1000000000 3600000000 0 0"


def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, path):
        """path: a unix socket's, or (host, port) for TCP."""
        self.s = socket.socket(socket.AF_INET if isinstance(path, tuple) else socket.AF_UNIX)
        self.s.settimeout(30)
        self.s.connect(path)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.s.recv(1 << 20)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b"+", b":"):
            return rest.decode()
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(1 << 20)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data.decode()
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError("unexpected reply %r" % line)

    def command(self, *args):
        self.s.sendall(resp(args))
        return self.reply()


def info(c, section, prefix):
    out = {}
    for line in c.command("INFO", section).split("\r\n"):
        if line.startswith(prefix):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def now_arg():
    if os.environ.get("CLOCK") == "local":
        return str(int(time.time() * 1e6))
    return ""


def run(c, fn, size, depth, total, rng, head=None, stat="cmdstat_fcall", policy=POLICY):
    """Redis CPU and in-command time per request; head: the command and
    name before numkeys (default FCALL fn), stat: its commandstats row."""
    head = head or ["FCALL", fn]
    c.command("CONFIG", "RESETSTAT")
    cpu = info(c, "cpu", "used_cpu_")
    c0 = float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])
    sent = 0
    while sent < total:
        cmds = []
        now = now_arg()
        for _ in range(depth // size):
            keys = ["rl:{b:%d}:t" % rng.randrange(100000) for _ in range(size)]
            if size == 1:
                cmds.append(resp(head + [1, keys[0], now, "0", "1", policy]))
            else:
                cmds.append(resp(head + [size] + keys + ["B", size] + ["1", "4"] * size
                                 + [now, "0", "1", policy] * size))
        c.s.sendall(b"".join(cmds))
        for _ in cmds:
            c.reply()
        sent += depth
    cpu = info(c, "cpu", "used_cpu_")
    c1 = float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])
    row = info(c, "commandstats", stat).get(stat, "usec=0")
    usec = int(row.split("usec=")[1].split(",")[0])
    return (c1 - c0) * 1e6 / sent, usec / sent


BUILTIN = {
    "minimal": """#!lua name=minimal
local R = {}
local function f(keys, argv)
    for i = 1, #keys do
        R[i] = redis.call('INCRBY', keys[i], 1)
        redis.call('PEXPIRE', keys[i], 3601000)
    end
    for i = #keys + 1, #R do
        R[i] = nil
    end
    return R
end
redis.register_function('minimal', f)
""",
    "getset": """#!lua name=getset
local R = {}
local function f(keys, argv)
    for i = 1, #keys do
        redis.pcall('GET', keys[i])
        redis.call('SET', keys[i], 'f:1764250800000000:1', 'PX', '3601000')
        R[i] = {1, 1, 1, 1, 1, 1, 1, 1, 1}
    end
    for i = #keys + 1, #R do
        R[i] = nil
    end
    if #keys == 1 and argv[1] ~= 'B' then
        return R[1]
    end
    return R
end
redis.register_function('getset', f)
""",
}


def stop_redis(redis, d):
    """Stops a private redis-server (the Popen redis) and removes its temp
    dir d with whatever it left there: the teardown of this script's and
    module_cost.py's Redis."""
    redis.terminate()
    redis.wait(10)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    os.rmdir(d)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2


def compare(c, libs, sizes, depth, total, runs, rng):
    fns = [c.command("FUNCTION", "LOAD", "REPLACE", BUILTIN.get(f) or open(f).read())
           for f in libs]
    print("%6s %-40s %12s %12s %12s %12s" % ("batch", "library", "redis_us", "in_fcall_us",
                                             "d_redis_us", "d_fcall_us"))
    for size in sizes:
        if size > depth:
            continue
        res = [[] for _ in libs]
        for r in range(runs):
            for j in range(len(libs)):
                i = (r + j) % len(libs)
                c.command("FLUSHALL")
                res[i].append(run(c, fns[i], size, depth, total, rng))
        for i, f in enumerate(libs):
            d = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(res[i], res[0])]
            print("%6d %-40s %12.2f %12.2f %12.2f %12.2f" % (
                size, os.path.basename(f)[:40], median([x[0] for x in res[i]]),
                median([x[1] for x in res[i]]), median([x[0] for x in d]),
                median([x[1] for x in d])))


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1, 8, 16, 32, 64]
    total = int(os.environ.get("REQUESTS", "20000"))
    depth = int(os.environ.get("DEPTH", "64"))
    runs = int(os.environ.get("RUNS", "3"))
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    driver = os.environ.get("LOCAL_DRIVER", os.path.join(top, "tests", "unit", "local_driver"))
    lib = subprocess.run([driver, "--print-library"], stdout=subprocess.PIPE, check=True).stdout
    d = tempfile.mkdtemp()
    sock = os.path.join(d, "redis.sock")
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--dir", d,
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        c = Conn(sock)
        if os.environ.get("LIBRARIES"):
            compare(c, os.environ["LIBRARIES"].split(","), sizes, depth, total, runs,
                    random.Random(1))
            return
        fn = c.command("FUNCTION", "LOAD", "REPLACE", lib)
        rng = random.Random(1)
        print("%6s %12s %12s" % ("batch", "redis_us", "in_fcall_us"))
        for size in sizes:
            if size > depth:
                continue
            best = min((run(c, fn, size, depth, total, rng) for _ in range(runs)),
                       key=lambda r: r[0])
            print("%6d %12.2f %12.2f" % (size, best[0], best[1]))
    finally:
        stop_redis(redis, d)


if __name__ == "__main__":
    main()
