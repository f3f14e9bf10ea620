#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/run.sh: one command that measures ratelimitd against its peers on
# this machine, on 127.0.0.1 only, and writes bench/results/.
#
#   bench/run.sh                      full run (~5 min)
#   bench/run.sh --quick              short runs, 3-point sweep (~1.5 min)
#   bench/run.sh --only rl1,nginx1    some targets only
#   bench/run.sh --note "quiet box"   a line printed under the table
#
# Targets (--only, comma-separated; default all):
#   nginx1  nginx, 1 worker, constant 200 JSON (the HTTP ceiling)
#   nginx2  nginx, 2 workers
#   rlf     Node rate-limiter-flexible + ioredis, cluster of 2 workers
#   rl1     ratelimitd, 1 worker (fixed_window and token_bucket)
#   rl2     ratelimitd, `workers: 2` (n/a while the daemon refuses the field)
#   sweep   connection sweep of rl1 (and rl2) and nginx1 -> throughput.png
#
# Other options: --duration S (8), --warmup S (2), --sweep-duration S (5),
# --sweep-conns "8 16 ..." , --clock redis|local (redis), --no-install,
# --out DIR (bench/results), --deadline S (345: cases that would end later
# are skipped). RL_BIN=/path/to/ratelimitd overrides the binary.
#
# Everything started here is stopped on exit (also on Ctrl-C); every wait
# and every wrk run is bounded.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")

DUR=8 WARM=2 SWEEP_DUR=5 SWEEP_CONNS="8 16 32 64 128 256"
ONLY="nginx1,nginx2,rlf,rl1,rl2,sweep" NOTE="" INSTALL=1 CLOCK=redis
OUT="$HERE/results" DEADLINE=345 CONNS=64 KEYS=100000 QUICK=0
CMDLINE="bench/run.sh"
for a in "$@"; do
    case "$a" in *[!A-Za-z0-9_./,:=+-]*|"") CMDLINE="$CMDLINE '${a//\'/\'\\\'\'}'" ;; *) CMDLINE="$CMDLINE $a" ;; esac
done

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        -q|--quick) QUICK=1; DUR=3; WARM=1; SWEEP_DUR=2; SWEEP_CONNS="8 64 256"; DEADLINE=150 ;;
        --only) ONLY=$2; shift ;;
        --duration) DUR=$2; shift ;;
        --warmup) WARM=$2; shift ;;
        --sweep-duration) SWEEP_DUR=$2; shift ;;
        --sweep-conns) SWEEP_CONNS=$2; shift ;;
        --clock) CLOCK=$2; shift ;;
        --note) NOTE=$2; shift ;;
        --no-install) INSTALL=0 ;;
        --out) OUT=$2; shift ;;
        --deadline) DEADLINE=$2; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done
case "$CLOCK" in redis|local) ;; *) echo "run.sh: --clock redis|local" >&2; exit 64 ;; esac

T_START=$(date +%s)
log() { printf '[bench %3ds] %s\n' "$(( $(date +%s) - T_START ))" "$*" >&2; }
want() { case ",$ONLY," in *",$1,"*) return 0 ;; esac; return 1; }
elapsed() { echo $(( $(date +%s) - T_START )); }

# ------------------------------------------------------------- install ---
install_deps() {
    local need=() p
    command -v wrk >/dev/null || need+=(wrk)
    command -v nginx >/dev/null || need+=(nginx-light)
    command -v redis-server >/dev/null || need+=(redis-server)
    command -v redis-cli >/dev/null || need+=(redis-tools)
    command -v gnuplot >/dev/null || need+=(gnuplot-nox)
    command -v curl >/dev/null || need+=(curl)
    command -v node >/dev/null || need+=(nodejs)
    command -v npm >/dev/null || need+=(npm)
    if [ ${#need[@]} -gt 0 ]; then
        log "installing Debian packages: ${need[*]}"
        [ "$(id -u)" = 0 ] || { log "not root: install ${need[*]} by hand"; return 1; }
        export DEBIAN_FRONTEND=noninteractive
        # Keep the packages' own services from starting (no policy-rc.d of
        # our own is left behind, and an existing one is not touched).
        local prc=""
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
            prc=/usr/sbin/policy-rc.d
        fi
        apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
        if ! apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need[@]}" >&2; then
            # nginx-light is gone from newer Debian releases: plain nginx then
            need=("${need[@]/#nginx-light/nginx}")
            apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need[@]}" >&2 \
                || { [ -n "$prc" ] && rm -f "$prc"; return 1; }
        fi
        [ -n "$prc" ] && rm -f "$prc"
    fi
    for p in wrk nginx redis-server redis-cli gnuplot curl node npm; do
        command -v "$p" >/dev/null || { log "missing: $p"; return 1; }
    done
    # npm packages pinned by bench/package.json + package-lock.json
    if ! (cd "$HERE" && node -e '
        const d = require("./package.json").dependencies;
        for (const n in d) if (require("./node_modules/" + n + "/package.json").version !== d[n]) process.exit(1);
        ' 2>/dev/null); then
        log "npm ci in bench/"
        (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error >&2) || return 1
    fi
}

if [ "$INSTALL" = 1 ]; then
    install_deps || { log "install failed"; exit 1; }
fi

RL_BIN=${RL_BIN:-$ROOT/ratelimitd}
if [ ! -x "$RL_BIN" ]; then
    log "building the daemon (tools/build.sh)"
    (cd "$ROOT" && sh tools/build.sh >&2) || { log "build failed"; exit 1; }
fi

# ----------------------------------------------------------- processes ---
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rl-bench.XXXXXX")
STARTED=()          # PIDs of everything started here, stopped in reverse

# All PIDs of the process tree under $1 (itself included).
tree_pids() {
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { par[$1] = $2 }
        END {
            inset[root] = 1; grew = 1
            while (grew) { grew = 0
                for (p in par) if (!(p in inset) && (par[p] in inset)) { inset[p] = 1; grew = 1 } }
            for (p in inset) print p
        }'
}

stop_pid() {
    local pid=$1 i kids
    kill -0 "$pid" 2>/dev/null || return 0
    kids=$(tree_pids "$pid")
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    for i in $kids; do kill -0 "$i" 2>/dev/null && kill -KILL "$i" 2>/dev/null; done
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

# A free port outside the kernel's ephemeral range (where any client
# connection on the box, wrk's included, may hold the same local port).
read -r EPH_LO EPH_HI < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { EPH_LO=32768; EPH_HI=60999; }
if [ "$EPH_LO" -gt 12000 ]; then PORT_LO=10000 PORT_N=$(( EPH_LO - 10000 ))
else PORT_LO=$(( EPH_HI + 1 )) PORT_N=$(( 65535 - EPH_HI )); fi
free_port() {
    local p i
    for i in $(seq 1 100); do
        p=$(( PORT_LO + (RANDOM * 32768 + RANDOM) % PORT_N ))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
    done
    return 1
}

# CPU time (clock ticks, user + system, every thread) of a process tree.
CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() {
    local t=0 p s
    [ -n "$1" ] || { echo 0; return; }
    for p in $(tree_pids "$1"); do
        s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        s=${s##*) }
        set -- $s
        t=$(( t + ${12} + ${13} ))
    done
    echo "$t"
}
# busy and total jiffies of the whole machine
box_ticks() { awk '/^cpu /{ print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9 }' /proc/stat; }

probe() {   # probe URL KEY POLICY -> HTTP status
    curl -s -o /dev/null -m 2 -w '%{http_code}' -XPOST -H 'Content-Type: application/json' \
        -d "{\"policy\":\"$3\",\"key\":\"$2\",\"cost\":1}" "$1"
}

wait_ready() {   # wait_ready PID URL POLICY SECONDS
    local i code
    for i in $(seq 1 $(( $4 * 10 ))); do
        kill -0 "$1" 2>/dev/null || return 1
        code=$(probe "$2" "ready:probe" "$3")
        case "$code" in 200|429) return 0 ;; esac
        sleep 0.1
    done
    return 1
}

# -------------------------------------------------------------- redis ---
mkdir -p "$TMP/redis"
for try in 1 2 3; do
    RPORT=$(free_port)
    redis-server --bind 127.0.0.1 --port "$RPORT" --dir "$TMP/redis" --save '' --appendonly no \
        --daemonize no --loglevel warning >"$TMP/redis/log" 2>&1 &
    RPID=$!
    STARTED+=("$RPID")
    for i in $(seq 1 50); do
        kill -0 "$RPID" 2>/dev/null || break
        redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break
    stop_pid "$RPID"
done
redis-cli -p "$RPORT" ping >/dev/null 2>&1 || { log "redis did not start"; cat "$TMP/redis/log" >&2; exit 1; }
log "redis $(redis-server --version | awk '{sub("v=", "", $3); print $3}') on 127.0.0.1:$RPORT"

# How busy the box is before any load: other work skews every figure.
read -r b0 t0 < <(box_ticks); sleep 1; read -r b1 t1 < <(box_ticks)
IDLE_BUSY=$(awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", t ? 100 * '"$(nproc)"' * b / t : 0 }')
log "box busy before the load: ${IDLE_BUSY}% of $(( $(nproc) * 100 ))% (other work on the machine)"
[ "$IDLE_BUSY" -gt 20 ] && log "WARNING: the box is not quiet; figures will be noisy"

# ------------------------------------------------------------ targets ---
TPID="" URL=""

START_ERR=""
start_failed() {   # start_failed NAME LOGFILE
    START_ERR="$1 did not start: $(grep -v '^[[:space:]]*$' "$2" 2>/dev/null | tail -n1 | cut -c1-200)"
    log "$START_ERR"
}

start_nginx() {   # start_nginx WORKERS
    local d="$TMP/nginx$1" port
    port=$(free_port)
    mkdir -p "$d/logs"
    cat >"$d/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes $1;
pid $d/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
    access_log off;
    default_type application/json;
    client_body_temp_path $d/body; proxy_temp_path $d/proxy;
    fastcgi_temp_path $d/fastcgi; uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 60s;
    server {
        listen 127.0.0.1:$port backlog=4096;
        location = /check { return 200 '{"allowed":true}'; }
        location / { return 404 '{"error":"not_found"}'; }
    }
}
EOF
    nginx -p "$d/" -c "$d/nginx.conf" -e stderr >"$d/out.log" 2>&1 &
    TPID=$!; STARTED+=("$TPID")
    URL="http://127.0.0.1:$port/check"
    wait_ready "$TPID" "$URL" fw 10 || { start_failed "nginx" "$d/out.log"; return 1; }
}

start_rlf() {   # start_rlf WORKERS
    local port
    port=$(free_port)
    node "$HERE/rlf_server.js" "$port" "$RPORT" "$1" >"$TMP/rlf.log" 2>&1 &
    TPID=$!; STARTED+=("$TPID")
    URL="http://127.0.0.1:$port/check"
    wait_ready "$TPID" "$URL" fw 20 || { start_failed "node peer" "$TMP/rlf.log"; return 1; }
}

rl_config() {   # rl_config FILE PORT WORKERS ("" = no workers line)
    {
        echo "listen: 127.0.0.1:$2"
        echo "redis:"
        echo "  url: redis://127.0.0.1:$RPORT/0"
        echo "  timeout: 1s"
        echo "clock: $CLOCK"
        echo "log_level: warn"
        [ -n "$3" ] && echo "workers: $3"
        cat <<'EOF'
policies:
  fw:
    failure_mode: closed
    tiers:
      - {name: minute, algorithm: fixed_window, limit: 100, window: 60s}
  tb:
    failure_mode: closed
    tiers:
      - {name: bucket, algorithm: token_bucket, limit: 100, window: 60s}
EOF
    } >"$1"
}

start_rl() {   # start_rl WORKERS
    local port wl=""
    port=$(free_port)
    [ "$1" -gt 1 ] && wl=$1
    rl_config "$TMP/rl$1.yaml" "$port" "$wl"
    "$RL_BIN" --config "$TMP/rl$1.yaml" >"$TMP/rl$1.log" 2>&1 &
    TPID=$!; STARTED+=("$TPID")
    URL="http://127.0.0.1:$port/check"
    wait_ready "$TPID" "$URL" fw 10 || { start_failed ratelimitd "$TMP/rl$1.log"; return 1; }
}

stop_target() { [ -n "$TPID" ] && stop_pid "$TPID"; TPID=""; URL=""; }

# ---------------------------------------------------------------- load ---
# wrk_run CONNS SECONDS MODE POLICY URL -> prints the RESULT line (or nothing)
wrk_run() {
    BENCH_MODE=$3 BENCH_POLICY=$4 BENCH_KEYS=$KEYS \
        timeout -k 5 $(( $2 + 20 )) wrk -t1 -c"$1" -d"$2s" --timeout 2s -s "$HERE/post.lua" "$5" 2>&1 \
        | grep '^RESULT ' | tail -n1
}
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

mkdir -p "$OUT"
RAW="$OUT/runs.tsv"
printf 'target\tworkers\talgorithm\tkeys\tconns\tsecs\trequests\trps\tp50_ms\tp90_ms\tp99_ms\tmax_ms\tnon2xx\tsockerr\ttarget_cpu_us_per_req\tredis_cpu_us_per_req\tbox_busy_pct\tprobe\n' >"$RAW"

declare -A R    # R[row,field]
ROWS=()

# measure ROWKEY TARGET WORKERS ALGO POLICY MODE
measure() {
    local key=$1 tname=$2 w=$3 algo=$4 pol=$5 mode=$6 res t0 t1 r0 r1 b0 b1 n tcpu rcpu busy pr pkey
    ROWS+=("$key")
    R[$key,target]=$tname R[$key,workers]=$w R[$key,algo]=$algo R[$key,keys]=$mode
    if [ $(( $(elapsed) + WARM + DUR + 8 )) -gt "$DEADLINE" ]; then
        log "$key: skipped (deadline ${DEADLINE}s)"; R[$key,rps]="skipped"; return
    fi
    redis-cli -p "$RPORT" flushall >/dev/null
    [ "$mode" = hot ] && pkey=user:hot || pkey=user:1
    wrk_run "$CONNS" "$WARM" "$mode" "$pol" "$URL" >/dev/null
    t0=$(cpu_ticks "$TPID"); r0=$(cpu_ticks "$RPID"); b0=$(box_ticks)
    res=$(wrk_run "$CONNS" "$DUR" "$mode" "$pol" "$URL")
    t1=$(cpu_ticks "$TPID"); r1=$(cpu_ticks "$RPID"); b1=$(box_ticks)
    pr=$(probe "$URL" "$pkey" "$pol")
    if [ -z "$res" ]; then log "$key: wrk gave no result"; R[$key,rps]="failed"; return; fi
    n=$(field "$res" requests)
    read -r tcpu rcpu busy < <(awk -v n="$n" -v hz="$CLK_TCK" -v dt=$((t1 - t0)) -v dr=$((r1 - r0)) \
        -v b="$b0 $b1" -v ncpu="$(nproc)" 'BEGIN { split(b, x, " ");
            printf "%.1f %.1f %.0f\n", n ? dt * 1e6 / hz / n : 0, n ? dr * 1e6 / hz / n : 0,
                   (x[4] - x[2]) ? 100 * ncpu * (x[3] - x[1]) / (x[4] - x[2]) : 0 }')
    R[$key,rps]=$(field "$res" rps) R[$key,p50]=$(field "$res" p50_ms) R[$key,p99]=$(field "$res" p99_ms)
    R[$key,non2xx]=$(awk -v a="$(field "$res" non2xx)" -v n="$n" 'BEGIN { printf "%.1f", n ? 100 * a / n : 0 }')
    R[$key,sockerr]=$(field "$res" sockerr) R[$key,tcpu]=$tcpu R[$key,rcpu]=$rcpu R[$key,probe]=$pr R[$key,busy]=$busy
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$tname" "$w" "$algo" "$mode" "$CONNS" "$(field "$res" secs)" "$n" "${R[$key,rps]}" \
        "${R[$key,p50]}" "$(field "$res" p90_ms)" "${R[$key,p99]}" "$(field "$res" max_ms)" \
        "$(field "$res" non2xx)" "${R[$key,sockerr]}" "$tcpu" "$rcpu" "$busy" "$pr" >>"$RAW"
    log "$key: ${R[$key,rps]} req/s, p99 ${R[$key,p99]} ms, target ${tcpu} µs/req, redis ${rcpu} µs/req, non-2xx ${R[$key,non2xx]}%, probe $pr, box ${busy}%"
}

na_row() {   # na_row ROWKEY TARGET WORKERS ALGO MODE WHY
    ROWS+=("$1")
    R[$1,target]=$2 R[$1,workers]=$3 R[$1,algo]=$4 R[$1,keys]=$5 R[$1,rps]="n/a" R[$1,why]=$6
}

declare -A SW   # SW[series,conns,rps|p99]
sweep() {   # sweep SERIES POLICY
    local c res
    for c in $SWEEP_CONNS; do
        if [ $(( $(elapsed) + SWEEP_DUR + 6 )) -gt "$DEADLINE" ]; then log "sweep $1 c=$c: skipped (deadline)"; continue; fi
        redis-cli -p "$RPORT" flushall >/dev/null
        res=$(wrk_run "$c" "$SWEEP_DUR" spread "$2" "$URL")
        [ -n "$res" ] || { log "sweep $1 c=$c: no result"; continue; }
        SW[$1,$c,rps]=$(field "$res" rps) SW[$1,$c,p99]=$(field "$res" p99_ms)
        log "sweep $1 c=$c: ${SW[$1,$c,rps]} req/s, p99 ${SW[$1,$c,p99]} ms"
    done
}

# ---------------------------------------------------------------- runs ---
log "wrk -t1 -c$CONNS, ${DUR}s per case after ${WARM}s warmup; keys: spread = $KEYS random, hot = one key; daemon clock: $CLOCK"

# start_target FUNCTION ARG: up to 3 tries (a port can be taken meanwhile)
start_target() {
    local i
    for i in 1 2 3; do
        "$1" "$2" && return 0
        stop_target
        log "retrying $1 $2 on another port"
    done
    return 1
}

for w in 1 2; do
    want "nginx$w" || continue
    if start_target start_nginx "$w"; then
        measure "nginx$w-spread" nginx "$w" "constant 200" fw spread
        measure "nginx$w-hot" nginx "$w" "constant 200" fw hot
        if [ "$w" = 1 ] && want sweep; then sweep nginx1 fw; fi
    else
        for m in spread hot; do na_row "nginx$w-$m" nginx "$w" "constant 200" "$m" "$START_ERR"; done
    fi
    stop_target
done

if want rlf; then
    if start_target start_rlf 2; then
        measure rlf-spread "node RLF" 2 fixed_window fw spread
        measure rlf-hot "node RLF" 2 fixed_window fw hot
    else
        for m in spread hot; do na_row "rlf-$m" "node RLF" 2 fixed_window "$m" "$START_ERR"; done
    fi
    stop_target
fi

RL2_OK=0
if want rl2; then
    rl_config "$TMP/probe.yaml" 1 2
    if "$RL_BIN" --check-config --config "$TMP/probe.yaml" >"$TMP/probe.out" 2>&1; then RL2_OK=1
    else log "ratelimitd has no 'workers' field yet: 2-worker rows are n/a ($(head -c 160 "$TMP/probe.out"))"; fi
fi

for w in 1 2; do
    want "rl$w" || continue
    if [ "$w" = 2 ] && [ "$RL2_OK" = 0 ]; then
        for a in fixed_window:fw token_bucket:tb; do
            for m in spread hot; do na_row "rl2-${a#*:}-$m" ratelimitd 2 "${a%:*}" "$m" "this ratelimitd has no \`workers:\` field"; done
        done
        continue
    fi
    if start_target start_rl "$w"; then
        for a in fixed_window:fw token_bucket:tb; do
            for m in spread hot; do measure "rl$w-${a#*:}-$m" ratelimitd "$w" "${a%:*}" "${a#*:}" "$m"; done
        done
        if want sweep; then sweep "rl$w" fw; fi
    else
        for a in fixed_window:fw token_bucket:tb; do
            for m in spread hot; do na_row "rl$w-${a#*:}-$m" ratelimitd "$w" "${a%:*}" "$m" "$START_ERR"; done
        done
    fi
    stop_target
done

# Hook: another script measures what one check costs inside Redis.
REDIS_COST=""
if [ -f "$HERE/redis_cost.sh" ]; then
    log "running bench/redis_cost.sh (hook)"
    REDIS_HOST=127.0.0.1 REDIS_PORT=$RPORT RL_BIN=$RL_BIN QUICK=$QUICK \
        timeout -k 5 120 bash "$HERE/redis_cost.sh" >"$OUT/redis_cost.txt" 2>"$TMP/redis_cost.err" \
        && REDIS_COST=$(cat "$OUT/redis_cost.txt") \
        || log "redis_cost.sh failed: $(tail -n3 "$TMP/redis_cost.err")"
fi

stop_pid "$RPID"

# -------------------------------------------------------------- report ---
v() { printf '%s' "${R[$1,$2]:-}"; }
has() { case "$(v "$1" rps)" in [0-9]*) return 0 ;; esac; return 1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
unit() { [ "$1" = n/a ] && echo n/a || echo "$1$2"; }
verdict() {   # verdict VALUE OP LIMIT
    case "$1" in n/a*) echo "n/a"; return ;; esac
    awk -v x="$1" -v op="$2" -v l="$3" 'BEGIN { ok = (op == ">=") ? x >= l : x <= l; print ok ? "met" : "NOT met" }'
}

MD="$OUT/results.md"
{
    echo "## Results of bench/run.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) cores, $(uname -sr); $("$RL_BIN" --version 2>/dev/null | head -n1)," \
         "redis $(redis-server --version | awk '{sub("v=","",$3); print $3}'), $(nginx -v 2>&1 | sed 's/.*: //')," \
         "node $(node --version), wrk $(dpkg-query -W -f='${Version}' wrk 2>/dev/null)."
    echo "Command: \`$CMDLINE\`."
    echo "Load: wrk -t1 -c$CONNS, ${DUR} s per row after ${WARM} s of warmup; daemon clock: $CLOCK.$([ "$QUICK" = 1 ] && echo ' QUICK MODE (short runs).')"
    echo "Box busy before the load (other work on the machine, 1 s sample): ${IDLE_BUSY}% of $(( $(nproc) * 100 ))%."
    [ -n "$NOTE" ] && { echo; echo "**Note: $NOTE**"; }
    echo
    echo "| target | workers | algorithm | keys | req/s | p50 ms | p99 ms | target CPU µs/req | redis CPU µs/req | non-2xx % | probe after |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for k in "${ROWS[@]}"; do
        if has "$k"; then
            printf '| %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n' "$(v "$k" target)" "$(v "$k" workers)" \
                "$(v "$k" algo)" "$(v "$k" keys)" "$(v "$k" rps)" "$(v "$k" p50)" "$(v "$k" p99)" \
                "$(v "$k" tcpu)" "$(v "$k" rcpu)" "$(v "$k" non2xx)" "$(v "$k" probe)"
        else
            printf '| %s | %s | %s | %s | %s | | | | | | |\n' "$(v "$k" target)" "$(v "$k" workers)" \
                "$(v "$k" algo)" "$(v "$k" keys)" "$(v "$k" rps)"
        fi
    done
    declare -A seen=()
    for k in "${ROWS[@]}"; do
        w=$(v "$k" why)
        if [ -n "$w" ] && [ -z "${seen[$w]:-}" ]; then seen[$w]=1; printf '\nn/a (%s %s workers): %s\n' "$(v "$k" target)" "$(v "$k" workers)" "$w"; fi
    done
    for k in "${ROWS[@]}"; do
        has "$k" && [ "$(v "$k" sockerr)" != 0 ] && printf '\n%s: %s socket errors (connect/read/write/timeout) in the measured run.\n' "$k" "$(v "$k" sockerr)"
    done
    echo
    echo "| target ratio (issue \"ratelimitd fast\") | workers | value | target | verdict |"
    echo "|---|---|---|---|---|"
    for w in 1 2; do
        x=n/a; has "rl$w-fw-spread" && has rlf-spread && x=$(ratio "$(v "rl$w-fw-spread" rps)" "$(v rlf-spread rps)")
        echo "| spread fixed_window req/s ÷ node RLF (2 workers) req/s | $w | $(unit "$x" x) | ≥ 2.0x | $(verdict "$x" '>=' 2.0) |"
        x=n/a; has "rl$w-fw-spread" && x=$(v "rl$w-fw-spread" p99)
        echo "| p99 latency, spread fixed_window | $w | $(unit "$x" " ms") | ≤ 3 ms | $(verdict "$x" '<=' 3) |"
        x=n/a; has "rl$w-fw-spread" && has "nginx$w-spread" && x=$(ratio "$(v "rl$w-fw-spread" tcpu)" "$(v "nginx$w-spread" tcpu)")
        echo "| daemon CPU per check ÷ nginx ($w worker$([ $w = 1 ] || echo s)) CPU per request, spread | $w | $(unit "$x" x) | ≤ 1.6x | $(verdict "$x" '<=' 1.6) |"
        x=n/a; has "rl$w-fw-hot" && has "nginx$w-hot" && x=$(ratio "$(v "rl$w-fw-hot" rps)" "$(v "nginx$w-hot" rps)")
        echo "| hot key fixed_window req/s ÷ nginx ($w worker$([ $w = 1 ] || echo s)) req/s | $w | $(unit "$x" x) | ≥ 0.6x | $(verdict "$x" '>=' 0.6) |"
    done
    if [ -n "$REDIS_COST" ]; then
        echo; echo "### bench/redis_cost.sh"; echo; echo '```'; printf '%s\n' "$REDIS_COST"; echo '```'
    fi
    if [ -n "${SW[*]:-}" ]; then
        echo; echo "Connection sweep (spread, fixed_window, ${SWEEP_DUR} s per point): [throughput.png](throughput.png), data in sweep.dat."
    fi
    echo; echo "Raw figures (p90, max, socket errors, whole-box CPU %): runs.tsv."
} >"$MD"

if [ -n "${SW[*]:-}" ]; then
    DAT="$OUT/sweep.dat"
    {
        echo "# connection sweep, $(date -u '+%Y-%m-%d %H:%M UTC'), wrk -t1 -d${SWEEP_DUR}s, spread keys, fixed_window${NOTE:+ ($NOTE)}"
        echo "# conns rl_w1_rps rl_w1_p99_ms nginx_w1_rps nginx_w1_p99_ms rl_w2_rps rl_w2_p99_ms"
        for c in $SWEEP_CONNS; do
            printf '%s' "$c"
            for s in rl1 nginx1 rl2; do printf ' %s %s' "${SW[$s,$c,rps]:-NaN}" "${SW[$s,$c,p99]:-NaN}"; done
            echo
        done
    } >"$DAT"
    has2=0; [ -n "${SW[rl2,${SWEEP_CONNS%% *},rps]:-}" ] && has2=1
    gnuplot -e "datafile='$DAT'; outfile='$OUT/throughput.png'; has_w2=$has2; title_note='${NOTE//\'/}'" \
        "$HERE/plot.gp" 2>"$TMP/gnuplot.err" || log "gnuplot failed: $(cat "$TMP/gnuplot.err")"
    [ -s "$OUT/throughput.png" ] && log "plot: $OUT/throughput.png"
fi

cat "$MD"
log "done in $(elapsed) s; results in $OUT"
