# SPDX-License-Identifier: Apache-2.0
"""test_image.py: the container image, built and run without a container
engine (tools/test.sh runs it; it takes minutes, so it is not in make check).

- What `docker build .` would be sent from this working tree, whatever a
  build left in it: podman's own reading of .dockerignore (the tree copied
  into an empty image) holds none of the files git ignores, so that no
  generated file (build_info.h, protoc-c's output, objects...) reaches the
  image's build; skipped without .git (git says what is generated).
- tools/image.sh builds docker/Dockerfile with podman (--isolation=chroot,
  offline: the base is made from Debian's archive when none is here), from
  a pristine copy of the sources, never from the working tree: `git
  archive HEAD` (uncommitted changes are not in it: a diagnostic says so),
  or, without .git (an unpacked tarball), `make distdir`. The Dockerfile
  runs `make ratelimitd` alone in it, as in a fresh clone.
- The image's config (podman image inspect): a non-root User, a
  HEALTHCHECK, the ratelimitd entrypoint; its size is printed.
- In the mounted image (podman image mount): ldd finds every library of
  the binary; no compiler, no test tool, no server but the daemon.
- The image's own command (Entrypoint + Cmd, Env, User) chrooted into a
  writable overlay of the mounted root, in a private network namespace (the
  image listens on 0.0.0.0:8080 and :9090 as in a container): once with its
  config and a Redis on loopback that /etc/hosts names `redis` (as compose
  does), once with --config /etc/ratelimitd.memory.yaml and no Redis. Each
  time: /readyz 200, /check decides (allowed, then 429 past the burst), the
  HEALTHCHECK command passes, SIGTERM exits 0.

Skips when not root or podman is missing (tools/deps.sh --test installs
it). RL_IMAGE_TAG names the image (default localhost/ratelimitd:test)."""
import http.client
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRC = os.path.abspath(os.environ.get("RL_SRCDIR", "."))
TAG = os.environ.get("RL_IMAGE_TAG", "localhost/ratelimitd:test")
# Nothing of the build or the tests belongs in the runtime image.
NOT_IN_IMAGE = ("gcc", "cc", "make", "clang", "autoconf", "pkg-config", "protoc-c", "valgrind",
                "python3", "nginx", "caddy", "redis-server", "curl", "podman")
MAX_SIZE = 160 * 1000 * 1000  # bytes: the slim base (~127 MB) + libraries + daemon


def http_call(port, method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request(method, path, body, {"Content-Type": "application/json"} if body else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def sh(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


# ------------------------------------------------------------- the outside


def context_leaves_out_generated(work):
    """podman's build context of the working tree, copied into an empty
    image, against the files git ignores (what builds and tests made)."""
    if not os.path.exists(os.path.join(SRC, ".git")):
        harness.skip("no .git in %s: which files are generated is git's to say" % SRC)
        return
    ignored = sh(["git", "-C", SRC, "ls-files", "-z", "--others", "--ignored",
                  "--exclude-standard"])
    if ignored.returncode != 0:
        harness.bail_out("git ls-files failed: " + ignored.stderr)
    containerfile = os.path.join(work, "Containerfile.context")
    with open(containerfile, "w") as f:
        f.write("FROM scratch\nCOPY . /context/\n")
    tag = TAG + "-context"
    built = sh(["podman", "build", "--quiet", "--isolation=chroot", "-f", containerfile,
                "--ignorefile", os.path.join(SRC, ".dockerignore"), "-t", tag, SRC])
    if built.returncode != 0:
        harness.bail_out("the context image did not build: " + built.stderr[-2000:])
    harness.at_exit(lambda: sh(["podman", "rmi", "--force", tag]))
    root = sh(["podman", "image", "mount", tag]).stdout.strip()
    harness.at_exit(lambda: sh(["podman", "image", "unmount", tag]))
    context = os.path.join(root, "context")
    harness.ok(os.path.isfile(os.path.join(context, "configure.ac")),
               "the build context holds the sources")
    leaked = [p for p in ignored.stdout.split("\0")
              if p and os.path.lexists(os.path.join(context, p))]
    if os.path.lexists(os.path.join(context, ".git")):
        leaked.append(".git")
    harness.eq(leaked[:20], [], ".dockerignore keeps out every file git ignores (%d here)"
               % ignored.stdout.count("\0"))


def pristine_sources(work):
    """A copy of the sources as a fresh clone (or the tarball) has them."""
    tree = os.path.join(work, "src")
    if os.path.exists(os.path.join(SRC, ".git")):
        if sh(["git", "-C", SRC, "status", "--porcelain", "--untracked-files=no"]).stdout:
            harness.diag("uncommitted changes in %s are not in the image: it is built from HEAD"
                         % SRC)
        os.mkdir(tree)
        git = subprocess.Popen(["git", "-C", SRC, "archive", "HEAD"], stdout=subprocess.PIPE)
        tar = sh(["tar", "-C", tree, "-x"], stdin=git.stdout)
        git.stdout.close()
        if git.wait() != 0 or tar.returncode != 0:
            harness.bail_out("git archive HEAD | tar -x failed: " + tar.stderr)
        return tree, "git archive HEAD"
    if not os.path.isfile(os.path.join(SRC, "Makefile")):
        harness.skip_all("no .git and not configured in %s: no pristine copy to build from"
                         " (run tools/build.sh, or test from a clone)" % SRC)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    dist = sh(["make", "distdir", "distdir=" + tree], cwd=SRC, env=env)
    if dist.returncode != 0:
        harness.bail_out("make distdir failed: " + (dist.stdout + dist.stderr)[-2000:])
    return tree, "make distdir"


def outside():
    if os.geteuid() != 0:
        harness.skip_all("needs root (podman image mount, chroot, unshare)")
    for tool in ("podman", "unshare", "chroot", "mount"):
        if not shutil.which(tool):
            harness.skip_all("%s is not installed (tools/deps.sh --test)" % tool)
    work = harness.make_tempdir("rl-image-src-")
    tree, how = pristine_sources(work)
    context_leaves_out_generated(work)
    t0 = time.monotonic()
    build = sh(["sh", os.path.join(tree, "tools", "image.sh"), TAG], cwd=tree)
    took = time.monotonic() - t0
    harness.eq(build.returncode, 0, "tools/image.sh builds the image from %s (%.0f s)"
               % (how, took))
    if build.returncode != 0:
        harness.bail_out("the build failed:\n" + (build.stdout + build.stderr)[-3000:])
    info = json.loads(sh(["podman", "image", "inspect", TAG]).stdout)[0]
    cfg = info["Config"]
    # Where podman 4.3 puts it: beside Config, not in it.
    health = info.get("Healthcheck") or cfg.get("Healthcheck") or {}
    harness.diag("image size: %d bytes (%.1f MB), podman image inspect --format '{{.Size}}'"
                 % (info["Size"], info["Size"] / 1e6))
    harness.ok(info["Size"] < MAX_SIZE, "the image is under %d MB" % (MAX_SIZE // 1000000))
    harness.ok(cfg.get("User") == "10001:10001", "runs as uid 10001: %r" % cfg.get("User"))
    harness.eq(cfg.get("Entrypoint"), ["/usr/sbin/ratelimitd"], "the entrypoint is the daemon")
    harness.ok(health.get("Test", [""])[0] == "CMD", "a HEALTHCHECK: %r" % health.get("Test"))
    version = open(os.path.join(SRC, "configure.ac")).read().split("AC_INIT([ratelimitd], [")[1].split("]")[0]
    harness.eq((cfg.get("Labels") or {}).get("org.opencontainers.image.version"), version,
               "the image's version label is configure.ac's")

    root = sh(["podman", "image", "mount", TAG]).stdout.strip()
    harness.at_exit(lambda: sh(["podman", "image", "unmount", TAG]))
    harness.ok(os.path.isfile(os.path.join(root, "usr/sbin/ratelimitd")), "the image mounts")
    ldd = sh(["chroot", root, "ldd", "/usr/sbin/ratelimitd"])
    harness.ok(ldd.returncode == 0 and "not found" not in ldd.stdout,
               "ldd in the image finds every library: %s"
               % (ldd.stderr.strip() or [l.strip() for l in ldd.stdout.splitlines() if "not found" in l]))
    found = [p for p in NOT_IN_IMAGE
             for d in ("usr/bin", "usr/sbin", "usr/local/bin")
             if os.path.lexists(os.path.join(root, d, p))]
    harness.eq(found, [], "no compiler, test tool or other server in the image")
    for f in ("etc/ratelimitd.yaml", "etc/ratelimitd.memory.yaml"):
        st = os.stat(os.path.join(root, f))
        harness.ok(st.st_uid == 0 and st.st_mode & 0o7777 == 0o644,
                   "/%s: root's, 0644 (not the daemon's to change)" % f)

    # The runs, in a private network and mount namespace.
    inner = sh(["unshare", "--net", "--mount", "--fork", sys.executable, os.path.abspath(__file__),
                "--inside", root, json.dumps({"cfg": cfg, "health": health})],
               env=dict(os.environ, RL_SRCDIR=SRC), timeout=300)
    for line in inner.stdout.splitlines():
        m = re.match(r"(not )?ok \d+ - (.*)", line)
        if m:
            harness.ok(not m.group(1), m.group(2))
        elif line.startswith("#"):
            harness.diag(line.lstrip("# "))
        elif line.startswith("Bail out!"):
            harness.ok(False, line)
    harness.eq(inner.returncode, 0, "the runs inside the image passed%s"
               % ("" if inner.returncode == 0 else ":\n" + inner.stderr[-2000:]))


# -------------------------------------------------------------- the inside


def run_image(merged, cfg, health, argv, label, redis=None):
    """The image's command chrooted as its user; the checks of one run."""
    user = cfg.get("User", "0:0")
    env = cfg.get("Env") or []
    log = os.path.join(os.path.dirname(merged), re.sub(r"\W+", "_", label) + ".log")
    proc = harness.spawn(["env", "-i"] + env + ["chroot", "--userspec=" + user, merged] + argv, log)
    policy = open(os.path.join(merged, "etc/ratelimitd.yaml")).read()
    port = int(re.search(r"(?m)^listen: \S+:(\d+)$", policy).group(1))
    admin = int(re.search(r"(?m)^admin_listen: \S+:(\d+)$", policy).group(1))

    def ready():
        if proc.poll() is not None:
            raise RuntimeError("exited %s: %s" % (proc.returncode, harness.tail(log)))
        return http_call(admin, "GET", "/readyz")[0] == 200
    harness.wait_until(ready, 20, 0.1, "%s: /readyz 200" % label)
    harness.ok(True, "%s: /readyz 200 on the admin port %d" % (label, admin))
    with open("/proc/%d/status" % proc.pid) as f:
        uid = re.search(r"(?m)^Uid:\s+(\d+)", f.read()).group(1)
    harness.eq(uid, user.split(":")[0], "%s: the daemon runs as the image's user" % label)
    body = json.dumps({"policy": "login", "key": "ip:192.0.2.9"})
    statuses = [http_call(port, "POST", "/check", body)[0] for _ in range(12)]
    harness.ok(statuses[0] == 200 and statuses[-1] == 429,
               "%s: /check decides: %s" % (label, statuses))
    if redis:
        with redis.client() as c:
            harness.ok(len(c.command("KEYS", "rl:*")) > 0, "%s: the counters are in Redis" % label)
    hc = health["Test"][1:]
    res = sh(["chroot", "--userspec=" + user, merged] + hc, timeout=10)
    harness.eq(res.returncode, 0, "%s: the HEALTHCHECK command passes in the image" % label)
    proc.terminate()
    harness.eq(proc.wait(30), 0, "%s: SIGTERM, exit 0" % label)


def inside(root, spec):
    cfg, health = spec["cfg"], spec["health"]
    for argv in (["ip", "link", "set", "lo", "up"], ["mount", "--make-rprivate", "/"]):
        subprocess.run(argv, check=True)
    # A writable overlay over the read-only image mount: /etc/hosts names
    # compose's `redis` service; a /dev of its own (the few nodes a container
    # has) and /proc. Unmounted before the directory is removed.
    tmp = tempfile.mkdtemp(prefix="rl-image-")
    dirs = {d: os.path.join(tmp, d) for d in ("upper", "work", "merged")}
    for d in dirs.values():
        os.mkdir(d)
    merged = dirs["merged"]

    def cleanup():
        subprocess.run(["umount", "-R", merged])
        if not os.path.ismount(merged):
            shutil.rmtree(tmp, ignore_errors=True)
    harness.at_exit(cleanup)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", "lowerdir=%s,upperdir=%s,workdir=%s"
                    % (root, dirs["upper"], dirs["work"]), merged], check=True)
    dev = os.path.join(merged, "dev")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "dev", dev], check=True)
    for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
        os.mknod(os.path.join(dev, name), 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        os.chmod(os.path.join(dev, name), 0o666)
    subprocess.run(["mount", "-t", "proc", "proc", os.path.join(merged, "proc")], check=True)
    with open(os.path.join(merged, "etc/hosts"), "w") as f:
        f.write("127.0.0.1 localhost\n127.0.0.1 redis\n")
    argv = cfg["Entrypoint"] + cfg["Cmd"]

    redis = harness.RedisServer(extra_args=["--port", "6379", "--bind", "127.0.0.1"]).start()
    run_image(merged, cfg, health, argv, "the image's command, Redis", redis)
    redis.stop()
    run_image(merged, cfg, health, cfg["Entrypoint"] + ["--config", "/etc/ratelimitd.memory.yaml"],
              "--config /etc/ratelimitd.memory.yaml, no Redis")


if len(sys.argv) == 4 and sys.argv[1] == "--inside":
    harness.run(lambda: inside(sys.argv[2], json.loads(sys.argv[3])))
else:
    harness.run(outside)
