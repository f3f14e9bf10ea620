# SPDX-License-Identifier: Apache-2.0
"""daemon.py: start the real ratelimitd (the binary in $RATELIMITD) with a
policy file written to a temp dir, talk HTTP to it, stop it.

Every wait is bounded; a daemon left running is killed at exit.
"""
import http.client
import json
import os
import signal
import subprocess
import threading
import time

import harness
import openapi_check
import promtext

BINARY = harness.find_program("RATELIMITD", "./ratelimitd")
# A command to run the daemon under, e.g. "valgrind --error-exitcode=99 ..."
# (tools/valgrind.sh sets it).
WRAPPER = os.environ.get("RATELIMITD_WRAPPER", "").split()

# Every algorithm, with what its tier needs besides name, limit and window
# for a limit of 100 over 1h to admit exactly 100 at once (the tests of
# exact limits under concurrency).
ALGORITHMS = {
    "fixed_window": "",
    "sliding_window_log": "",
    "sliding_window_counter": "",
    "sliding_window_buckets": ", precision: 1m",
    "token_bucket": "",
    "gcra": "",
    "leaky_bucket": ", burst: 99",
}


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def __repr__(self):
        return "<%d %r %r>" % (self.status, self.headers, self.body[:300])


class _CheckedResponse:
    """An http.client answer read whole and held against the contract;
    read() gives its body once, as the real one would."""

    def __init__(self, r, body):
        self._r = r
        self._body = body

    def read(self, amt=None):
        body, self._body = self._body, b""
        return body

    def __getattr__(self, name):
        return getattr(self._r, name)


class CheckedConnection(http.client.HTTPConnection):
    """A keep-alive connection whose every answer is held against
    docs/openapi.yaml (openapi_check.ContractError if not described)."""

    def request(self, method, url, *args, **kwargs):
        self._asked = (method, url)
        return super().request(method, url, *args, **kwargs)

    def getresponse(self):
        r = super().getresponse()
        body = r.read()
        method, url = self._asked
        openapi_check.validate(method, url, r.status, dict(r.getheaders()), body)
        return _CheckedResponse(r, body)


class Daemon:
    """One ratelimitd process. `policy` is the YAML text after the listen and
    redis lines, which this class writes itself."""

    def __init__(self, redis_url, policy, timeout="200ms", clock="redis", extra="",
                 prefix="rl:", port=None, admin=False, batch=None):
        self.batch = batch  # redis.batch; None: the default
        self.dir = harness.make_tempdir("rl-daemon-")
        self.port = port or harness.free_port()
        # With admin=True, /healthz, /readyz and /metrics are on their own port.
        self.admin_port = harness.free_port() if admin else None
        self.redis_url = redis_url
        self.config = os.path.join(self.dir, "ratelimitd.yaml")
        self.logfile = os.path.join(self.dir, "stderr.log")
        self.proc = None
        self.write_config(policy, timeout=timeout, clock=clock, extra=extra, prefix=prefix)

    def write_config(self, policy, timeout="200ms", clock="redis", extra="", prefix="rl:"):
        # backend: memory refuses a redis: section it would not use.
        redis = "" if "backend: memory" in extra else (
            "redis:\n"
            "%s"
            "  timeout: %s\n"
            "%s"
            "%s"
            "  key_prefix: \"%s\"\n" % (self.redis_where(), timeout,
                                        "" if self.batch is None else
                                        "  batch: %d\n" % self.batch,
                                        # Every Redis has the module: the
                                        # daemon must use it (test_with_module).
                                        "  module: on\n" if harness.module_args() else "",
                                        prefix))
        text = (
            "listen: 127.0.0.1:%d\n" % self.port + redis + "clock: %s\n" % clock
        ) + extra + policy
        if self.admin_port:
            text = "admin_listen: 127.0.0.1:%d\n" % self.admin_port + text
        tmp = self.config + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, self.config)

    def redis_where(self):
        """The redis section's lines that say where Redis is (a subclass
        names cluster seeds or sentinels instead)."""
        return "  url: %s\n" % self.redis_url

    def start(self, wait_ready=True, env=None, args=(), wrapper=()):
        self.proc = harness.spawn(list(wrapper) + WRAPPER + [BINARY, "--config", self.config]
                                  + list(args),
                                  self.logfile,
                                  env=dict(os.environ, **(env or {})))
        deadline = time.monotonic() + (60 if WRAPPER else 10)
        want = "/readyz" if wait_ready else "/healthz"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ratelimitd exited with %d:\n%s" % (self.proc.returncode,
                                                                       self.logs()))
            try:
                if self.admin(want, timeout=1).status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("ratelimitd not ready after 10 s:\n" + self.logs())

    def logs(self):
        with open(self.logfile, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def connection(self, timeout=10):
        """A keep-alive connection to the check port, whose answers are
        held against docs/openapi.yaml."""
        return CheckedConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=10, port=None):
        conn = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=timeout)
        try:
            if isinstance(body, str):
                body = body.encode()
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            resp = Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()
        # Every answer must be one docs/openapi.yaml describes.
        openapi_check.validate(method, path, resp.status, resp.headers, resp.body)
        return resp

    def admin(self, path, method="GET", timeout=10):
        """A request to the admin endpoints, wherever they are served."""
        return self.request(method, path, timeout=timeout, port=self.admin_port)

    def check(self, policy=None, key=None, cost=None, dry_run=None, checks=None, timeout=10,
              headers=None):
        body = {}
        if checks is not None:
            body["checks"] = checks
        if policy is not None:
            body["policy"] = policy
        if key is not None:
            body["key"] = key
        if cost is not None:
            body["cost"] = cost
        if dry_run is not None:
            body["dry_run"] = dry_run
        return self.request("POST", "/check", json.dumps(body), timeout=timeout, headers=headers)

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Signals the daemon and returns its exit status (None if it did not
        exit within timeout seconds: it is then killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                harness.diag("ratelimitd did not exit in %s s; its log:\n%s" % (timeout, self.logs()))
                return None
        if self.proc.returncode != 0:
            harness.diag("ratelimitd exited with %s; its log:\n%s" % (self.proc.returncode,
                                                                      self.logs()))
        return self.proc.returncode


class ClusterDaemon(Daemon):
    """A daemon whose redis section names Redis Cluster seeds (URLs)
    instead of a url."""

    def __init__(self, seeds, policy, **kw):
        self.seeds = seeds
        super().__init__(None, policy, **kw)

    def redis_where(self):
        return "  cluster: [%s]\n" % ", ".join('"%s"' % s for s in self.seeds)


def metric(d, family, **labels):
    """The value of family's series with labels in d's /metrics, or None
    when there is no such series."""
    fams = promtext.parse(d.admin("/metrics").body.decode())
    try:
        return promtext.value(fams, family, **labels)
    except (KeyError, ValueError):
        return None


def hammer(d, policy, key="hot", clients=100, per_client=3):
    """clients threads, each with a keep-alive connection of its own (so
    with `workers` every worker takes a share), opened before any sends,
    then per_client checks of one key each, all at once. Returns
    {200: n, 429: n, "other": n}: other is an error status, a dropped
    connection or a timeout. Raises openapi_check.ContractError for an
    answer docs/openapi.yaml does not describe."""
    counts = {200: 0, 429: 0, "other": 0}
    undescribed = []  # answers the contract does not describe
    lock = threading.Lock()
    go = threading.Event()
    body = json.dumps({"policy": policy, "key": key})

    def client():
        conn = d.connection()
        go.wait()
        for _ in range(per_client):
            try:
                conn.request("POST", "/check", body=body)
                r = conn.getresponse()
                r.read()
                status = r.status if r.status in (200, 429) else "other"
            except OSError:
                status = "other"
            except openapi_check.ContractError as e:
                status = "other"
                undescribed.append(e)
            with lock:
                counts[status] += 1
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(60)
    if undescribed:
        raise undescribed[0]
    return counts
