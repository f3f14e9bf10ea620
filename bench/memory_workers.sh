#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/memory_workers.sh: what the one shared in-memory store costs when
# several workers decide in it (`backend: memory`, one mutex, see
# src/backend/backend_memory.c), and what a process-wide counter costs.
#
#   bench/memory_workers.sh                 workers 1 and 2, spread and hot keys
#   DUR=10 CONNS=64 bench/memory_workers.sh
#   BACKEND=redis bench/memory_workers.sh   the same with a private redis-server
#   PERF=1 bench/memory_workers.sh          also `perf record -g` of each worker
#                                           count, spread keys: the share of samples
#                                           in the lock (pthread_mutex_*, futex),
#                                           in local_decide and in the
#                                           process-wide counts
#   WORKERS="2" RL_BIN=/path/to/ratelimitd  other worker counts, another build
#
# Load as bench/run.sh drives it: wrk -t1 -c$CONNS with bench/post.lua,
# policy fw (fixed_window, 100 a minute): spread = 100 000 random keys, hot =
# one key (mostly denied: every request still takes the lock). Prints one
# line per case: workers, keys, req/s, p50 and p99 ms, non-2xx responses.
# Everything started here is stopped on exit; every run is bounded.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
RL_BIN=${RL_BIN:-$ROOT/ratelimitd}
DUR=${DUR:-8} WARM=${WARM:-2} CONNS=${CONNS:-64} BACKEND=${BACKEND:-memory} PERF=${PERF:-0}
WORKERS=${WORKERS:-"1 2"}

[ -x "$RL_BIN" ] || { echo "memory_workers.sh: build first (sh tools/build.sh && make)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "memory_workers.sh: needs wrk" >&2; exit 2; }

TMP=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    sleep 0.2
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

RURL="redis://127.0.0.1:1/0"
if [ "$BACKEND" = redis ]; then
    rport=$(free_port)
    redis-server --bind 127.0.0.1 --port "$rport" --dir "$TMP" --save "" --appendonly no \
        --logfile "$TMP/redis.log" &
    PIDS+=($!)
    RURL="redis://127.0.0.1:$rport/0"
    for _ in $(seq 50); do redis-cli -p "$rport" PING >/dev/null 2>&1 && break; sleep 0.1; done
fi

start_rl() { # start_rl WORKERS -> sets RLPID, URL
    local port
    # backend: memory refuses a redis: section it would not use.
    REDIS_SECTION=""
    [ "$BACKEND" = memory ] || REDIS_SECTION=$(printf 'redis:\n  url: %s\n  timeout: 1s' "$RURL")
    port=$(free_port)
    cat >"$TMP/rl.yaml" <<EOF
listen: 127.0.0.1:$port
backend: $BACKEND
$REDIS_SECTION
log_level: warn
workers: $1
local_max_keys: 200000
policies:
  fw:
    failure_mode: closed
    tiers:
      - {name: minute, algorithm: fixed_window, limit: 100, window: 60s}
EOF
    "$RL_BIN" --config "$TMP/rl.yaml" >"$TMP/rl.log" 2>&1 &
    RLPID=$!
    PIDS+=("$RLPID")
    URL="http://127.0.0.1:$port/check"
    for _ in $(seq 100); do
        curl -s -o /dev/null -X POST -d '{"policy":"fw","key":"probe"}' "$URL" && return 0
        sleep 0.1
    done
    echo "ratelimitd did not start:" >&2
    cat "$TMP/rl.log" >&2
    return 1
}

wrk_run() { # wrk_run SECONDS MODE
    BENCH_MODE=$2 BENCH_POLICY=fw timeout -k 5 $(($1 + 20)) \
        wrk -t1 -c"$CONNS" -d"$1s" --timeout 2s -s "$HERE/post.lua" "$URL" 2>&1 |
        grep '^RESULT ' | tail -n1
}
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

echo "# backend: $BACKEND, wrk -t1 -c$CONNS, ${DUR}s per case after ${WARM}s warmup, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-7s %10s %8s %8s %8s\n' workers keys req/s p50_ms p99_ms non2xx
for w in $WORKERS; do
    start_rl "$w" || exit 1
    for mode in spread hot; do
        wrk_run "$WARM" "$mode" >/dev/null
        r=$(wrk_run "$DUR" "$mode")
        printf '%-8s %-7s %10.0f %8s %8s %8s\n' "$w" "$mode" "$(field "$r" rps)" \
            "$(field "$r" p50_ms)" "$(field "$r" p99_ms)" "$(field "$r" non2xx)"
    done
    if [ "$PERF" = 1 ]; then
        command -v perf >/dev/null || { echo "PERF=1: needs perf" >&2; exit 2; }
        perf record -q -g -o "$TMP/perf.data" -p "$RLPID" -- sleep "$DUR" >/dev/null 2>&1 &
        ppid=$!
        wrk_run "$((DUR + 1))" spread >/dev/null
        wait "$ppid"
        # Columns: time with callees (children), self time. The lock's cost
        # is its user-space self time plus everything below glibc's slow
        # paths (__lll_lock_wait/_wake: the futex system calls, whose kernel
        # time a VM may book under another symbol, e.g. pvm_irq_enable, so
        # self time alone would miss it). The decision: self time of the
        # store's functions (our -O2 code has no frame pointers, so its
        # callee totals are not reliable).
        perf report -i "$TMP/perf.data" --children --sort symbol --stdio 2>/dev/null |
            grep -E '^ +[0-9.]+%' | tr -d '%' >"$TMP/perf.txt"
        self() { grep -E "$1" "$TMP/perf.txt" | awk '{s += $2} END {printf "%.2f", s}'; }
        incl() { grep -E "$1" "$TMP/perf.txt" | awk '{s += $1} END {printf "%.2f", s}'; }
        lock=$(awk -v a="$(self 'pthread_mutex_(lock|unlock)')" -v b="$(incl '__lll_lock_(wait|wake)')" \
            'BEGIN {printf "%.2f", a + b}')
        echo "# perf record -g, workers $w, spread keys, share of the daemon's samples:"
        echo "#   lock: $lock% (pthread_mutex_lock/unlock self $(self 'pthread_mutex_(lock|unlock)')%, __lll_lock_wait/wake with the futex calls $(incl '__lll_lock_(wait|wake)')%)"
        echo "#   decision and store, self (local_decide, lookup, lru_table, siphash, the algorithms): $(self '\[\.\] (local_|lookup |lru_|siphash|get_or_create|reclaim|fw_|store_)')%"
        echo "#   process-wide counts (server_count_take/_release): $(self 'server_count_')%"
        echo "#   top 10 by self time:"
        sort -k2 -rn "$TMP/perf.txt" | head -10 | sed 's/^/#   /'
    fi
    kill "$RLPID" 2>/dev/null
    wait "$RLPID" 2>/dev/null
done
