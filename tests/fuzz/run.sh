#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/fuzz/run.sh SECONDS [BUILD_DIR]
#
# Runs each libFuzzer harness for SECONDS, one after the other in a single
# process each, starting from a copy of its seed corpus in a temporary
# directory (the corpora in the repository are never written to). Prints one
# line per target and exits non-zero if any target crashed, leaked, timed
# out, ran out of memory or hit undefined behaviour.
#
# BUILD_DIR is where ./configure CC=clang --enable-fuzzing && make ran
# (default: the source tree). FUZZ_TARGETS picks targets (default
# "request config http rls_json redis_reply tzif module_args store_file"); FUZZ_FLAGS
# adds libFuzzer flags. A failing target's input and log are kept under $FUZZ_OUT (default: a temporary directory,
# removed when everything passes) and their paths printed. stdin is
# /dev/null: a fuzzed policy file may name /dev/stdin as auth_token_file.
set -u

usage()
{
    echo "usage: $0 SECONDS [BUILD_DIR]" >&2
    exit 64
}

if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
case $1 in
'' | *[!0-9]*) usage ;;
esac
seconds=$1
here=$(cd "$(dirname "$0")" && pwd) || exit 1
build=${2:-$here/../..}
build=$(cd "$build" && pwd) || exit 1

# UBSan only reports and carries on unless told to stop; so does ASan's leak
# check without libFuzzer's help. Make both fatal. Callers may add options.
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS ASAN_OPTIONS

out=${FUZZ_OUT:-}
keep_out=1
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/ratelimitd-fuzz.XXXXXX") || exit 1
    keep_out=0
fi
mkdir -p "$out" || exit 1

# The last value of a "name: value" field in libFuzzer's status lines.
field()
{
    grep -E "^#[0-9]+" "$2" | sed -n "s/.* $1 \([^ ]*\).*/\1/p" | tail -n 1
}

# A libFuzzer final statistic (-print_final_stats=1).
final_stat()
{
    sed -n "s/^stat::$1: *//p" "$2" | tail -n 1
}

failed=0
for target in ${FUZZ_TARGETS:-request config http rls_json redis_reply tzif module_args store_file}; do
    case $target in
    request) max_len=4096 ;;
    config) max_len=8192 ;;
    http) max_len=16384 ;;
    rls_json) max_len=16384 ;;
    redis_reply) max_len=4096 ;;
    tzif) max_len=8192 ;;
    module_args) max_len=4096 ;;
    *)
        echo "$0: unknown target $target" >&2
        exit 64
        ;;
    esac
    bin=$build/tests/fuzz/fuzz_$target
    if [ ! -x "$bin" ]; then
        echo "$0: $bin not built: ./configure CC=clang --enable-fuzzing && make" >&2
        exit 1
    fi
    dir=$out/$target
    rm -rf "$dir"
    mkdir -p "$dir/corpus" "$dir/artifacts" || exit 1
    cp "$here/corpus/$target"/* "$dir/corpus/" || exit 1
    dict=
    [ -f "$here/$target.dict" ] && dict=-dict=$here/$target.dict
    log=$dir/fuzz.log

    # shellcheck disable=SC2086 # FUZZ_FLAGS and dict split on purpose
    "$bin" -max_total_time="$seconds" -max_len="$max_len" -timeout=5 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$dir/artifacts/" $dict ${FUZZ_FLAGS:-} \
        "$dir/corpus" </dev/null >"$log" 2>&1
    rc=$?

    if [ $rc -eq 0 ] && grep -q "^Done [0-9]* runs" "$log"; then
        result=ok
    else
        if grep -q "ERROR: libFuzzer: timeout" "$log"; then
            result=TIMEOUT
        elif grep -q "ERROR: libFuzzer: out-of-memory" "$log"; then
            result=OUT-OF-MEMORY
        elif grep -q "ERROR: LeakSanitizer" "$log"; then
            result=LEAK
        elif grep -q "runtime error:" "$log"; then
            result=UNDEFINED-BEHAVIOUR
        else
            result=CRASH
        fi
        result="$result (exit $rc)"
        failed=1
    fi
    execs=$(final_stat number_of_executed_units "$log")
    speed=$(final_stat average_exec_per_sec "$log")
    printf '%-8s %s execs, %s exec/s, cov: %s ft: %s, corpus: %s (%s new units), %s\n' \
        "$target" "${execs:-?}" "${speed:-?}" "$(field cov: "$log")" "$(field ft: "$log")" \
        "$(field corp: "$log")" "$(final_stat new_units_added "$log")" "$result"
    if [ "$result" != ok ]; then
        # The sanitizer's report, then where the input and full log are.
        grep -E "^(==[0-9]+== ?ERROR|SUMMARY|.*runtime error:|fuzz_$target: |[^ ]+: out of memory|    #[0-9]+ )" "$log" |
            grep -v -E "in (fuzzer::|__sanitizer|__interceptor|__libc|_start|main \(|raise|abort|__pthread)|libc\.so" |
            head -n 25 | sed 's/^/    /'
        for a in "$dir"/artifacts/*; do
            [ -f "$a" ] && echo "    input: $a"
        done
        echo "    log:   $log"
        keep_out=1
    fi
done

[ $keep_out -eq 0 ] && rm -rf "$out"
exit $failed
