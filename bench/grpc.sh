#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/grpc.sh: Envoy's ShouldRateLimit over gRPC (h2load, prebuilt
# request frames) against POST /check over HTTP/1.1 (wrk, bench/post.lua),
# same daemon, same policy, same Redis, same box, on 127.0.0.1 only.
#
#   bench/grpc.sh                 3 runs of each case, 5 s each (~1.5 min)
#   bench/grpc.sh --runs 5 --duration 8
#
# Cases, each a single key so that both fronts send byte-identical requests
# every time (h2load posts one file):
#   allow  policy `big` (fixed_window, 10^9 per 60 s): every call goes to
#          Redis and is allowed
#   deny   policy `fw` (fixed_window, 100 per 60 s), exhausted during the
#          warmup: every call is denied, mostly from the deny cache
# gRPC: h2load -c CONNS -m STREAMS -d FILE where FILE is the 5-byte gRPC
# prefix + a serialized RateLimitRequest (domain bench, descriptor
# user=hot) built with Python protobuf from proto/ (tests/integration/
# rls_client.py); headers content-type: application/grpc, te: trailers.
# /check: wrk -t1 -c CONNS with the body {"policy":P,"key":"bench|user=CASE"}
# (the key the RLS call builds: both fronts meet the same counter), as
# bench/run.sh measures /check; and the same body by h2load --h1 -c CONNS
# (one request in flight per connection), so that one column compares the
# two fronts under the same load generator.
# Prints the checks/s of each run, the medians, the ratios gRPC ÷ /check, the
# answer of one more gRPC call after the runs (allow: OK; deny: OVER_LIMIT:
# the load was counted) and the daemon's count of gRPC calls by code (h2load
# sees HTTP 200 on gRPC errors too: this shows there were none).
#
# Options: --runs N (3), --duration S (5), --warmup S (1), --conns C (64),
# --streams M (1: one call in flight per connection, as wrk), --cases
# "allow deny". RL_BIN=/path/to/ratelimitd overrides the binary. Needs
# h2load (nghttp2-client), wrk, redis-server, redis-cli, python3-grpcio,
# python3-grpc-tools, python3-protobuf. Everything started here is stopped
# on exit.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
RUNS=3 DUR=5 WARM=1 CONNS=64 STREAMS=1 CASES="allow deny"
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=$2; shift ;;
        --duration) DUR=$2; shift ;;
        --warmup) WARM=$2; shift ;;
        --conns) CONNS=$2; shift ;;
        --streams) STREAMS=$2; shift ;;
        --cases) CASES=$2; shift ;;
        -h|--help) sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "grpc.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
for p in h2load wrk redis-server redis-cli; do
    command -v "$p" >/dev/null || { echo "grpc.sh: $p is missing (apt-get install nghttp2-client wrk redis-server redis-tools)" >&2; exit 69; }
done
RL_BIN=${RL_BIN:-$ROOT/ratelimitd}
[ -x "$RL_BIN" ] || { echo "grpc.sh: no daemon at $RL_BIN (build it: sh tools/build.sh)" >&2; exit 69; }

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

RPORT=$(free_port) HPORT=$(free_port) GPORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$RPORT" --dir "$TMP" --save '' --appendonly no \
    --daemonize no --loglevel warning >"$TMP/redis.log" 2>&1 &
PIDS+=($!)
for i in $(seq 1 50); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

cat >"$TMP/rl.yaml" <<EOF
listen: 127.0.0.1:$HPORT
grpc_listen: 127.0.0.1:$GPORT
redis:
  url: redis://127.0.0.1:$RPORT/0
  timeout: 1s
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
      - {key: user, value: allow, policy: big}
      - {key: user, value: deny, policy: fw}
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
            "big" if case == "allow" else "fw", case))
    resp = rls_client.should_rate_limit(ch, "bench", [[("user", case)]], timeout=5)
    print("[grpc.sh] probe %s: overall_code %d" % (case, resp.overall_code), file=sys.stderr)
EOF

h2_run() {   # h2_run CASE SECONDS -> checks/s
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
h1_run() {   # h1_run CASE SECONDS -> checks/s of /check by h2load --h1 (same client as gRPC)
    timeout -k 5 $(( $2 + 30 )) h2load --h1 -c"$CONNS" -t1 -D"$2" -d "$TMP/$1.json" \
        -H 'content-type: application/json' "http://127.0.0.1:$HPORT/check" >"$TMP/h1.out" 2>&1
    # /check answers 429 to a denial: count 2xx and 4xx, not errors.
    awk '/^finished in/ { gsub("s,", "", $3); secs = $3 }
         /^status codes:/ { n = $3 + $7 }
         END { if (secs > 0) printf "%.0f\n", n / secs }' "$TMP/h1.out"
}
wrk_run() {   # wrk_run CASE SECONDS -> checks/s
    local pol=big
    [ "$1" = deny ] && pol=fw
    BENCH_BODY="{\"policy\":\"$pol\",\"key\":\"bench|user=$1\",\"cost\":1}" \
        timeout -k 5 $(( $2 + 30 )) wrk -t1 -c"$CONNS" -d"$2s" --timeout 2s -s "$HERE/grpc_check.lua" \
        "http://127.0.0.1:$HPORT/check" 2>&1 | awk '/^RESULT/ { for (i = 2; i <= NF; i++) if ($i ~ /^rps=/) { sub("rps=", "", $i); printf "%.0f\n", $i } }'
}
# The daemon's CPU time (user + system, all threads) in clock ticks.
HZ=$(getconf CLK_TCK)
rl_ticks() { local st; st=$(cat "/proc/$RLPID/stat") && st=${st##*) } && set -- $st && echo $(( ${12} + ${13} )); }
# measure FRONT CASE: one run; prints "checks/s daemon-µs-per-check"
measure() {
    local t0 t1 rate
    t0=$(rl_ticks)
    rate=$("$1_run" "$2" "$DUR")
    t1=$(rl_ticks)
    awk -v r="${rate:-0}" -v dt=$((t1 - t0)) -v hz="$HZ" -v d="$DUR" \
        'BEGIN { if (r > 0) printf "%d %.1f\n", r, dt * 1e6 / hz / (r * d); else print "failed failed" }'
}
median() { tr ' ' '\n' | grep '^[0-9]' | sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

log "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the load, $(h2load --version | head -n1), wrk; -c$CONNS, gRPC -m$STREAMS; $RUNS runs of ${DUR}s per case and front, alternating, after ${WARM}s warmups"
declare -A RES
for case in $CASES; do
    redis-cli -p "$RPORT" flushall >/dev/null
    h2_run "$case" "$WARM" >/dev/null
    wrk_run "$case" "$WARM" >/dev/null
    h1_run "$case" "$WARM" >/dev/null
    g="" h="" k="" gc="" hc="" kc=""
    for r in $(seq 1 "$RUNS"); do
        read -r x xc < <(measure h2 "$case"); g="$g $x"; gc="$gc $xc"
        read -r y yc < <(measure wrk "$case"); h="$h $y"; hc="$hc $yc"
        read -r z zc < <(measure h1 "$case"); k="$k $z"; kc="$kc $zc"
        log "$case run $r: gRPC $x checks/s ($xc µs of daemon CPU each), /check by wrk $y ($yc µs), /check by h2load --h1 $z ($zc µs)"
    done
    RES[$case,grpc]=$(echo "$g" | median) RES[$case,http]=$(echo "$h" | median)
    RES[$case,h1]=$(echo "$k" | median)
    RES[$case,cpu_grpc]=$(echo "$gc" | median) RES[$case,cpu_http]=$(echo "$hc" | median)
    RES[$case,cpu_h1]=$(echo "$kc" | median)
    RES[$case,runs_grpc]=$g RES[$case,runs_http]=$h RES[$case,runs_h1]=$k
    RES[$case,after]=$("$PY" - "$ROOT/tests/integration" "$GPORT" "$case" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import rls_client
rls_client.require()
r = rls_client.should_rate_limit(rls_client.channel("127.0.0.1:" + sys.argv[2]), "bench",
                                 [[("user", sys.argv[3])]], timeout=5)
print({1: "OK", 2: "OVER_LIMIT"}.get(r.overall_code, r.overall_code))
EOF
)
done

echo "Checks/s, medians of $RUNS runs of ${DUR} s (daemon CPU µs per check in brackets):"
echo
echo "| case | gRPC ShouldRateLimit (h2load) | /check (wrk) | gRPC ÷ /check | /check (h2load --h1) | gRPC ÷ that | runs gRPC | runs /check (wrk) | runs /check (h2load --h1) | gRPC probe after |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for case in $CASES; do
    ratio=$(awk -v a="${RES[$case,grpc]}" -v b="${RES[$case,http]}" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2fx", a / b }')
    ratio1=$(awk -v a="${RES[$case,grpc]}" -v b="${RES[$case,h1]}" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2fx", a / b }')
    echo "| $case | ${RES[$case,grpc]} (${RES[$case,cpu_grpc]}) | ${RES[$case,http]} (${RES[$case,cpu_http]}) | $ratio | ${RES[$case,h1]} (${RES[$case,cpu_h1]}) | $ratio1 |${RES[$case,runs_grpc]} |${RES[$case,runs_http]} |${RES[$case,runs_h1]} | ${RES[$case,after]} |"
done
# Every gRPC call the daemon answered, by code: h2load counts HTTP 200s, and
# a gRPC error is a 200 too, so this is what shows none was an error.
echo
echo "ratelimitd's own count of the gRPC calls (all runs and probes):"
curl -s "http://127.0.0.1:$HPORT/metrics" | grep '^ratelimitd_rls_requests_total{front="grpc"' || echo "(no rls metrics)"
