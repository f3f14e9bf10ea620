# SPDX-License-Identifier: Apache-2.0
# tap.sh: TAP for the sh tests, sourced (. "$src/tests/integration/tap.sh").
# `ok STATUS DESCRIPTION` prints the next test point; $n counts them and
# $failed the failures, for the closing `echo "1..$n"; [ "$failed" -eq 0 ]`.
# shellcheck shell=sh
n=0
failed=0
ok() { # ok STATUS DESCRIPTION: "ok" when STATUS is 0
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $n - $2"
    else
        failed=$((failed + 1))
        echo "not ok $n - $2"
    fi
}
