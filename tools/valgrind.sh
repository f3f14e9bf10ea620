#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# valgrind.sh: runs the integration tests that drive the daemon with every
# daemon under valgrind (memcheck, full leak check), then reports each
# daemon's error summary and leak summary. Exits 1 on any error or leak.
# Needs a built tree (tools/build.sh) and the Debian package valgrind.
set -eu
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind.sh: install valgrind" >&2; exit 2; }
logs=$(mktemp -d)
export RATELIMITD_WRAPPER="valgrind --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 --log-file=$logs/vg.%p.log"
# Debian's python3 first, as configure picks it: the gRPC tests need its
# python3-grpcio.
py=$(command -v /usr/bin/python3 || command -v python3)
rc=0
for t in ${*:-tests/integration/test_http.py tests/integration/test_redis_faults.py tests/integration/test_ops.py tests/integration/test_limits.py tests/integration/test_concurrency.py tests/integration/test_gateways.py tests/integration/test_rls_json.py tests/integration/test_grpc.py tests/integration/test_rls_grpc.py tests/integration/test_envoy_basic.py tests/integration/test_rls_modes.py tests/integration/test_tls.py tests/integration/test_tls_listen.py}; do
    if RATELIMITD="$PWD/ratelimitd" RL_SRCDIR="$PWD" "$py" "$t" > "$logs/$(basename "$t").tap" 2>&1; then
        echo "$t: $(grep -c '^ok' "$logs/$(basename "$t").tap") ok"
    else
        echo "$t: FAILED under valgrind:"
        grep -v '^ok' "$logs/$(basename "$t").tap" | head -40
        rc=1
    fi
done
n=0
for f in "$logs"/vg.*.log; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    if ! grep -q "ERROR SUMMARY: 0 errors" "$f"; then
        echo "---- $f"
        cat "$f"
        rc=1
    fi
done
echo "valgrind: $n daemon runs, $(grep -l 'ERROR SUMMARY: 0 errors' "$logs"/vg.*.log | wc -l) with 0 errors and no leaks"
grep -h "definitely lost\|indirectly lost\|possibly lost\|ERROR SUMMARY\|All heap blocks" "$logs"/vg.*.log | sed "s/^==[0-9]*== //" | sort | uniq -c
rm -rf "$logs"
exit "$rc"
