# SPDX-License-Identifier: Apache-2.0
"""test_ops.py: the daemon in operation: sd_notify readiness and watchdog,
reload under load (SIGHUP and watch), invalid and refused reloads, the admin
listener, bearer-token auth, the access log, file permissions, the Redis
password from the environment."""
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import daemon  # noqa: E402
from daemon import Daemon  # noqa: E402

POLICY_A = """policies:
  load:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1000000000, window: 1h}
  only_a:
    tiers:
      - {name: t, algorithm: fixed_window, limit: 5, window: 1h}
"""
POLICY_B = POLICY_A.replace("only_a", "only_b")


def recv_all(sock, seconds):
    """Every datagram received within `seconds`."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            out.append(sock.recv(4096).decode())
        except socket.timeout:
            break
    return out


def recv_until(sock, needle, seconds):
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += recv_all(sock, min(0.2, deadline - time.monotonic()))
        if any(needle in m for m in got):
            break
    return got


def test_notify(redis):
    tmp = harness.make_tempdir()
    path = os.path.join(tmp, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    d = Daemon("unix:" + redis.socket_path, POLICY_A)
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        d.start(wait_ready=False, env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"})
        early = recv_all(sock, 0.5)
        harness.ok(not any("READY=1" in m for m in early),
                   "no READY=1 while the script cannot be loaded (Redis stopped): %r" % early)
        harness.ok(any(m == "WATCHDOG=1" for m in early),
                   "WATCHDOG=1 sent at half of WATCHDOG_USEC")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    got = recv_until(sock, "READY=1", 5)
    ready = [m for m in got if "READY=1" in m]
    harness.ok(ready and "STATUS=2 policies loaded, redis connected" in ready[0],
               "READY=1 with STATUS once Redis answers: %r" % ready)
    d.send_signal(signal.SIGHUP)
    got = recv_until(sock, "READY=1", 5)
    texts = [m for m in got if m != "WATCHDOG=1"]
    harness.ok(len(texts) >= 2 and texts[0] == "RELOADING=1" and "READY=1" in texts[1],
               "SIGHUP: RELOADING=1 then READY=1: %r" % texts)
    redis.proc.send_signal(signal.SIGKILL)
    redis.proc.wait()
    harness.wait_until(lambda: d.admin("/readyz").status == 503, 5, what="not ready")
    recv_all(sock, 0.2)
    d.send_signal(signal.SIGHUP)
    got = recv_until(sock, "READY=1", 5)
    texts = [m for m in got if m != "WATCHDOG=1"]
    harness.ok(len(texts) >= 2 and texts[0] == "RELOADING=1" and "READY=1" in texts[1]
               and "redis unavailable" in texts[1],
               "a reload while Redis is down still ends with READY=1: %r" % texts)
    redis.restart()
    d.send_signal(signal.SIGTERM)
    got = recv_until(sock, "STOPPING=1", 5)
    harness.ok(any(m.startswith("STOPPING=1") for m in got), "SIGTERM: STOPPING=1")
    harness.eq(d.stop(), 0, "exits 0")
    sock.close()


def hammer(d, stop, results):
    """Sends checks until stop is set; counts statuses and failures."""
    while not stop.is_set():
        try:
            r = d.check("load", "hot")
            results.append(r.status)
        except OSError as e:
            results.append(repr(e))


def test_reload_under_load(redis):
    r = redis.client()
    d = Daemon("unix:" + redis.socket_path, POLICY_A, prefix="reload:").start()
    stop = threading.Event()
    results = []
    threads = [threading.Thread(target=hammer, args=(d, stop, results)) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(20):
            d.write_config(POLICY_B if i % 2 == 0 else POLICY_A, prefix="reload:")
            d.send_signal(signal.SIGHUP)
            # Two SIGHUPs sent before the daemon reads the first are one
            # signal (the kernel does not queue them): wait for each reload
            # before the next, as an operator's reload command does.
            try:
                harness.wait_until(lambda: d.logs().count("policies reloaded") > i, 5, 0.01,
                                   "reload %d" % (i + 1))
            except TimeoutError:
                pass  # counted below
    finally:
        time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(10)
    bad = [x for x in results if x != 200]
    harness.ok(len(results) > 100 and not bad,
               "reload under load: %d checks during 20 reloads, %d errors or dropped connections "
               "%r" % (len(results), len(bad), bad[:5]))
    harness.eq(d.logs().count("policies reloaded"), 20, "all 20 reloads applied")
    harness.eq(int(harness.fixed_window_count(r, "reload:{load:hot}:t")), len(results),
               "the counter carried on across reloads (a reload is not a reset)")
    harness.eq(d.check("only_a", "x").status, 200, "the last file's policies are in force")
    harness.eq(d.check("only_b", "x").status, 400, "and the other file's are gone")

    d.write_config("policies:\n  broken: {tiers: [{name: t, algorithm: nope, limit: 1, window: 1s}]}\n",
                   prefix="reload:")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "reload failed" in d.logs(), 5, what="the failed reload's log")
    line = [l for l in d.logs().splitlines() if "reload failed" in l][0]
    harness.ok(re.search(re.escape(d.config) + r":8:41: policies\.broken\.tiers\[0\]\.algorithm: "
                         r"unknown algorithm", line) is not None,
               "an invalid file is rejected with file:line:column: %s" % line)
    harness.eq(d.check("only_a", "x").status, 200, "and the old policies stay in force")
    harness.eq(d.admin("/readyz").status, 200, "and the daemon stays ready")

    port = d.port
    d.port = harness.free_port()
    d.write_config(POLICY_A, prefix="reload:")
    d.port = port
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "reload refused" in d.logs(), 5, what="the refused reload's log")
    harness.ok("field=listen" in d.logs(), "a new listen address is refused: restart needed")
    harness.eq(d.check("only_a", "x").status, 200, "still serving on the old address")
    harness.eq(d.stop(), 0, "exits 0")


def test_watch(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY_A, extra="watch: true\n", prefix="watch:")
    d.start()
    d.write_config(POLICY_B, extra="watch: true\n", prefix="watch:")
    harness.wait_until(lambda: d.check("only_b", "x").status == 200, 5,
                       what="the rewritten file to be loaded")
    harness.ok(True, "watch: a file renamed over the policy file is loaded without a signal")
    harness.eq(d.stop(), 0, "exits 0")

    # A Kubernetes ConfigMap: the file is a symlink through ..data, and an
    # update swaps ..data to a new directory in one rename.
    cm = harness.make_tempdir("rl-configmap-")
    d = Daemon("unix:" + redis.socket_path, POLICY_A, extra="watch: true\n", prefix="watch:")
    text_a = open(d.config).read()
    d.write_config(POLICY_B, extra="watch: true\n", prefix="watch:")
    text_b = open(d.config).read()
    for name, text in (("..v1", text_a), ("..v2", text_b)):
        os.mkdir(os.path.join(cm, name))
        with open(os.path.join(cm, name, "ratelimitd.yaml"), "w") as f:
            f.write(text)
    os.symlink("..v1", os.path.join(cm, "..data"))
    os.symlink("..data/ratelimitd.yaml", os.path.join(cm, "ratelimitd.yaml"))
    d.config = os.path.join(cm, "ratelimitd.yaml")
    d.start()
    harness.eq(d.check("only_a", "x").status, 200, "ConfigMap: first version loaded")
    os.symlink("..v2", os.path.join(cm, "..data_tmp"))
    os.rename(os.path.join(cm, "..data_tmp"), os.path.join(cm, "..data"))
    harness.wait_until(lambda: d.check("only_b", "x").status == 200, 5,
                       what="the swapped ConfigMap to be loaded")
    harness.ok(True, "watch: the swap of a ConfigMap's ..data is loaded")
    with open(os.path.join(cm, "unrelated"), "w") as f:
        f.write("x")
    time.sleep(0.4)
    harness.eq(d.logs().count("policies reloaded"), 1,
               "an unrelated file in the directory causes no reload")
    harness.eq(d.stop(), 0, "exits 0")


def test_admin_and_auth(redis):
    tmp = harness.make_tempdir()
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write("first-token-0123456789\n")
    extra = "auth_token_file: %s\naccess_log: true\n" % token
    d = Daemon("unix:" + redis.socket_path, POLICY_A, extra=extra, admin=True).start()
    harness.eq(d.admin("/healthz").status, 200, "admin_listen serves /healthz")
    harness.eq(d.admin("/readyz").status, 200, "admin_listen serves /readyz")
    harness.eq(d.request("GET", "/healthz").status, 404, "the check port does not serve /healthz")
    harness.eq(d.admin("/check", method="POST").status, 404, "the admin port does not serve /check")
    none = d.check("load", "k")
    harness.eq((none.status, none.json.get("error"), none.headers.get("www-authenticate")),
               (401, "unauthorized", "Bearer"), "no token: 401 with WWW-Authenticate: Bearer")
    wrong = d.check("load", "k", headers={"Authorization": "Bearer first-token-0123456780"})
    harness.eq(wrong.status, 401, "a wrong token: 401")
    right = d.check("load", "k", headers={"Authorization": "Bearer first-token-0123456789"})
    harness.eq(right.status, 200, "the right token: decided")
    with open(token, "w") as f:
        f.write("second-token-0123456789\n")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "policies reloaded" in d.logs(), 5, what="reload")
    old = d.check("load", "k", headers={"Authorization": "Bearer first-token-0123456789"})
    new = d.check("load", "k", headers={"Authorization": "Bearer second-token-0123456789"})
    harness.eq((old.status, new.status), (401, 200), "a reload picks up a rotated token")
    access = [l for l in d.logs().splitlines() if "msg=check" in l]
    harness.ok(access and "status=200" in access[0] and 'checks=load:k' in access[0]
               and "ms=" in access[0], "access_log: one line per check: %r" % access[:1])
    harness.ok("token-0123456789" not in d.logs(), "the token is never logged")
    harness.eq(d.stop(), 0, "exits 0")


def test_metrics(redis):
    import promtext
    d = Daemon("unix:" + redis.socket_path, POLICY_A + """  shadowed:
    shadow: true
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1, window: 1h}
  closed:
    failure_mode: closed
    tiers:
      - {name: t, algorithm: fixed_window, limit: 1, window: 1h}
""", admin=True, prefix="metrics:").start()
    scrape = d.admin("/metrics")
    harness.eq((scrape.status, scrape.headers.get("content-type")),
               (200, "text/plain; version=0.0.4; charset=utf-8"), "GET /metrics on admin_listen")
    m = promtext.parse(scrape.body.decode())
    ok_before = promtext.value(m, "ratelimitd_http_responses_total", status="200")
    harness.eq(promtext.value(m, "ratelimitd_checks_total", policy="only_a", decision="allowed"), 0,
               "every configured policy's counters are there from the start")
    for _ in range(7):
        d.check("only_a", "m")  # limit 5: 5 allowed, 2 denied
    d.check("shadowed", "m")
    d.check("shadowed", "m")
    d.check("nope", "m")
    d.request("GET", "/nowhere")
    m = promtext.parse(d.admin("/metrics").body.decode())
    v = lambda name, **l: promtext.value(m, name, **l)
    harness.eq((v("ratelimitd_checks_total", policy="only_a", decision="allowed"),
                v("ratelimitd_checks_total", policy="only_a", decision="denied")), (5, 2),
               "checks by policy and decision match the checks sent")
    harness.eq((v("ratelimitd_checks_total", policy="shadowed", decision="allowed"),
                v("ratelimitd_checks_total", policy="shadowed", decision="shadow_denied")), (1, 1),
               "shadow_denied counted")
    # 200s since the first scrape: 7 checks, and that scrape's own answer.
    harness.eq((v("ratelimitd_http_responses_total", status="200") - ok_before,
                v("ratelimitd_http_responses_total", status="429"),
                v("ratelimitd_http_responses_total", status="400"),
                v("ratelimitd_http_responses_total", status="404")), (8, 2, 1, 1),
               "responses by status")
    # The second denial of only_a is the deny cache's: no round trip.
    harness.eq((v("ratelimitd_redis_request_duration_seconds_count"),
                v("ratelimitd_deny_cache_hits_total")), (8, 1),
               "one Redis round trip per request decided by Redis; one deny cache hit")
    harness.ok(not any("nope" in str(s) for f in m.values() for s in f["samples"]),
               "label values come from the policy file, never from requests")
    harness.eq((v("ratelimitd_redis_up"), v("ratelimitd_policies"), v("ratelimitd_checks_in_flight")),
               (1, 4, 0), "gauges: redis up, policies, in flight")
    harness.ok(abs(v("ratelimitd_config_loaded_timestamp_seconds") - time.time()) < 60,
               "config loaded timestamp")
    # The build that --version names: same version, commit and features.
    out = subprocess.run([daemon.BINARY, "--version"], capture_output=True, text=True).stdout
    said = re.fullmatch(r"ratelimitd (\S+) \(commit (\S+); features (\S+)\)\n", out)
    info = m["ratelimitd_build_info"]["samples"]
    harness.ok(said is not None, "--version: version, commit and features: %r" % out)
    harness.eq([(s[1], s[2]) for s in info],
               [({"version": said.group(1) if said else "?", "commit": said.group(2) if said else "?",
                  "features": said.group(3) if said else "?"}, 1.0)],
               "build info: the version, commit and features --version prints, = 1")
    harness.ok(said is not None and re.fullmatch(r"[0-9a-f]{7,}(-dirty)?|unknown", said.group(2)),
               "the commit is a short hash or unknown")
    redis.client().command("FUNCTION", "FLUSH")
    d.check("only_a", "after-flush")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "policies reloaded" in d.logs(), 5, what="reload")
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        d.check("closed", "m")
        d.check("only_a", "m2")
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    m = promtext.parse(d.admin("/metrics").body.decode())
    harness.eq((v("ratelimitd_redis_noscript_reloads_total"),
                v("ratelimitd_config_reloads_total", result="success"),
                v("ratelimitd_redis_timeouts_total"),
                v("ratelimitd_checks_total", policy="closed", decision="unavailable"),
                v("ratelimitd_checks_total", policy="only_a", decision="degraded")),
               (1, 1, 2, 1, 1), "NOSCRIPT reloads, reloads, timeouts, unavailable, degraded")
    harness.eq(d.stop(), 0, "exits 0")


def strict_start(d, name, args=()):
    """Runs d's binary on d's file with --strict-permissions (and args): its
    exit status and what it printed. For a refusal, or with --check-config:
    it would run on otherwise."""
    log = os.path.join(d.dir, name)
    strict = harness.spawn(["env", "RATELIMITD=x", os.environ.get("RATELIMITD", "./ratelimitd"),
                            "--config", d.config, "--strict-permissions"] + list(args), log)
    status = strict.wait(10)
    with open(log) as f:
        return status, f.read()


def test_permissions(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY_A)
    os.chmod(d.config, 0o666)
    harness.eq(strict_start(d, "strict.log")[0], 1,
               "--strict-permissions refuses a world-writable policy file")
    d.start()
    harness.ok("writable by others" in d.logs(), "without it, a warning is logged")
    harness.eq(d.stop(), 0, "exits 0")

    # The token file: readable by others is as bad as writable (they could
    # call as anyone); the group may read it (root:ratelimitd 0640).
    token = os.path.join(d.dir, "token")
    with open(token, "w") as f:
        f.write("0123456789abcdef0123\n")
    t = Daemon("unix:" + redis.socket_path, "auth_token_file: %s\n%s" % (token, POLICY_A),
               admin=True)
    for mode in (0o644, 0o602):
        os.chmod(token, mode)
        status, out = strict_start(t, "strict-token-%o.log" % mode)
        harness.ok(status == 1 and "%s: the auth_token_file is readable or writable by others; "
                   "refusing to start (chmod o-rw it)" % token in out,
                   "--strict-permissions refuses a token file with mode %o: %r" % (mode, out))
    t.start()
    harness.ok("msg=\"the auth_token_file is readable or writable by others\" file=%s chmod=o-rw" % token
               in t.logs(), "without it, a warning is logged")
    harness.eq(t.stop(), 0, "exits 0")
    os.chmod(token, 0o640)
    status, out = strict_start(t, "strict-token-640.log", ["--check-config"])
    harness.ok(status == 0 and "ok, 2 policies" in out,
               "mode 640 (the group may read it) passes --strict-permissions --check-config: %r"
               % out)


def test_journal(redis):
    d = Daemon("unix:" + redis.socket_path, POLICY_A)
    open(d.logfile, "a").close()
    st = os.stat(d.logfile)
    d.start(env={"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)})
    lines = d.logs().splitlines()
    harness.ok(lines and all(l.startswith(("<6>ts=", "<4>ts=", "<3>ts=", "<7>ts=")) for l in lines),
               "stderr is the journal: lines carry <N> priorities: %r" % lines[:2])
    harness.ok(any(l.startswith("<6>") and "ratelimitd started" in l and "policies=2" in l
                   and "listen=127.0.0.1:" in l and "redis=unix:" in l and "version=" in l
                   for l in lines), "start-up line: version, policies, listen, redis target")
    harness.eq(d.stop(), 0, "exits 0")
    plain = Daemon("unix:" + redis.socket_path, POLICY_A).start()
    harness.ok(plain.logs().startswith("ts="), "not the journal: plain logfmt")
    harness.eq(plain.stop(), 0, "exits 0")


def test_password_env():
    secret = "s3cret-pass-word"
    redis = harness.RedisServer(extra_args=["--requirepass", secret]).start()
    d = Daemon("unix:" + redis.socket_path, POLICY_A)
    d.start(env={"RATELIMITD_REDIS_PASSWORD": secret})
    res = d.check("only_a", "pw")
    harness.eq((res.status, res.json.get("degraded")), (200, None),
               "RATELIMITD_REDIS_PASSWORD authenticates to Redis")
    harness.ok(secret not in d.logs(), "the password is never logged")
    harness.eq(d.stop(), 0, "exits 0")
    bad = Daemon("unix:" + redis.socket_path, POLICY_A)
    bad.start(wait_ready=False, env={"RATELIMITD_REDIS_PASSWORD": "wrong-password"})
    res = bad.check("only_a", "pw")
    harness.eq((res.status, res.json.get("degraded")), (200, True),
               "a wrong password: not ready, failure_mode answers")
    harness.wait_until(lambda: "command=AUTH" in bad.logs(), 10, what="the AUTH failure's log")
    harness.ok("wrong-password" not in bad.logs(), "the failure is logged without the password")
    harness.eq(bad.stop(), 0, "exits 0")


def main():
    redis = harness.RedisServer().start()
    test_notify(redis)
    test_reload_under_load(redis)
    test_watch(redis)
    test_admin_and_auth(redis)
    test_metrics(redis)
    test_permissions(redis)
    test_journal(redis)
    test_password_env()


harness.run(main)
