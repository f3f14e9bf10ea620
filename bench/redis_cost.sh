#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# redis_cost.sh [CALLS]: what one decision costs Redis, per algorithm.
#
# Starts its own redis-server on a free loopback port (data in a temp dir,
# stopped at exit), loads the decision code both ways (FUNCTION LOAD of the
# library, SCRIPT LOAD of the EVAL script) and, next to it, a minimal script
# per algorithm doing only that algorithm's essential Redis work (e.g.
# INCRBY + PEXPIRE for fixed_window). Then, for each rate algorithm
# (concurrency aside) with one tier, redis-benchmark sends CALLS calls (default
# 200000; random keys among 1e6, limits high enough that every call is
# allowed and writes) through FCALL, through EVALSHA of our script, and to
# the minimal script, and prints, best of RUNS runs (default 3: the box may
# be shared), calls/s (4 clients, pipelines of 50), µs per call as Redis
# itself measures it (usec_per_call of INFO commandstats: the server's time
# inside the call) and the ratio of those µs to the minimal script's. Our
# code reads Redis TIME (ARGV[1] "", `clock: redis`, the default); the
# minimal scripts of the time-based algorithms do too.
#
# Needs a built tree (./ratelimitd, tests/unit/local_driver: `make check`
# or `make tests/unit/local_driver` builds it) and the Debian package
# redis-server (redis-server, redis-cli, redis-benchmark). Every benchmark
# is bounded by `timeout`.
set -eu
cd "$(dirname "$0")/.."
CALLS=${1:-200000}
RUNS=${RUNS:-3}
[ -x ./ratelimitd ] || { echo "redis_cost.sh: build first (sh tools/build.sh)" >&2; exit 2; }
[ -x tests/unit/local_driver ] || make -s tests/unit/local_driver >/dev/null
for p in redis-server redis-cli redis-benchmark; do
    command -v $p >/dev/null || { echo "redis_cost.sh: needs $p (Debian package redis-server)" >&2; exit 2; }
done

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save "" --appendonly no \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'kill "$(cat "$dir/redis.pid" 2>/dev/null)" 2>/dev/null; sleep 0.2; rm -rf "$dir"' EXIT INT TERM
cli() { timeout 10 redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in 1 2 3 4 5 6 7 8 9 10; do cli PING >/dev/null 2>&1 && break; sleep 0.2; done

./ratelimitd --print-script >"$dir/script.lua"
tests/unit/local_driver --print-library >"$dir/library.lua"
fn=$(cli -x FUNCTION LOAD REPLACE <"$dir/library.lua")
sha=$(cli -x SCRIPT LOAD <"$dir/script.lua")

# The minimal scripts: KEYS[1] (and KEYS[2] for the log), no checks, no
# figures beyond one number, integer arithmetic only where it is needed.
NOW="local t = redis.call('TIME') local now = t[1] * 1000000 + t[2]"
minimal() {
    case $1 in
    fixed_window) echo "local n = redis.call('INCRBY', KEYS[1], 1)
redis.call('PEXPIRE', KEYS[1], 61000) return n" ;;
    sliding_window_log) echo "$NOW
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000000)
local n = redis.call('ZCARD', KEYS[1])
local seq = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[1], now, now .. '-' .. seq)
redis.call('PEXPIRE', KEYS[1], 61000) redis.call('PEXPIRE', KEYS[2], 61000) return n" ;;
    sliding_window_counter) echo "$NOW
local v = redis.call('HMGET', KEYS[1], 'w', 'c', 'p')
redis.call('HSET', KEYS[1], 'w', math.floor(now / 60000000), 'c', (tonumber(v[2]) or 0) + 1, 'p', tonumber(v[3]) or 0)
redis.call('PEXPIRE', KEYS[1], 121000) return 1" ;;
    sliding_window_buckets) echo "$NOW
local all = redis.call('HGETALL', KEYS[1])
redis.call('HINCRBY', KEYS[1], math.floor(now / 1000000), 1)
redis.call('PEXPIRE', KEYS[1], 61000) return #all" ;;
    token_bucket) echo "$NOW
local v = redis.call('GET', KEYS[1])
local s = tonumber(v) or 1000000
redis.call('SET', KEYS[1], s - 1, 'PX', 61000) return s" ;;
    gcra|leaky_bucket) echo "$NOW
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
redis.call('SET', KEYS[1], tat + 60, 'PX', 61000) return tat - now" ;;
    esac
}

# Best of RUNS runs of one command line: "calls/s µs", calls/s from
# redis-benchmark's CSV and µs from Redis's own usec_per_call (INFO
# commandstats, reset before each run: the server's time per call).
rate() {
    best_r=0; best_u=999999
    for _ in $(seq "$RUNS"); do
        cli CONFIG RESETSTAT >/dev/null
        r=$(timeout 300 redis-benchmark -h 127.0.0.1 -p "$port" -c 4 -P 50 -n "$CALLS" -r 1000000 --csv "$@" \
            | awk -F'"' 'NR == 2 { print $4 }')
        u=$(cli INFO commandstats | tr -d '\r' | awk -F'usec_per_call=' \
            '/^cmdstat_(fcall|evalsha):/ { split($2, v, ","); print v[1] }')
        best_r=$(awk -v a="$best_r" -v b="$r" 'BEGIN { print (b > a) ? b : a }')
        best_u=$(awk -v a="$best_u" -v b="$u" 'BEGIN { print (b < a) ? b : a }')
    done
    echo "$best_r $best_u"
}

# The tier's keys for one variant (m, f, e: their state layouts differ).
keys() {
    echo "b:$alg:$1:{__rand_int__}:t"
    [ -z "$seq" ] || echo "b:$alg:$1:{__rand_int__}:t:seq"
}

printf '%-23s | %9s %6s | %9s %6s %5s | %9s %6s %5s\n' "" "minimal" "" "FCALL" "" "" "EVALSHA" "" ""
printf '%-23s | %9s %6s | %9s %6s %5s | %9s %6s %5s\n' algorithm "calls/s" "µs" "calls/s" "µs" "x" \
    "calls/s" "µs" "x"
for alg in fixed_window sliding_window_log sliding_window_counter sliding_window_buckets \
    token_bucket gcra leaky_bucket; do
    burst=0; prec=0; n=1; seq=""
    case $alg in
    token_bucket|gcra) burst=1000000 ;;
    leaky_bucket) burst=999999 ;;
    sliding_window_buckets) prec=1000000 ;;
    sliding_window_log) n=2; seq=1 ;;
    esac
    msha=$(minimal $alg | cli -x SCRIPT LOAD)
    cli FLUSHALL >/dev/null
    argv="\"\" 0 1 \"0 $alg 1000000 60000000 $burst $prec\""
    # One call of each first: an error reply (a script and a bench out of
    # step) would otherwise be timed as if it were a decision.
    for call in "FCALL $fn" "EVALSHA $sha"; do
        # shellcheck disable=SC2086
        if eval cli $call $n $(keys x) $argv 2>&1 | grep -q ERR; then
            echo "redis_cost.sh: $alg: $call fails:" >&2
            eval cli $call $n $(keys x) $argv >&2
            exit 1
        fi
    done
    # shellcheck disable=SC2086 # keys and argv are word lists
    m=$(eval rate EVALSHA "$msha" $n $(keys m))
    # shellcheck disable=SC2086
    f=$(eval rate FCALL "$fn" $n $(keys f) $argv)
    # shellcheck disable=SC2086
    e=$(eval rate EVALSHA "$sha" $n $(keys e) $argv)
    echo "$alg $m $f $e" | awk '{
        printf "%-23s | %9.0f %6.2f | %9.0f %6.2f %5.2f | %9.0f %6.2f %5.2f\n",
            $1, $2, $3, $4, $5, $5 / $3, $6, $7, $7 / $3 }'
done
