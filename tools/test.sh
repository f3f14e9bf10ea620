#!/bin/sh
# test.sh: the whole test suite from a fresh clone: dependencies, build,
# the layer rules of src/ (tools/layers.py) and clang-format over every C
# file; `make check`; then the same suite built with AddressSanitizer and
# UndefinedBehaviorSanitizer (a copy of the distributed tree, so a file
# missing from the distribution fails too); then the daemon's integration
# tests under valgrind; then a short run of each fuzzer.
# Ends with one line "N passed, N failed" over every TAP test point.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
sh tools/build.sh
# Go, for test_docs_examples.py to compile the Go client of docs/recipes.md
# (a test need only, so not in tools/deps.sh, which tools/run.sh uses too).
if ! command -v go >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
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
# without .git) every C file under src/ and tests/.
echo "== clang-format"
if [ -e .git ]; then
    git ls-files -z '*.c' '*.h' | xargs -0r clang-format --dry-run -Werror || rc=1
else
    find src tests -name '*.[ch]' ! -name '*_lua.c' ! -name '*.pb-c.*' -print0 |
        xargs -0r clang-format --dry-run -Werror || rc=1
fi

stage "make check" "$top"

if make distdir distdir="$work/san" >/dev/null &&
    (cd "$work/san" && ./configure --enable-sanitizers --enable-werror >/dev/null &&
        make -j"$(nproc)" >/dev/null); then
    stage "make check under ASan + UBSan" "$work/san"
else
    echo "== the sanitizer build failed"
    rc=1
fi

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

passed=0
failed=0
for d in "$top" "$work/san"; do
    p=$(cat "$d"/tests/unit/*.trs "$d"/tests/integration/*.trs 2>/dev/null | grep -c '^:test-result: \(PASS\|XFAIL\|SKIP\)' || true)
    f=$(cat "$d"/tests/unit/*.trs "$d"/tests/integration/*.trs 2>/dev/null | grep -c '^:test-result: \(FAIL\|XPASS\|ERROR\)' || true)
    passed=$((passed + p))
    failed=$((failed + f))
done
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1 # a stage failed before any test could report (a build error)
fi
echo "$passed passed, $failed failed"
exit "$rc"
