# SPDX-License-Identifier: Apache-2.0
"""test_messages.py: what the daemon says when it will not start or a file
will not pass, said whole and naming what to change, through the real
binary (its own error buffer, a real file name ahead of the message):

- an address that cannot be bound names its field: `listen`,
  `admin_listen`, `grpc_listen`;
- an unknown field's list of known ones ends whole, with the page that
  lists every field when they do not all fit;
- a tab in the indentation is called that, at its line and column;
- --check-config with --strict-permissions fails a loose file without
  saying it refuses to start (it was never going to).

No Redis: every case runs with backend: memory or only checks the file."""
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import BINARY, Daemon  # noqa: E402

MEMORY = "backend: memory\n"
POLICY = """policies:
  p:
    tiers: [{name: m, algorithm: fixed_window, limit: 1, window: 1h}]
"""


def check_config(text, mode=0o600, args=()):
    """ratelimitd -t on a file holding text: (exit code, stderr)."""
    path = os.path.join(harness.make_tempdir(), "ratelimitd.yaml")
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    p = subprocess.run([BINARY, "-t", "-c", path] + list(args), capture_output=True, text=True,
                       timeout=30)
    return p.returncode, p.stderr, path


def test_bind_names_the_field():
    for field in ("listen", "admin_listen", "grpc_listen"):
        taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        addr = "127.0.0.1:%d" % taken.getsockname()[1]
        listen = field == "listen"
        d = Daemon(None, POLICY, extra=MEMORY + ("" if listen else "%s: %s\n" % (field, addr)),
                   port=taken.getsockname()[1] if listen else None)
        try:
            d.start(wait_ready=False)
            started = True
        except RuntimeError:
            started = False
        finally:
            taken.close()
        want = "ratelimitd: %s: cannot bind %s: " % (field, addr)
        harness.ok(not started and want in d.logs(),
                   "%s on a taken port: the message starts with the field (%r)"
                   % (field, d.logs().strip()[-200:]))
        if started:
            d.stop()


def test_unknown_field_whole():
    rc, err, path = check_config("listn: x\n" + MEMORY + POLICY)
    line = err.strip()
    harness.ok(rc == 1 and line.startswith("ratelimitd: %s:1:1: unknown field \"listn\" (known: "
                                           "listen, " % path)
               and line.endswith(" more in ratelimitd.yaml(5) or docs/configuration.md)"),
               "an unknown top-level field: the names that fit, then where every field is "
               "listed, the message whole: %r" % line[-120:])


def test_tab_indentation():
    rc, err, path = check_config("backend: memory\npolicies:\n  p:\n\ttiers: []\n")
    harness.eq((rc, err.strip()),
               (1, "ratelimitd: %s:4:1: tabs are not allowed for indentation; indent with "
                "spaces" % path),
               "a tab in the indentation: named, at the tab")


def test_check_config_strict():
    rc, err, path = check_config(MEMORY + POLICY, mode=0o666, args=["--strict-permissions"])
    harness.ok(rc == 1 and "the policy file is writable by others" in err
               and "chmod o-w" in err and "refusing to start" not in err,
               "-t --strict-permissions on a file others may write: fails, "
               "without 'refusing to start': %r" % err.strip())
    p = subprocess.run([BINARY, "-t", "-c", path], capture_output=True, text=True, timeout=30)
    harness.eq(p.returncode, 0, "without --strict-permissions the same file passes (with a warning)")


def main():
    test_bind_names_the_field()
    test_unknown_field_whole()
    test_tab_indentation()
    test_check_config_strict()


harness.run(main)
