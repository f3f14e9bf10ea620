#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/instructions.py: instructions the daemon executes per POST /check,
counted by valgrind's callgrind, for one or more ratelimitd binaries.

    bench/instructions.py ./ratelimitd /path/to/older/ratelimitd

Wall-clock figures on this shared 2-core box move by 10-20 % from one run to
the next; instruction counts do not (same binary, same inputs: the same
count), so this is how two builds of the hot path are compared. Each binary
runs twice under callgrind against its own redis-server (unix socket, temp
dir): SMALL then LARGE sequential checks of a fixed_window policy over one
keep-alive connection, each with a new key (the "spread" case of
bench/run.sh). The difference of the two totals divided by LARGE - SMALL is
the cost of one check, without startup and shutdown. Prints one line per
binary and the ratio to the first. Needs valgrind and redis-server.

    BACKEND=memory bench/instructions.py ./ratelimitd /path/to/older

counts the same checks decided by `backend: memory` (no Redis call).
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SMALL, LARGE = 500, 2500


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, what, tries=600):
    for _ in range(tries):
        if pred():
            return
        time.sleep(0.1)
    sys.exit("instructions.py: %s did not happen within %d s" % (what, tries // 10))


def ready(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/readyz")
        return c.getresponse().status == 200
    except OSError:
        return False


def total_instructions(binary, checks):
    """callgrind's total for a daemon that answered `checks` checks."""
    d = tempfile.mkdtemp(prefix="rl-instr-")
    sock = os.path.join(d, "redis.sock")
    redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock,
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    daemon = None
    try:
        wait_for(lambda: os.path.exists(sock), "redis-server's socket")
        port = free_port()
        cfg = os.path.join(d, "rl.yaml")
        with open(cfg, "w") as f:
            backend = os.environ.get("BACKEND", "redis")
            # backend: memory refuses a redis: section it would not use.
            redis_line = ("" if backend == "memory"
                          else "redis: {url: \"unix:%s\", timeout: 5s}\n" % sock)
            f.write("listen: 127.0.0.1:%d\n%sbackend: %s\n"
                    "policies:\n  api:\n    tiers: [{name: t, algorithm: fixed_window, "
                    "limit: 1000000000, window: 60s}]\n"
                    % (port, redis_line, backend))
        out = os.path.join(d, "callgrind.out")
        daemon = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                   binary, "-c", cfg],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: ready(port), "the daemon's /readyz 200")
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(checks):
            c.request("POST", "/check", json.dumps({"policy": "api", "key": "user:%d" % i}))
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                sys.exit("instructions.py: check %d answered %d %r" % (i, r.status, body))
        c.close()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
        with open(out) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        sys.exit("instructions.py: no total in callgrind's output")
    finally:
        if daemon and daemon.poll() is None:
            daemon.kill()
        redis.terminate()
        redis.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    first = None
    for binary in sys.argv[1:]:
        per = (total_instructions(binary, LARGE) - total_instructions(binary, SMALL)) / (LARGE - SMALL)
        first = first or per
        print("%-40s %8.0f instructions per check  %.3fx" % (binary, per, per / first))


if __name__ == "__main__":
    main()
