# SPDX-License-Identifier: Apache-2.0
"""test_conf_examples.py: the example policy files in conf/examples/ pass
`ratelimitd --check-config` (TAP), and a broken copy of each fails it with
file:line:column, so the check is known to look.

redis-tls.yaml names files under /etc/ratelimitd/, which the check reads:
the test points them at files it writes in a temp dir (the content is not
read by --check-config, only whether the file is there and readable). The
docs/redis.md names every example file.

Needs only the daemon ($RATELIMITD, default ./ratelimitd) and $RL_SRCDIR.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR", ".")
EXAMPLES = ("redis-tls.yaml", "redis-sentinel.yaml", "redis-cluster.yaml")


def check_config(binary, path):
    """(exit status, output) of ratelimitd --check-config on path."""
    proc = subprocess.run([binary, "--check-config", "--config", path], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=30)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def localized(text, tmp):
    """The example with /etc/ratelimitd/NAME pointing at tmp/NAME (written)."""
    for name in set(re.findall(r"/etc/ratelimitd/([\w.-]+)", text)):
        with open(os.path.join(tmp, name), "w") as f:
            f.write("not read by --check-config\n")
    return text.replace("/etc/ratelimitd/", tmp + "/")


def main():
    binary = harness.find_program("RATELIMITD", "./ratelimitd")
    tmp = harness.make_tempdir()
    with open(os.path.join(SRCDIR, "docs", "redis.md")) as f:
        readme = f.read()
    for name in EXAMPLES:
        with open(os.path.join(SRCDIR, "conf", "examples", name)) as f:
            text = f.read()
        harness.ok("conf/examples/" + name in readme, "docs/redis.md names conf/examples/%s" % name)
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(localized(text, tmp))
        rc, out = check_config(binary, path)
        if not harness.eq(rc, 0, "conf/examples/%s passes --check-config" % name):
            harness.diag(out)

        # The same file with an unknown field added to redis: refused at it.
        lines = localized(text, tmp).splitlines(True)
        at = next(i for i, l in enumerate(lines) if l.startswith("redis:")) + 1
        lines.insert(at, "  no_such_field: 1\n")
        with open(path, "w") as f:
            f.write("".join(lines))
        rc, out = check_config(binary, path)
        harness.ok(rc != 0 and ("%s:%d:3: redis: unknown field" % (path, at + 1)) in out,
                   "a broken copy of %s fails with file:line:col: %s" % (name, out.strip()))

    # redis-tls.yaml as shipped: its files are not on this machine, and the
    # check says which one, where.
    shipped = os.path.join(SRCDIR, "conf", "examples", "redis-tls.yaml")
    if not os.path.exists("/etc/ratelimitd/redis-ca.crt"):
        rc, out = check_config(binary, shipped)
        harness.ok(rc != 0 and re.search(r"redis-tls\.yaml:\d+:\d+: redis\.tls\.ca_file: cannot "
                                         r"read /etc/ratelimitd/redis-ca\.crt", out),
                   "a missing ca_file fails --check-config at its line: %s" % out.strip())
    else:
        harness.skip("/etc/ratelimitd/redis-ca.crt exists on this machine")


harness.run(main)
