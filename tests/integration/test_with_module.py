#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_with_module.py: the daemon's key Redis tests again, with
ratelimitd.so ($RATELIMITD_MODULE) loaded into every redis-server they
start ($RL_TEST_LOADMODULE, harness.module_args) and `redis.module: on` in
every daemon's file (daemon.py): the daemon is then ready only where it
decides through the module, so each test passing here shows batching,
leases, reports, the deny cache, Redis
faults and Cluster behaving on the module's path as on the Functions'.

One point per test: its exit status 0 and no failed point.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import ok  # noqa: E402
from test_module import module_under_test  # noqa: E402

TESTS = ("test_batch_diff.py", "test_local_leases.py", "test_report.py", "test_deny_cache.py",
         "test_redis_faults.py", "test_cluster.py")


def main():
    env = dict(os.environ, RL_TEST_LOADMODULE=module_under_test())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in TESTS:
        run = subprocess.run([sys.executable, os.path.join(here, name)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        out = run.stdout.decode("utf-8", "replace")
        lines = out.splitlines()
        if any(ln.startswith("1..0 # SKIP") for ln in lines):
            harness.skip("%s: %s" % (name, lines[-1]))
            continue
        passed = sum(ln.startswith("ok ") for ln in lines)
        failed = [ln for ln in lines if ln.startswith(("not ok", "Bail out!"))]
        if not ok(run.returncode == 0 and not failed and passed > 0,
                  "%s with the module on every Redis: %d points pass" % (name, passed)):
            harness.diag("\n".join(failed[:10]) or out[-3000:])


if __name__ == "__main__":
    harness.run(main)
