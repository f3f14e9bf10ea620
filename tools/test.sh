#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test.sh: the whole test suite from a fresh clone: dependencies, build,
# the layer rules of src/ (tools/layers.py) and clang-format over every C
# file; `make check`; a 5-minute soak (bench/soak.sh); then `make distcheck` with the same suite built with
# AddressSanitizer and UndefinedBehaviorSanitizer (from the tarball, out of
# tree, so a file missing from the distribution fails too); then the
# Debian package built from that tarball, lintian, and its install test in
# a fresh bookworm root; then the daemon's integration tests under
# valgrind; then a short run of each fuzzer; then the container image
# built with podman and run chrooted (tests/integration/test_image.py).
# Ends with one line "N passed, N failed" over every TAP test point.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
# The test tools too (tools/build.sh alone installs only what building and
# tools/run.sh need).
sh tools/deps.sh --test
sh tools/build.sh
# Go, for test_docs_examples.py to compile the Go client of docs/recipes.md
# (a test need only, so not in tools/deps.sh, which tools/run.sh uses too).
if ! command -v go >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends golang-go
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0

stage() { # stage NAME DIR: make check in DIR, logs on failure
    echo "== $1"
    if ! (cd "$2" && make -j"$(nproc)" check); then
        rc=1
        cat "$2/test-suite.log" || true
    fi
}

# The include graph keeps the layers and has no module cycle.
echo "== layers"
python3 tools/layers.py || rc=1

# Every C file as .clang-format has it: the files git tracks, or (a copy
# without .git) every C file under src/ and tests/ but the generated ones.
echo "== clang-format"
if [ -e .git ]; then
    git ls-files -z '*.c' '*.h' | xargs -0r clang-format --dry-run -Werror || rc=1
else
    find src tests -name '*.[ch]' ! -name '*_lua.c' ! -name 'ui_page.c' ! -name '*.pb-c.*' -print0 |
        xargs -0r clang-format --dry-run -Werror || rc=1
fi

# What test_kubernetes.py and test_monitoring.py need: promtool, node and
# the pinned Kubernetes schema validator.
echo "== deploy test tools"
sh deploy/test/deps.sh || rc=1
# The pinned OpenAPI linter test_openapi.py runs (node and npm from above).
echo "== openapi lint tools"
sh docs/openapi/deps.sh || rc=1

stage "make check" "$top"

# The soak, short (bench/soak.py): 2 daemons on held sockets and one Redis
# under 400 checks/s, a warm-up minute, a priming minute (each fault once),
# then 3 minutes with a fault each (a USR2 hand-over, Redis restarted, 200
# connections reset mid-request): RSS (since the priming), descriptors, failures outside the faults' first 20 s and
# over-admissions gate; p99 is reported, not gating (a loaded 2-core box
# moves it more than 1.5x on its own). TAP, counted below.
echo "== the soak, a warm-up minute, a priming minute and 3 fault minutes (bench/soak.sh)"
t0=$(date +%s)
sh bench/soak.sh --minutes 3 --faults usr2,redis-restart,kill-conns --rate 400 \
    --p99-not-gating --tap --data "$work/soak.tsv" >"$work/soak.tap" 2>&1 || rc=1
cat "$work/soak.tap"
echo "== the soak: $(($(date +%s) - t0)) s"

# make distcheck: the tarball builds out of tree from a read-only copy,
# passes the whole suite under ASan + UBSan, installs and uninstalls
# cleanly. Its tree is gone on success, so its test points are counted from
# its output (the TAP driver prints one "PASS:", "FAIL:"... line each).
echo "== make distcheck: the tarball's suite under ASan + UBSan"
t0=$(date +%s)
rm -f ratelimitd-*.tar.gz
# The group runs in a subshell under set -e: the status is kept, not fatal,
# so that a failure is recorded rather than hidden behind tee's 0.
{
    st=0
    make -j"$(nproc)" distcheck DISTCHECK_CONFIGURE_FLAGS="--enable-sanitizers --enable-werror" 2>&1 || st=$?
    echo "$st" >"$work/distcheck.rc"
} | tee "$work/distcheck.log"
if [ "$(cat "$work/distcheck.rc")" != 0 ]; then
    rc=1
    for d in ratelimitd-*/; do # distcheck leaves its tree when it fails
        [ -d "$d" ] || continue
        cat "$d"_build/sub/test-suite.log 2>/dev/null || true
        chmod -R u+w "$d" && rm -rf "$d"
    done
fi
tarball=""
for t in ratelimitd-*.tar.gz; do
    [ -f "$t" ] && mv "$t" "$work/" && tarball="$work/$t"
done
echo "== make distcheck: $(($(date +%s) - t0)) s"

# The Debian package from the tarball distcheck proved (dh_auto_test's unit
# tests skipped: they just ran twice), lintian clean, then installed into a
# fresh bookworm root by tests/integration/test_deb.sh (TAP, counted below).
echo "== the Debian package: build, lintian, install test in a bookworm root"
t0=$(date +%s)
# The install test's own tools (tools/package.sh installs the packaging
# ones): mmdebstrap makes the root (tools/rootfs.sh), curl asks the daemon.
if ! command -v mmdebstrap >/dev/null || ! command -v curl >/dev/null; then
    echo "test.sh: installing mmdebstrap curl"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends mmdebstrap curl
fi
if deb=$(DEB_BUILD_OPTIONS=nocheck sh tools/package.sh "$work/deb" "$tarball"); then
    {
        st=0
        sh tests/integration/test_deb.sh "$deb" || st=$?
        echo "$st" >"$work/deb.rc"
    } | tee "$work/deb.tap"
    [ "$(cat "$work/deb.rc")" = 0 ] || rc=1
else
    echo "== the package build or lintian failed"
    rc=1
fi
echo "== the Debian package: $(($(date +%s) - t0)) s"

# Every daemon of the integration tests under valgrind: no leak, no invalid
# access.
echo "== the integration tests with the daemon under valgrind"
sh tools/valgrind.sh || rc=1

# A short run of each libFuzzer harness (the long runs: docs/benchmarks.md).
echo "== fuzzing, 30 s per harness"
if make distdir distdir="$work/fuzz" >/dev/null &&
    (cd "$work/fuzz" && ./configure CC=clang --enable-fuzzing >/dev/null &&
        make -j"$(nproc)" >/dev/null); then
    sh "$work/fuzz/tests/fuzz/run.sh" 30 "$work/fuzz" || rc=1
else
    echo "== the fuzzing build failed"
    rc=1
fi

# The image: a podman build (minutes on 2 cores, layers cached between
# runs) and the image's command run chrooted; TAP, counted below.
echo "== the container image (tests/integration/test_image.py)"
t0=$(date +%s)
RL_SRCDIR="$top" /usr/bin/python3 tests/integration/test_image.py >"$work/image.tap" 2>&1 || rc=1
cat "$work/image.tap"
echo "== the container image: $(($(date +%s) - t0)) s"

passed=0
failed=0
p=$(cat "$top"/tests/unit/*.trs "$top"/tests/integration/*.trs 2>/dev/null | grep -c '^:test-result: \(PASS\|XFAIL\|SKIP\)' || true)
f=$(cat "$top"/tests/unit/*.trs "$top"/tests/integration/*.trs 2>/dev/null | grep -c '^:test-result: \(FAIL\|XPASS\|ERROR\)' || true)
passed=$((passed + p))
failed=$((failed + f))
# make distcheck's points, from the summary its `make check` printed (the
# per-point lines of two parallel jobs can run into each other).
sum() { # sum WORD...: the "# WORD: N" lines of the distcheck log, added up
    for w in "$@"; do sed -n "s/^# $w: *\([0-9]*\)$/\1/p" "$work/distcheck.log"; done |
        awk '{ s += $1 } END { print s + 0 }'
}
p=$(sum PASS XFAIL SKIP)
f=$(sum FAIL XPASS ERROR)
passed=$((passed + p))
failed=$((failed + f))
# The soak's, the package's and the image tests' TAP lines (a whole-file skip counts as one).
for tap in "$work/soak.tap" "$work/deb.tap" "$work/image.tap"; do
    p=$(grep -c '^ok \|^1\.\.0 # SKIP' "$tap" 2>/dev/null || true)
    f=$(grep -c '^not ok ' "$tap" 2>/dev/null || true)
    passed=$((passed + p))
    failed=$((failed + f))
done
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1 # a stage failed before any test could report (a build error)
fi
echo "$passed passed, $failed failed"
exit "$rc"
