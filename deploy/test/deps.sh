#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# deps.sh: what tests/integration/test_kubernetes.py and test_monitoring.py
# need, installed by tools/test.sh: node and npm, PyYAML, promtool (Debian's
# prometheus package) and the pinned Kubernetes schema validator (npm ci
# from deploy/test/package-lock.json).
#
# The prometheus package would start a Prometheus server on :9090 on
# install; a policy-rc.d that refuses every start keeps it from doing so
# (promtool is all the tests use), and is removed afterwards.
set -eu
cd "$(dirname "$0")"
missing=""
command -v node >/dev/null || missing="$missing nodejs"
command -v npm >/dev/null || missing="$missing npm"
command -v promtool >/dev/null || missing="$missing prometheus"
python3 -c 'import yaml' 2>/dev/null || missing="$missing python3-yaml"
if [ -n "$missing" ]; then
    rc=/usr/sbin/policy-rc.d
    if [ -e "$rc" ]; then
        # Someone else's (container images ship one): use it only if it
        # refuses starts too.
        st=0
        "$rc" prometheus start || st=$?
        if [ "$st" -ne 101 ]; then
            echo "deploy/test/deps.sh: $rc would let prometheus start (status $st)" >&2
            exit 1
        fi
    else
        printf '#!/bin/sh\n# deploy/test/deps.sh (ratelimitd): no service starts.\nexit 101\n' >"$rc"
        chmod 0755 "$rc"
        trap 'rm -f "$rc"' EXIT
    fi
    apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# The validator, exactly as locked; no install scripts run.
if ! cmp -s package-lock.json node_modules/.installed-lock.json 2>/dev/null; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.installed-lock.json
fi
