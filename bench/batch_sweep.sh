#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# batch_sweep.sh [SIZES...]: what redis.batch buys, one size at a time.
#
# Starts its own redis-server (unix socket in a temp dir, stopped at exit)
# and, per redis.batch size (default: 1 8 16 32 64 128), a fresh daemon with
# 1 worker and a fixed_window policy whose limit no run reaches, then runs
# `wrk -t1 -c64 -d$SECS` (default 10) on spread keys (bench/keys.lua,
# 100000 keys) and prints per size: checks/s and p99 (wrk), the mean
# requests per Redis call (ratelimitd_redis_batch_size), Redis's CPU per
# check (INFO cpu, the main thread's user + sys over the run, divided by
# the checks), the part of it inside the calls (usec of INFO commandstats'
# fcall over the checks) and the daemon's CPU per check (/proc). RUNS=N
# repeats each size N times (default 1): the box may be shared.
#
# Needs a built ./ratelimitd, wrk, redis-server and redis-cli. Every run is
# bounded by `timeout`.
set -eu
cd "$(dirname "$0")/.."
SECS=${SECS:-10}
RUNS=${RUNS:-1}
SIZES=${*:-1 8 16 32 64 128}
[ -x ./ratelimitd ] || { echo "batch_sweep.sh: build first (sh tools/build.sh)" >&2; exit 2; }
for p in wrk redis-server redis-cli curl; do
    command -v $p >/dev/null || { echo "batch_sweep.sh: needs $p" >&2; exit 2; }
done
dir=$(mktemp -d)
sock=$dir/redis.sock
redis-server --port 0 --unixsocket "$sock" --dir "$dir" --save "" --appendonly no \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
dpid=""
trap 'kill $dpid 2>/dev/null; kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null; sleep 0.2; rm -rf "$dir"' EXIT INT TERM
cli() { timeout 10 redis-cli -s "$sock" "$@"; }
for _ in 1 2 3 4 5 6 7 8 9 10; do cli PING >/dev/null 2>&1 && break; sleep 0.2; done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

redis_cpu() { # the main thread's user + sys seconds
    cli INFO cpu | tr -d '\r' | awk -F: '/used_cpu_(user|sys)_main_thread/ {s += $2} END {printf "%.6f", s}'
}
proc_cpu() { # a process's user + sys seconds
    awk -v hz="$(getconf CLK_TCK)" '{printf "%.6f", ($14 + $15) / hz}' "/proc/$1/stat"
}
metric() {
    curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'
}

printf '%6s %10s %8s %8s %10s %10s %10s\n' batch checks/s p99 per_call redis_us fcall_us daemon_us
for size in $SIZES; do
    run=0
    while [ "$run" -lt "$RUNS" ]; do
        run=$((run + 1))
        cat >"$dir/rl.yaml" <<EOF
listen: 127.0.0.1:$port
workers: 1
redis:
  url: unix:$sock
  timeout: 1s
  batch: $size
policies:
  bench: {tiers: [{name: t, algorithm: fixed_window, limit: 1000000000, window: 1h}]}
EOF
        ./ratelimitd --config "$dir/rl.yaml" >"$dir/daemon.log" 2>&1 &
        dpid=$!
        for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
        cli FLUSHALL >/dev/null
        cli CONFIG RESETSTAT >/dev/null
        r0=$(redis_cpu)
        d0=$(proc_cpu $dpid)
        timeout $((SECS + 30)) wrk -t1 -c64 -d"${SECS}s" --latency -s bench/keys.lua \
            "http://127.0.0.1:$port/" >"$dir/wrk.out" 2>&1
        r1=$(redis_cpu)
        d1=$(proc_cpu $dpid)
        checks=$(metric ratelimitd_redis_batch_size_sum)
        calls=$(metric ratelimitd_redis_batch_size_count)
        fcall=$(cli INFO commandstats | tr -d '\r' | awk -F'[=,]' '/^cmdstat_fcall:/ {print $4}')
        rps=$(awk '/^Requests\/sec/ {print $2}' "$dir/wrk.out")
        p99=$(awk '$1 == "99%" {print $2}' "$dir/wrk.out")
        awk -v b="$size" -v rps="$rps" -v p99="$p99" -v n="$checks" -v c="$calls" \
            -v r0="$r0" -v r1="$r1" -v d0="$d0" -v d1="$d1" -v f="${fcall:-0}" 'BEGIN {
            printf "%6d %10.0f %8s %8.1f %10.2f %10.2f %10.2f\n", b, rps, p99, n / c,
                (r1 - r0) * 1e6 / n, f / n, (d1 - d0) * 1e6 / n }'
        kill $dpid
        wait $dpid 2>/dev/null || true
        dpid=""
    done
done
