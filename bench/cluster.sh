#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/cluster.sh: checks/s of ratelimitd against one Redis and against a
# Redis Cluster of 3 masters, with 1, 2 and 3 daemon processes, on this
# machine (127.0.0.1 only). Prints one table, "mode daemons checks/s", the
# median of RUNS runs of DUR seconds each (~2.5 min with the defaults).
#
#   bench/cluster.sh                 3 runs of 5 s per row
#   bench/cluster.sh --runs 5 --duration 8 --conns 64
#
# Load: one `wrk -t1` per daemon, all at once, the connections (48 in all by
# default) split evenly over the daemons, so every row offers the same
# concurrency; checks/s is the sum of the wrks' rates. Keys: bench/post.lua
# "spread" (100 000 keys, so the cluster's slots are all in use), policy fw
# (fixed_window). Every daemon has `workers: 1`, so "daemons" counts event
# loops. On a box with few cores, the daemons, the Redis servers and wrk
# share them: the figures say how the whole stack scales here, not how far
# a cluster scales with cores of its own.
#
# RL_BIN=/path/to/ratelimitd overrides the binary (default: ./ratelimitd of
# the tree). Everything started is stopped on exit, also on Ctrl-C; every
# wait and every wrk run is bounded.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
RUNS=3 DUR=5 CONNS=48 KEYS=100000

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift ;;
        --duration) DUR=$2; shift ;;
        --conns) CONNS=$2; shift ;;
        -h|--help) sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "cluster.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done

T_START=$(date +%s)
log() { printf '[cluster %3ds] %s\n' "$(( $(date +%s) - T_START ))" "$*" >&2; }

for p in redis-server redis-cli wrk curl; do
    command -v "$p" >/dev/null || { log "missing: $p (tools/deps.sh installs redis-server redis-tools; apt-get install wrk curl)"; exit 1; }
done
RL_BIN=${RL_BIN:-$ROOT/ratelimitd}
[ -x "$RL_BIN" ] || { log "no daemon at $RL_BIN (sh tools/build.sh)"; exit 1; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rl-cluster-bench.XXXXXX")
STARTED=()   # PIDs of everything started here, stopped in reverse

stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}
cleanup() {
    local i
    trap - EXIT INT TERM
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do stop_pid "${STARTED[$i]}"; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# A port P free on 127.0.0.1 with P + 10000 free too (a cluster node's bus),
# below the kernel's ephemeral range (where wrk's own connections live).
read -r EPH_LO _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPH_LO=32768
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
    local p i
    for i in $(seq 1 200); do
        p=$(( 10000 + (RANDOM * 32768 + RANDOM) % (EPH_LO - 20000) ))
        port_free "$p" && port_free $(( p + 10000 )) && { echo "$p"; return 0; }
    done
    return 1
}

start_redis() {   # start_redis PORT [args...]: waits for PING
    local port=$1 i
    shift
    mkdir -p "$TMP/redis-$port"
    redis-server --bind 127.0.0.1 --port "$port" --dir "$TMP/redis-$port" --save '' \
        --appendonly no --daemonize no --loglevel warning "$@" >"$TMP/redis-$port/log" 2>&1 &
    STARTED+=("$!")
    for i in $(seq 1 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    log "redis-server on $port did not start: $(tail -n2 "$TMP/redis-$port/log")"
    return 1
}

# ------------------------------------------------------------- servers ---
SINGLE=$(free_port) && start_redis "$SINGLE" || exit 1
CPORTS=()
for i in 1 2 3; do
    p=$(free_port) || exit 1
    start_redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
        --cluster-node-timeout 1000 || exit 1
    CPORTS+=("$p")
done
redis-cli --cluster create "${CPORTS[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes \
    >"$TMP/create.log" 2>&1 || { log "redis-cli --cluster create failed:"; tail -n5 "$TMP/create.log" >&2; exit 1; }
for i in $(seq 1 200); do
    ok=1
    for p in "${CPORTS[@]}"; do
        redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
    done
    [ "$ok" = 1 ] && break
    sleep 0.1
done
[ "$ok" = 1 ] || { log "the cluster did not reach cluster_state:ok"; exit 1; }
log "$(redis-server --version | awk '{print $3}'): one Redis on $SINGLE, a cluster of 3 masters on ${CPORTS[*]}"

# ------------------------------------------------------------- daemons ---
PIDS=() URLS=()
start_daemons() {   # start_daemons MODE N
    local mode=$1 n=$2 k port conf code i
    for k in $(seq 1 "$n"); do
        port=$(free_port) || return 1
        conf="$TMP/rl-$mode-$k.yaml"
        {
            echo "listen: 127.0.0.1:$port"
            echo "workers: 1"
            echo "log_level: warn"
            echo "redis:"
            if [ "$mode" = single ]; then
                echo "  url: redis://127.0.0.1:$SINGLE/0"
            else
                printf '  cluster: ['
                printf '"redis://127.0.0.1:%s", ' "${CPORTS[@]:0:2}"
                printf '"redis://127.0.0.1:%s"]\n' "${CPORTS[2]}"
            fi
            echo "  timeout: 1s"
            echo "policies:"
            echo "  fw: {failure_mode: closed, tiers: [{name: minute, algorithm: fixed_window, limit: 100, window: 60s}]}"
        } >"$conf"
        "$RL_BIN" --config "$conf" >"$TMP/rl-$mode-$k.log" 2>&1 &
        PIDS+=("$!") STARTED+=("$!") URLS+=("http://127.0.0.1:$port/check")
        for i in $(seq 1 100); do
            code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' -XPOST -d '{"policy":"fw","key":"probe"}' \
                "http://127.0.0.1:$port/check")
            case "$code" in 200|429) break ;; esac
            kill -0 "${PIDS[-1]}" 2>/dev/null || break
            sleep 0.1
        done
        case "$code" in 200|429) ;; *)
            log "daemon $mode/$k did not decide (HTTP $code): $(tail -n2 "$TMP/rl-$mode-$k.log")"
            return 1 ;;
        esac
    done
}
stop_daemons() {
    local p
    for p in "${PIDS[@]}"; do stop_pid "$p"; done
    PIDS=() URLS=()
}

# one_run: every daemon under its own wrk at once; prints the summed rate
one_run() {
    local per=$(( CONNS / ${#URLS[@]} )) u k=0 outs=()
    for u in "${URLS[@]}"; do
        k=$((k + 1))
        BENCH_MODE=spread BENCH_POLICY=fw BENCH_KEYS=$KEYS \
            timeout -k 5 $(( DUR + 20 )) wrk -t1 -c"$per" -d"${DUR}s" --timeout 2s \
            -s "$HERE/post.lua" "$u" >"$TMP/wrk.$k" 2>&1 &
        outs+=("$!")
    done
    for u in "${outs[@]}"; do wait "$u"; done
    cat "$TMP"/wrk.* | awk '/^RESULT /{ for (i = 2; i <= NF; i++) if ($i ~ /^rps=/) { sub("rps=", "", $i); s += $i; n++ } }
        /^RESULT /{ for (i = 2; i <= NF; i++) if ($i ~ /^non2xx=/) { sub("non2xx=", "", $i); e += $i } }
        END { if (n) printf "%.0f %d\n", s, e }'
    rm -f "$TMP"/wrk.*
}

declare -A MED
for mode in single cluster; do
    for n in 1 2 3; do
        if ! start_daemons "$mode" "$n"; then stop_daemons; MED[$mode,$n]="failed"; continue; fi
        # clear the counters (FLUSHALL runs on one node: every master)
        if [ "$mode" = single ]; then redis-cli -p "$SINGLE" flushall >/dev/null
        else for p in "${CPORTS[@]}"; do redis-cli -p "$p" flushall >/dev/null; done; fi
        rates=()
        for r in $(seq 1 "$RUNS"); do
            read -r rate errs < <(one_run)
            [ -n "${rate:-}" ] || { log "$mode x$n run $r: wrk gave no result"; continue; }
            # A 5xx (failure_mode closed) would be a rate of errors, not checks.
            [ "${errs:-0}" -gt 0 ] && log "$mode x$n run $r: $errs answers had a status >= 400 (429 included)"
            rates+=("$rate")
            log "$mode, $n daemon(s), run $r: $rate checks/s"
        done
        MED[$mode,$n]=$(printf '%s\n' "${rates[@]}" | sort -n | awk '{ a[NR] = $1 } END { print NR ? a[int((NR + 1) / 2)] : "failed" }')
        stop_daemons
    done
done

printf '\n%-8s %-8s %s\n' mode daemons checks/s
for mode in single cluster; do
    for n in 1 2 3; do printf '%-8s %-8s %s\n' "$mode" "$n" "${MED[$mode,$n]}"; done
done
printf '(median of %d runs of %d s; %d connections in all; %d CPUs; %s)\n' \
    "$RUNS" "$DUR" "$CONNS" "$(nproc)" "$(date -u +%Y-%m-%d)"
