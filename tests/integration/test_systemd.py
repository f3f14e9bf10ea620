# SPDX-License-Identifier: Apache-2.0
"""test_systemd.py: the unit file passes `systemd-analyze verify` and its
`systemd-analyze security` exposure stays below 2.0 ("OK"); with
ratelimitd.socket beside it, which it requires (socket activation), and
NotifyAccess=main (a USR2 hand-over's MAINPID= comes from the old, main,
process). Skipped where
systemd-analyze is not installed."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRC = os.environ.get("RL_SRCDIR", ".")
BUILD = os.environ.get("RL_BUILDDIR", ".")
BINARY = harness.find_program("RATELIMITD", "./ratelimitd")


def main():
    if not shutil.which("systemd-analyze"):
        harness.skip_all("systemd-analyze not installed")
    tmp = harness.make_tempdir()
    # The unit as `make install` writes it, with this build's binary and the
    # example policy in place of the installed paths.
    with open(os.path.join(SRC, "systemd", "ratelimitd.service.in")) as f:
        unit = f.read()
    unit = unit.replace("@sbindir@", os.path.dirname(os.path.abspath(BINARY)))
    unit = unit.replace("@sysconfdir@", os.path.join(os.path.abspath(SRC), "conf"))
    path = os.path.join(tmp, "ratelimitd.service")
    with open(path, "w") as f:
        f.write(unit)
    # The socket it requires, beside it (systemd-analyze looks there).
    socket_unit = os.path.join(tmp, "ratelimitd.socket")
    shutil.copy(os.path.join(SRC, "systemd", "ratelimitd.socket"), socket_unit)
    # Documentation=man:... is checked with man(1): give it this build's
    # pages (make makes them from man/*.in, in the build tree).
    for section in ("5", "8"):
        os.makedirs(os.path.join(tmp, "man", "man" + section))
    for page in ("ratelimitd.8", "ratelimitd.yaml.5"):
        shutil.copy(os.path.join(BUILD, "man", page),
                    os.path.join(tmp, "man", "man" + page[-1], page))
    env = dict(os.environ, MANPATH=os.path.join(tmp, "man"))

    verify = subprocess.run(["systemd-analyze", "verify", path, socket_unit],
                            capture_output=True, text=True, env=env, timeout=60)
    harness.eq((verify.returncode, verify.stdout + verify.stderr), (0, ""),
               "systemd-analyze verify: no complaint")
    sec = subprocess.run(["systemd-analyze", "security", "--offline=yes", path],
                         capture_output=True, text=True, env=env, timeout=60)
    m = re.search(r"Overall exposure level for ratelimitd.service: ([0-9.]+) (\w+)", sec.stdout)
    harness.ok(m is not None, "systemd-analyze security reports an exposure level")
    if m:
        harness.ok(float(m.group(1)) < 2.0, "exposure %s %s is below 2.0" % (m.group(1),
                                                                             m.group(2)))
    for directive in ("Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "WatchdogSec=",
                      "DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict",
                      "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
                      "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
                      "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service",
                      "MemoryDenyWriteExecute=yes", "Requires=ratelimitd.socket",
                      "NotifyAccess=main"):
        harness.ok(directive in unit, "the unit sets %s" % directive.strip())


harness.run(main)
