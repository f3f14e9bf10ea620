#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/grpc.sh: Envoy's ShouldRateLimit over gRPC (h2c) against POST /check
# over HTTP/1.1, both driven by the same load generator (h2load: h2c for
# gRPC, --h1 for /check), same connections and streams, same daemon (one
# worker), same policy, same key, on 127.0.0.1 only.
#
#   bench/grpc.sh                          backend redis, 1 run of 5 s per case
#   bench/grpc.sh --backend memory --runs 3 --duration 8
#   bench/grpc.sh --perf /tmp/prof         + perf record -g of the daemon
#
# Output (stdout, machine-readable; everything else goes to stderr), one
# line per front and case, medians over the runs:
#   grpc allowed 12345/s
#   check allowed 13456/s
#   ratio allowed 0.92          (grpc / check)
#   cpu grpc allowed 21.3us     (daemon CPU per call, user + system)
#   cpu check allowed 16.0us
#   wrk allowed 14000/s         (only with --wrk: /check by wrk -t1)
# and the same for `denied`.
#
# Options:
#   --backend B    redis (a private redis-server) or memory (default redis)
#   --runs N       runs of each case and front, alternating (1)
#   --duration S   seconds of each measured run (5)
#   --warmup S     seconds of warmup of each front per case (1)
#   --conns C      connections (64), the same for both fronts
#   --streams M    requests in flight per connection (1), both fronts
#                  (h2load -m: HTTP/2 streams, HTTP/1.1 pipelining)
#   --cases LIST   "allowed denied" (default both)
#   --perf DIR     perf record -g of the daemon during the first measured
#                  run of each case and front: DIR/FRONT-CASE.data and the
#                  top entries (perf report --no-children) in DIR/FRONT-CASE.txt
#   --wrk          also /check by wrk -t1 -cC (bench/grpc_check.lua)
#   RL_BIN=/path/to/ratelimitd overrides the binary.
#
# Cases, each a single key, so both fronts send byte-identical requests
# every time (h2load posts one file):
#   allowed  policy `big` (fixed_window, 10^9 per 60 s): every call allowed
#   denied   policy `fw` (fixed_window, 100 per 60 s), exhausted during the
#            warmup: every call denied, mostly from the deny cache
# gRPC: h2load -d FILE where FILE is the 5-byte gRPC prefix + a serialized
# RateLimitRequest (domain bench, descriptor user=CASE) built with Python
# protobuf from proto/ (tests/integration/rls_client.py); headers
# content-type: application/grpc, te: trailers. /check: the body
# {"policy":P,"key":"bench|user=CASE","cost":1} (the key the RLS call
# builds: both fronts meet the same counter). Checks/s counts h2load's
# succeeded gRPC calls and /check's 2xx + 4xx answers (a denial is a 429).
# After the runs one more gRPC call of each case is printed to stderr (OK /
# OVER_LIMIT) with the daemon's count of gRPC calls by code: h2load sees
# HTTP 200 on a gRPC error too, so this shows there were none.
# Needs h2load (nghttp2-client), redis-server and redis-cli (redis
# backend), python3-grpcio, python3-grpc-tools, python3-protobuf; wrk and
# perf only with their options. Everything started here is stopped on exit.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
RUNS=1 DUR=5 WARM=1 CONNS=64 STREAMS=1 CASES="allowed denied" BACKEND=redis PERFDIR="" WRK=0
while [ $# -gt 0 ]; do
    case "$1" in
        --backend) BACKEND=$2; shift ;;
        --runs) RUNS=$2; shift ;;
        --duration) DUR=$2; shift ;;
        --warmup) WARM=$2; shift ;;
        --conns) CONNS=$2; shift ;;
        --streams) STREAMS=$2; shift ;;
        --cases) CASES=$2; shift ;;
        --perf) PERFDIR=$2; shift ;;
        --wrk) WRK=1 ;;
        -h|--help) sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "grpc.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done
case "$BACKEND" in redis|memory) ;; *) echo "grpc.sh: --backend is redis or memory" >&2; exit 64 ;; esac
for c in $CASES; do
    case "$c" in allowed|denied) ;; *) echo "grpc.sh: unknown case $c (allowed, denied)" >&2; exit 64 ;; esac
done
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
need="h2load curl"
[ "$BACKEND" = redis ] && need="$need redis-server redis-cli"
[ "$WRK" = 1 ] && need="$need wrk"
[ -n "$PERFDIR" ] && need="$need perf"
for p in $need; do
    command -v "$p" >/dev/null || { echo "grpc.sh: $p is missing (apt-get install nghttp2-client curl redis-server redis-tools wrk linux-perf)" >&2; exit 69; }
done
RL_BIN=${RL_BIN:-$ROOT/ratelimitd}
[ -x "$RL_BIN" ] || { echo "grpc.sh: no daemon at $RL_BIN (build it: sh tools/build.sh)" >&2; exit 69; }
[ -z "$PERFDIR" ] || mkdir -p "$PERFDIR" || exit 73

log() { printf '[grpc.sh] %s\n' "$*" >&2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rl-grpc-bench.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {   # a loopback port nothing listens on, below the ephemeral range
    local p i
    for i in $(seq 1 100); do
        p=$(( 10000 + (RANDOM * 32768 + RANDOM) % 20000 ))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
    done
    return 1
}

HPORT=$(free_port) GPORT=$(free_port)
if [ "$BACKEND" = redis ]; then
    RPORT=$(free_port)
    redis-server --bind 127.0.0.1 --port "$RPORT" --dir "$TMP" --save '' --appendonly no \
        --daemonize no --loglevel warning >"$TMP/redis.log" 2>&1 &
    PIDS+=($!)
    for i in $(seq 1 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    BACKEND_YAML="redis:
  url: redis://127.0.0.1:$RPORT/0
  timeout: 1s"
else
    BACKEND_YAML="backend: memory"
fi

cat >"$TMP/rl.yaml" <<EOF
listen: 127.0.0.1:$HPORT
grpc_listen: 127.0.0.1:$GPORT
workers: 1
$BACKEND_YAML
log_level: warn
policies:
  big:
    failure_mode: closed
    tiers: [{name: minute, algorithm: fixed_window, limit: 1000000000, window: 60s}]
  fw:
    failure_mode: closed
    tiers: [{name: minute, algorithm: fixed_window, limit: 100, window: 60s}]
domains:
  - domain: bench
    descriptors:
      - {key: user, value: allowed, policy: big}
      - {key: user, value: denied, policy: fw}
EOF
"$RL_BIN" --config "$TMP/rl.yaml" >"$TMP/rl.log" 2>&1 &
RLPID=$!
PIDS+=($RLPID)
for i in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$HPORT/readyz" && break
    sleep 0.1
done
curl -sf -o /dev/null "http://127.0.0.1:$HPORT/readyz" || { log "ratelimitd did not start:"; cat "$TMP/rl.log" >&2; exit 1; }

# The request bodies, and one real gRPC call of each to prove the path
# answers (h2load only sees HTTP status 200, not grpc-status).
"$PY" - "$ROOT/tests/integration" "$TMP" "$GPORT" $CASES <<'EOF' || { log "could not build or send the gRPC request"; exit 1; }
import struct, sys
sys.path.insert(0, sys.argv[1])
import rls_client
rls_client.require()
tmp, port, cases = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
ch = rls_client.channel("127.0.0.1:%d" % port)
for case in cases:
    data = rls_client.build_request("bench", [[("user", case)]]).SerializeToString()
    with open("%s/%s.grpc" % (tmp, case), "wb") as f:
        f.write(struct.pack(">BI", 0, len(data)) + data)  # not compressed, length
    with open("%s/%s.json" % (tmp, case), "w") as f:
        f.write('{"policy":"%s","key":"bench|user=%s","cost":1}' % (
            "big" if case == "allowed" else "fw", case))
    resp = rls_client.should_rate_limit(ch, "bench", [[("user", case)]], timeout=5)
    print("[grpc.sh] probe %s: overall_code %d" % (case, resp.overall_code), file=sys.stderr)
EOF

grpc_run() {   # grpc_run CASE SECONDS -> checks/s
    timeout -k 5 $(( $2 + 30 )) h2load -c"$CONNS" -m"$STREAMS" -t1 -D"$2" -d "$TMP/$1.grpc" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$GPORT/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" \
        >"$TMP/h2.out" 2>&1
    # "requests: N total, N started, N done, N succeeded, N failed, ..." and
    # "finished in 5.00s, 41234.20 req/s, ...": only succeeded (HTTP 200) count.
    awk '/^finished in/ { gsub("s,", "", $3); secs = $3 }
         /^requests:/ { ok = $8 }
         END { if (secs > 0) printf "%.0f\n", ok / secs }' "$TMP/h2.out"
}
check_run() {   # check_run CASE SECONDS -> checks/s of /check by h2load --h1
    timeout -k 5 $(( $2 + 30 )) h2load --h1 -c"$CONNS" -m"$STREAMS" -t1 -D"$2" -d "$TMP/$1.json" \
        -H 'content-type: application/json' "http://127.0.0.1:$HPORT/check" >"$TMP/h1.out" 2>&1
    # /check answers 429 to a denial: count 2xx and 4xx, not errors.
    awk '/^finished in/ { gsub("s,", "", $3); secs = $3 }
         /^status codes:/ { n = $3 + $7 }
         END { if (secs > 0) printf "%.0f\n", n / secs }' "$TMP/h1.out"
}
wrk_run() {   # wrk_run CASE SECONDS -> checks/s of /check by wrk
    local pol=big
    [ "$1" = denied ] && pol=fw
    BENCH_BODY="{\"policy\":\"$pol\",\"key\":\"bench|user=$1\",\"cost\":1}" \
        timeout -k 5 $(( $2 + 30 )) wrk -t1 -c"$CONNS" -d"$2s" --timeout 2s -s "$HERE/grpc_check.lua" \
        "http://127.0.0.1:$HPORT/check" 2>&1 | awk '/^RESULT/ { for (i = 2; i <= NF; i++) if ($i ~ /^rps=/) { sub("rps=", "", $i); printf "%.0f\n", $i } }'
}
# The daemon's CPU time (user + system, all threads) in clock ticks.
HZ=$(getconf CLK_TCK)
rl_ticks() { local st; st=$(cat "/proc/$RLPID/stat") && st=${st##*) } && set -- $st && echo $(( ${12} + ${13} )); }
# measure FRONT CASE RUN: one run; prints "checks/s daemon-µs-per-check"
measure() {
    local t0 t1 rate perf=""
    if [ -n "$PERFDIR" ] && [ "$3" = 1 ]; then
        perf record -g -q -p "$RLPID" -o "$PERFDIR/$1-$2.data" -- sleep "$DUR" >/dev/null 2>&1 &
        perf=$!
    fi
    t0=$(rl_ticks)
    rate=$("$1_run" "$2" "$DUR")
    t1=$(rl_ticks)
    if [ -n "$perf" ]; then
        wait "$perf"
        perf report -i "$PERFDIR/$1-$2.data" --no-children --sort dso,sym --stdio 2>/dev/null |
            grep -v '^#' | grep '%' | grep -v '^ *|' | grep -v -- '--' | head -n 40 >"$PERFDIR/$1-$2.txt"
    fi
    awk -v r="${rate:-0}" -v dt=$((t1 - t0)) -v hz="$HZ" -v d="$DUR" \
        'BEGIN { if (r > 0) printf "%d %.1f\n", r, dt * 1e6 / hz / (r * d); else print "failed failed" }'
}
median() { tr ' ' '\n' | grep '^[0-9]' | sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

FRONTS="grpc check"
[ "$WRK" = 1 ] && FRONTS="$FRONTS wrk"
log "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the load, $(h2load --version | head -n1); backend $BACKEND, 1 worker, -c$CONNS -m$STREAMS; $RUNS runs of ${DUR}s per case and front, alternating, after ${WARM}s warmups"
for case in $CASES; do
    [ "$BACKEND" = redis ] && redis-cli -p "$RPORT" flushall >/dev/null
    declare -A RATE=() CPU=()
    for f in $FRONTS; do "${f}_run" "$case" "$WARM" >/dev/null; done
    for r in $(seq 1 "$RUNS"); do
        line="$case run $r:"
        for f in $FRONTS; do
            read -r x xc < <(measure "$f" "$case" "$r")
            RATE[$f]="${RATE[$f]:-} $x" CPU[$f]="${CPU[$f]:-} $xc"
            line="$line $f $x/s (${xc} µs)"
        done
        log "$line"
    done
    for f in $FRONTS; do
        echo "$f $case $(echo "${RATE[$f]}" | median)/s"
    done
    g=$(echo "${RATE[grpc]}" | median) k=$(echo "${RATE[check]}" | median)
    awk -v a="$g" -v b="$k" -v c="$case" 'BEGIN { if (b + 0 == 0) print "ratio " c " n/a"; else printf "ratio %s %.2f\n", c, a / b }'
    for f in grpc check; do
        echo "cpu $f $case $(echo "${CPU[$f]}" | median)us"
    done
    "$PY" - "$ROOT/tests/integration" "$GPORT" "$case" <<'EOF' >&2
import sys
sys.path.insert(0, sys.argv[1])
import rls_client
rls_client.require()
r = rls_client.should_rate_limit(rls_client.channel("127.0.0.1:" + sys.argv[2]), "bench",
                                 [[("user", sys.argv[3])]], timeout=5)
print("[grpc.sh] probe %s after the runs: %s" % (sys.argv[3], {1: "OK", 2: "OVER_LIMIT"}.get(r.overall_code, r.overall_code)))
EOF
    unset RATE CPU
done
# Every gRPC call the daemon answered, by code: h2load counts HTTP 200s, and
# a gRPC error is a 200 too, so this is what shows none was an error.
log "ratelimitd's own count of the gRPC calls (all runs and probes):"
curl -s "http://127.0.0.1:$HPORT/metrics" | grep '^ratelimitd_rls_requests_total{front="grpc"' >&2 || log "(no rls metrics)"
[ -z "$PERFDIR" ] || log "profiles: $PERFDIR/*.txt"
