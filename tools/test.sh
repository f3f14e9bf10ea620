#!/bin/sh
# test.sh: the whole test suite from a fresh clone: dependencies, build,
# `make check`, then one summary line "N passed, N failed" counted over
# every TAP test point.
set -eu
cd "$(dirname "$0")/.."
sh tools/build.sh
rc=0
make -j"$(nproc)" check || rc=$?
# automake's test-suite.log holds the logs of every failed test.
if [ "$rc" -ne 0 ] && [ -f test-suite.log ]; then
    cat test-suite.log
fi
passed=$(cat tests/unit/*.trs tests/integration/*.trs 2>/dev/null | grep -c '^:test-result: \(PASS\|XFAIL\|SKIP\)' || true)
failed=$(cat tests/unit/*.trs tests/integration/*.trs 2>/dev/null | grep -c '^:test-result: \(FAIL\|XPASS\|ERROR\)' || true)
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1 # make check failed before any test could report (a build error)
fi
echo "$passed passed, $failed failed"
exit "$rc"
