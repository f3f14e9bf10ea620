#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/run.sh: one command that measures ratelimitd against its peers on
# this machine, on 127.0.0.1 only, and writes bench/results/.
#
#   bench/run.sh                      full run (~10 min)
#   bench/run.sh --quick              short runs, no sweep (~3.5 min)
#   bench/run.sh --only rl1,nginx1    some targets only
#   bench/run.sh --note "quiet box"   a line printed under the table
#   bench/run.sh --rounds 3           each row the median of 3 measured runs
#
# Targets (--only, comma-separated; default all, --quick all but nginx2,
# rl2, sweep and cost):
#   nginx1  nginx, 1 worker, constant 200 JSON (the HTTP ceiling)
#   nginx2  nginx, 2 workers
#   rlf     Node rate-limiter-flexible + ioredis, cluster of 2 workers
#   mem     ratelimitd `backend: memory` GET /auth/<policy> against nginx
#           `limit_req` on the same GET load (1 worker each, spread and hot)
#   redis   spread fixed_window via Redis, 1 worker, at `redis.batch: 1` and
#           at the default batch (n/a where the daemon refuses the field),
#           by the Functions (`redis.module: off`), by the module
#           (`redis.module: on`; n/a where ratelimitd.so is not built) and,
#           with BASE_BIN set, by that daemon's Functions: Redis CPU and
#           calls per check, the `ratelimitd_redis_batch_size` histogram;
#           then the daemon's RSS (Functions) over RSS_TOTAL checks (1 M)
#   leases  3 daemons, one Redis, one hot allowed key: `lease: auto` against
#           `backend: memory` (and no lease), Redis calls per check, the
#           local lease metrics (n/a where the daemon refuses `lease:`)
#   grpc    bench/grpc.sh (h2load on both fronts): gRPC ÷ /check
#   rl1     ratelimitd, 1 worker (fixed_window and token_bucket), by the
#           Functions (`redis.module: off`)
#   rlmod   rl1's fixed_window rows by the module (`redis.module: on`)
#   rl2     ratelimitd, `workers: 2` (n/a while the daemon refuses the field)
#   sweep   connection sweep of rl1 (and rl2) and nginx1 -> throughput.png
#   pair    envoyproxy/ratelimit's decision, a pipelined INCRBY + EXPIRE, by
#           redis-benchmark on a redis-server of its own: Redis's CPU per
#           decision (INFO cpu), PAIR_N (100 000) of each, and `redis`'s
#           Redis CPU per check ÷ it
#   module  bench/module_cost.py: Redis's CPU per check decided by the
#           module (ratelimitd.so) and by the Functions, at the default
#           redis.batch and at 1, driven directly with the daemon's framing
#           (the decision alone, no daemon), and each ÷ the pair (run
#           `pair` with it)
#   cost    bench/redis_cost.sh (Redis's own µs per call of each algorithm),
#           one run per variant, 100 000 calls (--quick 20 000)
# At the end: the issue's targets, met or not, in summary.md (also printed),
# and bars.dat plotted by bench/plot.gp into bars.png.
#
# Rounds: a row is ROUNDS measured runs (--rounds N; default 1) of DUR
# seconds back to back after one warmup, and reports the run of median
# throughput, whole. On a shared box one run moves by 10-20 %: ratios of
# single runs can flip a verdict; medians of 3 hold better.
# Other options: --duration S (8), --warmup S (2), --sweep-duration S (5),
# --sweep-conns "8 16 ..." , --clock redis|local (redis), --no-install,
# --out DIR (bench/results), --deadline S (600 per round; --quick 200: cases that
# would end later are skipped; the cost hook gets what is left + 30 s).
# The daemon rows' Redis loads MODULE_SO (default ./ratelimitd.so) where it
# is built; BASE_BIN=/path/to/ratelimitd (main's, say) adds its Functions
# rows to `redis`, for "no slower than today".
# RL_BIN=/path/to/ratelimitd overrides the binary; RSS_TOTAL=N the checks
# of the RSS run (1000000; --quick 300000); PAIR_N=N the commands of each
# pair run (100000). Order of the run: nginx1, nginx2, rlf, rl1, rlmod, mem,
# redis, pair, module, leases, grpc, rl2, cost.
#
# Everything started here is stopped on exit (also on Ctrl-C); every wait
# and every wrk run is bounded.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")

DUR=8 WARM=2 SWEEP_DUR=5 SWEEP_CONNS="8 16 32 64 128 256"
ONLY="nginx1,nginx2,rlf,mem,redis,pair,module,leases,grpc,rl1,rlmod,rl2,sweep,cost" ONLY_SET=0 NOTE="" INSTALL=1 CLOCK=redis
OUT="$HERE/results" DEADLINE="" ROUNDS=1 CONNS=64 KEYS=100000 QUICK=0 RSS_TOTAL=${RSS_TOTAL:-}
CMDLINE="bench/run.sh"
for a in "$@"; do
    case "$a" in *[!A-Za-z0-9_./,:=+-]*|"") CMDLINE="$CMDLINE '${a//\'/\'\\\'\'}'" ;; *) CMDLINE="$CMDLINE $a" ;; esac
done

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        -q|--quick) QUICK=1; DUR=3; WARM=1; SWEEP_DUR=2; SWEEP_CONNS="8 64 256" ;;
        --only) ONLY=$2; ONLY_SET=1; shift ;;
        --duration) DUR=$2; shift ;;
        --warmup) WARM=$2; shift ;;
        --sweep-duration) SWEEP_DUR=$2; shift ;;
        --sweep-conns) SWEEP_CONNS=$2; shift ;;
        --clock) CLOCK=$2; shift ;;
        --note) NOTE=$2; shift ;;
        --no-install) INSTALL=0 ;;
        --out) OUT=$2; shift ;;
        --deadline) DEADLINE=$2; shift ;;
        --rounds) ROUNDS=$2; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done
case "$CLOCK" in redis|local) ;; *) echo "run.sh: --clock redis|local" >&2; exit 64 ;; esac
case "$ROUNDS" in [1-9]|[1-9][0-9]) ;; *) echo "run.sh: --rounds takes 1 to 99" >&2; exit 64 ;; esac
[ -n "$DEADLINE" ] || DEADLINE=$(( ($([ "$QUICK" = 1 ] && echo 200 || echo 600)) * ROUNDS ))
[ -n "$RSS_TOTAL" ] || { [ "$QUICK" = 1 ] && RSS_TOTAL=300000 || RSS_TOTAL=1000000; }
# --quick without --only leaves out nginx2, rl2, sweep and cost (3.5 minutes)
[ "$QUICK" = 1 ] && [ "$ONLY_SET" = 0 ] && ONLY="nginx1,rlf,rl1,rlmod,mem,redis,pair,module,leases,grpc"

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
    command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null || need+=(redis-tools)
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
    for p in wrk nginx redis-server redis-cli redis-benchmark gnuplot curl node npm; do
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
    # no longer ours once stopped: the exit trap must not signal a reused PID
    for i in "${!STARTED[@]}"; do [ "${STARTED[$i]}" = "$pid" ] && unset "STARTED[$i]"; done
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    kids=$(tree_pids "$pid")
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    for i in $kids; do kill -0 "$i" 2>/dev/null && kill -KILL "$i" 2>/dev/null; done
    wait "$pid" 2>/dev/null
    return 0
}

cleanup() {
    local i pids=("${STARTED[@]}")
    trap - EXIT INT TERM
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[$i]}"; done
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

probe() {   # probe URL KEY POLICY -> HTTP status (GET with X-Key while WRK_AUTH is set)
    if [ -n "$WRK_AUTH" ]; then
        curl -s -o /dev/null -m 2 -w '%{http_code}' -H "X-Key: $2" "$(base_of "$1")$WRK_AUTH"
        return
    fi
    curl -s -o /dev/null -m 2 -w '%{http_code}' -XPOST -H 'Content-Type: application/json' \
        -d "{\"policy\":\"$3\",\"key\":\"$2\",\"cost\":1}" "$1"
}
base_of() { printf '%s\n' "$1" | sed -E 's#^(https?://[^/]+).*#\1#'; }
WRK_AUTH=""     # /auth/<policy>: the rows send GET with X-Key (bench/post.lua BENCH_AUTH)

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
# redis_start DIR [ARGS...]: a fresh redis-server (no persistence) on a
# free loopback port, its data and log in DIR, ARGS added to its command
# line, 3 tries (a port can be taken meanwhile); sets RS_PORT and RS_PID
# (stopped on exit with the rest).
RS_PORT="" RS_PID=""
redis_start() {
    local try i
    mkdir -p "$1"
    for try in 1 2 3; do
        RS_PORT=$(free_port)
        redis-server --bind 127.0.0.1 --port "$RS_PORT" --dir "$1" --save '' --appendonly no \
            --daemonize no --loglevel warning "${@:2}" >"$1/log" 2>&1 &
        RS_PID=$!
        STARTED+=("$RS_PID")
        for i in $(seq 1 50); do
            kill -0 "$RS_PID" 2>/dev/null || break
            redis-cli -p "$RS_PORT" ping >/dev/null 2>&1 && return 0
            sleep 0.1
        done
        stop_pid "$RS_PID"
    done
    return 1
}
# The daemon rows' Redis loads the module (ratelimitd.so, MODULE_SO) where
# it is built, so that the same Redis serves both paths: the Functions rows
# with `redis.module: off`, the module's (rlmod, redis) with `on`. MOD_WHY
# says why the module's rows are n/a.
MOD_SO=${MODULE_SO:-$ROOT/ratelimitd.so} MOD_WHY=""
if [ ! -f "$MOD_SO" ]; then
    MOD_WHY="$MOD_SO is not built (make ratelimitd.so)"
elif ! redis_start "$TMP/redis" --loadmodule "$MOD_SO"; then
    MOD_WHY="redis-server did not load $MOD_SO: $(grep -v '^[[:space:]]*$' "$TMP/redis/log" | tail -n1 | cut -c1-200)"
fi
if [ -n "$MOD_WHY" ]; then
    redis_start "$TMP/redis" || { log "redis did not start"; cat "$TMP/redis/log" >&2; exit 1; }
fi
RPORT=$RS_PORT RPID=$RS_PID
log "redis $(redis-server --version | awk '{sub("v=", "", $3); print $3}') on 127.0.0.1:$RPORT, $([ -z "$MOD_WHY" ] && echo "with the module $MOD_SO" || echo "without the module: $MOD_WHY")"

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

start_nginx() {   # start_nginx WORKERS [limit_req]
    local d="$TMP/nginx$1${2:-}" port zone="" loc
    port=$(free_port)
    loc="location = /check { return 200 '{\"allowed\":true}'; }"
    if [ "${2:-}" = limit_req ]; then
        # The `mem` target's peer: a token bucket of 100 per 60 s keyed by
        # X-Key (rate 100r/m, burst 100, nodelay), answering 429 when over,
        # as ratelimitd's policy `mem`. limit_req runs in the preaccess
        # phase, before `return` (rewrite phase) would answer: the 200 comes
        # from empty_gif (content phase).
        zone="limit_req_zone \$http_x_key zone=keys:64m rate=100r/m; limit_req_status 429;"
        loc="location /auth/ { limit_req zone=keys burst=100 nodelay; empty_gif; }"
    fi
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
    $zone
    server {
        listen 127.0.0.1:$port backlog=4096;
        $loc
        location / { return 404 '{"error":"not_found"}'; }
    }
}
EOF
    nginx -p "$d/" -c "$d/nginx.conf" -e stderr >"$d/out.log" 2>&1 &
    TPID=$!; STARTED+=("$TPID")
    URL="http://127.0.0.1:$port${WRK_AUTH:-/check}"
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

# RL_MOD: the daemons' `redis.module` (off: the Functions; on: the module;
# empty: no line, for a daemon that has no such field). Set below.
RL_MOD=""
rl_config() {   # rl_config FILE PORT WORKERS ("" = no workers line) [BATCH]
    {
        echo "listen: 127.0.0.1:$2"
        echo "redis:"
        echo "  url: redis://127.0.0.1:$RPORT/0"
        echo "  timeout: 1s"
        [ -n "${4:-}" ] && echo "  batch: $4"
        [ -n "$RL_MOD" ] && echo "  module: $RL_MOD"
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

# A row can load several daemons at once (the `leases` target): MPIDS and
# MURLS then replace TPID and URL; CONNS connections are shared among them.
MPIDS=() MURLS=()
row_pids() { if [ ${#MPIDS[@]} -gt 0 ]; then printf '%s\n' "${MPIDS[@]}"; else printf '%s\n' "$TPID"; fi; }
row_urls() { if [ ${#MURLS[@]} -gt 0 ]; then printf '%s\n' "${MURLS[@]}"; else printf '%s\n' "$URL"; fi; }
stop_multi() { local p; for p in "${MPIDS[@]}"; do stop_pid "$p"; done; MPIDS=() MURLS=(); }

# spawn_rl NAME WRITER [ARGS...]: a daemon whose configuration WRITER FILE
# PORT [ARGS...] writes, on a free port (3 tries), ready when /readyz
# answers 200 (10 s at most). Sets S_PID and S_URL (its /check URL).
S_PID="" S_URL=""
spawn_rl() {
    local name=$1 writer=$2 port try i
    shift 2
    for try in 1 2 3; do
        port=$(free_port)
        "$writer" "$TMP/$name.yaml" "$port" "$@"
        "$RL_BIN" --config "$TMP/$name.yaml" >"$TMP/$name.log" 2>&1 &
        S_PID=$!; STARTED+=("$S_PID")
        S_URL="http://127.0.0.1:$port/check"
        for i in $(seq 1 100); do
            kill -0 "$S_PID" 2>/dev/null || break
            [ "$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ] && return 0
            sleep 0.1
        done
        stop_pid "$S_PID"
        log "$name did not start on port $port (try $try)"
    done
    start_failed "$name" "$TMP/$name.log"
    return 1
}

# accepts WRITER [ARGS...]: does this daemon accept the configuration?
# (--check-config; its first line of refusal in ACCEPT_ERR)
ACCEPT_ERR=""
accepts() {
    "$1" "$TMP/accept.yaml" 1 "${@:2}" && "$RL_BIN" --check-config --config "$TMP/accept.yaml" >"$TMP/accept.out" 2>&1 \
        && return 0
    ACCEPT_ERR=$(grep -v '^[[:space:]]*$' "$TMP/accept.out" | head -n1 | cut -c1-200)
    return 1
}

# The Functions rows say `redis.module: off`, where the daemon knows the
# field; a daemon that does not has no module path, and its rows are the
# Functions' anyway (on the same Redis, module loaded or not).
RL_MOD=off
if ! accepts rl_config ""; then
    RL_MOD=""
    [ -n "$MOD_WHY" ] || MOD_WHY="this ratelimitd refuses \`redis.module\`: $ACCEPT_ERR"
fi
# BASE_BIN: another daemon (main's, say) whose Functions rows the `redis`
# target measures beside this one's, on the same Redis: "no slower than
# today" in one run rather than against another day's figures.
BASE_BIN=${BASE_BIN:-}

# Redis calls: "ALL MODULE", the calls of the decision commands (FCALL,
# EVALSHA and their read-only and EVAL forms, and the module's
# ratelimitd.check), and of ratelimitd.check alone, from INFO commandstats.
# (Its other counts, and total_commands_processed, include the commands a
# script runs inside.)
redis_calls() {
    redis-cli -p "$RPORT" info commandstats 2>/dev/null | tr -d '\r' | awk -F'[:=,]' '
        $1 ~ /^cmdstat_(fcall|fcall_ro|evalsha|evalsha_ro|eval|eval_ro|ratelimitd\.check)$/ { s += $3 }
        $1 == "cmdstat_ratelimitd.check" { m += $3 }
        END { printf "%d %d\n", s, m }'
}

# metrics_snap FILE: every row daemon's /metrics, one after the other.
metrics_snap() {
    local u
    : >"$1"
    [ -n "$METRIC_HIST$METRIC_SUM" ] || return 0
    for u in $(row_urls); do curl -s -m 2 "$(base_of "$u")/metrics" >>"$1" 2>/dev/null; done
}
# hist_delta BEFORE AFTER NAME: a Prometheus histogram's change between two
# snapshots, every label set but `le` summed: "calls N, mean M; <=le share% ..."
# (the share of observations in each bucket), or "n/a" when it is absent.
hist_delta() {
    local out
    out=$(awk -v n="$3" '
        FNR == 1 { f++ }
        index($0, n "_") == 1 && $1 ~ ("^" n "_(bucket|sum|count)([{]|$)") {
            kind = substr($1, length(n) + 2); sub(/[{].*/, "", kind)
            le = ""
            if (match($1, /le="[^"]*"/)) le = substr($1, RSTART + 4, RLENGTH - 5)
            v[kind, le] += (f == 1 ? -$NF : $NF); seen[kind]++
            if (kind == "bucket") les[le] = 1
        }
        END {
            if (!seen["count"]) exit
            c = v["count", ""]; printf "C %d %.1f\n", c, c ? v["sum", ""] / c : 0
            for (l in les) printf "B %s %d\n", l, v["bucket", l]
        }' "$1" "$2")
    [ -n "$out" ] || { echo "n/a"; return; }
    { printf '%s\n' "$out" | grep '^C '; printf '%s\n' "$out" | grep '^B ' | sort -k2,2g; } | awk '
        $1 == "C" { c = $2; printf "calls %d, mean %.1f requests/call;", $2, $3; next }
        { printf " <=%s: %.0f%%", $2, c ? 100 * ($3 - p) / c : 0; p = $3 }
        END { print "" }'
}
# sum_delta BEFORE AFTER PREFIX: each counter named PREFIX..., every label
# set summed, after - before: "name=N ..." (ratelimitd_, local_ and _total
# dropped from the names), or n/a.
sum_delta() {
    awk -v n="$3" '
        FNR == 1 { f++ }
        index($0, n) == 1 {
            k = $1; sub(/[{].*/, "", k); v[k] += (f == 1 ? -$NF : $NF); seen = 1
        }
        END {
            if (!seen) { print "n/a"; exit }
            for (k in v) { s = k; sub(/^ratelimitd_(local_)?/, "", s); sub(/_total$/, "", s); printf "%s=%d\n", s, v[k] }
        }' "$1" "$2" | sort | tr '\n' ' ' | sed 's/ $//'
}
rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

# ---------------------------------------------------------------- load ---
# wrk_run CONNS SECONDS MODE POLICY URL -> prints the RESULT line (or nothing)
wrk_run() {
    env ${WRK_AUTH:+BENCH_AUTH=$WRK_AUTH} BENCH_MODE=$3 BENCH_POLICY=$4 BENCH_KEYS=$KEYS \
        timeout -k 5 $(( $2 + 20 )) wrk -t1 -c"$1" -d"$2s" --timeout 2s -s "$HERE/post.lua" "$5" 2>&1 \
        | grep '^RESULT ' | tail -n1
}
# wrk_rows CONNS SECONDS MODE POLICY: wrk_run against the row's daemon, or,
# for several, one wrk -t1 per daemon at once with CONNS / N connections
# each; one RESULT line (requests, rps, errors summed; latencies the worst).
wrk_rows() {
    local urls n i u pids=()
    urls=$(row_urls); n=$(printf '%s\n' "$urls" | wc -l)
    if [ "$n" -le 1 ]; then wrk_run "$1" "$2" "$3" "$4" "$urls"; return; fi
    i=0
    for u in $urls; do
        i=$((i + 1))
        wrk_run $(( $1 / n )) "$2" "$3" "$4" "$u" >"$TMP/wrk.$i" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    for i in $(seq 1 "$n"); do cat "$TMP/wrk.$i"; done | awk -v n="$n" '
        /^RESULT / { k++; for (i = 2; i <= NF; i++) { split($i, kv, "="); f = kv[1]; x = kv[2]
            if (f ~ /^(rps|requests|non2xx|sockerr)$/) v[f] += x; else if (x > v[f]) v[f] = x } }
        END { if (k == n) printf "RESULT rps=%.1f requests=%d secs=%.3f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f non2xx=%d sockerr=%d\n",
            v["rps"], v["requests"], v["secs"], v["p50_ms"], v["p90_ms"], v["p99_ms"], v["max_ms"], v["non2xx"], v["sockerr"] }'
}
field() { local kv; for kv in $1; do [ "${kv%%=*}" = "$2" ] && { printf '%s\n' "${kv#*=}"; return; }; done; }

mkdir -p "$OUT"
RAW="$OUT/runs.tsv"
printf 'target\tworkers\talgorithm\tkeys\tconns\tround\tsecs\trequests\trps\tp50_ms\tp90_ms\tp99_ms\tmax_ms\tnon2xx\tsockerr\ttarget_cpu_us_per_req\tredis_cpu_us_per_req\tbox_busy_pct\tprobe\tredis_calls_per_req\tmodule_calls_pct\n' >"$RAW"

declare -A R    # R[row,field]
ROWS=()

cpu_sum() { local t=0 p; for p in "$@"; do t=$(( t + $(cpu_ticks "$p") )); done; echo "$t"; }

# measure ROWKEY TARGET WORKERS ALGO POLICY MODE: one row against the row's
# daemon(s) (row_pids, row_urls): a warmup, then ROUNDS measured runs back
# to back; the row is the round of median throughput, whole (its latency,
# CPU and calls come from the same run). With METRIC_HIST (a histogram's
# name) or METRIC_SUM (a counter prefix) set, their change over the measured
# run is scraped from the daemons' /metrics into R[ROWKEY,hist] /
# R[ROWKEY,msum].
METRIC_HIST="" METRIC_SUM=""
# median_round LIST: of lines "ROUND FIGURE", the round of the median figure
# (the lower middle of an even count).
median_round() { printf '%s' "$1" | sort -k2,2g | awk '{ r[NR] = $1 } END { print r[int((NR + 1) / 2)] }'; }
declare -A RR   # RR[round,field]: one round of the row being measured
FIELDS="rps p50 p99 non2xx sockerr tcpu rcpu probe busy rcalls rmod hist msum"
measure() {
    local key=$1 tname=$2 w=$3 algo=$4 pol=$5 mode=$6 i f list pick
    ROWS+=("$key")
    R[$key,target]=$tname R[$key,workers]=$w R[$key,algo]=$algo R[$key,keys]=$mode
    if [ $(( $(elapsed) + WARM + ROUNDS * (DUR + 2) + 6 )) -gt "$DEADLINE" ]; then
        log "$key: skipped (deadline ${DEADLINE}s)"; R[$key,rps]="skipped"; return
    fi
    redis-cli -p "$RPORT" flushall >/dev/null
    wrk_rows "$CONNS" "$WARM" "$mode" "$pol" >/dev/null
    RR=() list=""
    for i in $(seq 1 "$ROUNDS"); do
        measure_round "$key" "$tname" "$w" "$algo" "$pol" "$mode" "$i" || continue
        list="$list$i ${RR[$i,rps]}"$'\n'
    done
    if [ -z "$list" ]; then R[$key,rps]="failed"; return; fi
    pick=$(median_round "$list")
    for f in $FIELDS; do R[$key,$f]=${RR[$pick,$f]:-}; done
    [ "$ROUNDS" -gt 1 ] && log "$key: median of $(printf '%s' "$list" | wc -l) rounds: round $pick, ${R[$key,rps]} req/s"
    return 0
}
# measure_round ...ROWKEY's args... ROUND: one measured run into RR[ROUND,*]
# and a line of runs.tsv.
measure_round() {
    local key=$1 tname=$2 w=$3 algo=$4 pol=$5 mode=$6 i=$7 res r0 r1 b0 b1 t0 t1 n pr pkey c0 c1 m0 m1 pids
    [ "$mode" = hot ] && pkey=user:hot || pkey=user:1
    metrics_snap "$TMP/metrics.0"; read -r c0 m0 < <(redis_calls)
    mapfile -t pids < <(row_pids)
    t0=$(cpu_sum "${pids[@]}"); r0=$(cpu_ticks "$RPID"); b0=$(box_ticks)
    res=$(wrk_rows "$CONNS" "$DUR" "$mode" "$pol")
    t1=$(cpu_sum "${pids[@]}"); r1=$(cpu_ticks "$RPID"); b1=$(box_ticks)
    read -r c1 m1 < <(redis_calls); metrics_snap "$TMP/metrics.1"
    pr=$(probe "$(row_urls | head -n1)" "$pkey" "$pol")
    if [ -z "$res" ]; then log "$key round $i: wrk gave no result"; return 1; fi
    n=$(field "$res" requests)
    RR[$i,rcalls]=$(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN { printf "%.4f\n", n ? (b - a) / n : 0 }')
    # the share of those calls the module decided: which path the row took
    RR[$i,rmod]=$(awk -v a="$c0" -v b="$c1" -v m=$((m1 - m0)) 'BEGIN { printf "%.0f\n", (b > a) ? 100 * m / (b - a) : 0 }')
    [ -n "$METRIC_HIST" ] && RR[$i,hist]=$(hist_delta "$TMP/metrics.0" "$TMP/metrics.1" "$METRIC_HIST")
    [ -n "$METRIC_SUM" ] && RR[$i,msum]=$(sum_delta "$TMP/metrics.0" "$TMP/metrics.1" "$METRIC_SUM")
    read -r "RR[$i,tcpu]" "RR[$i,rcpu]" "RR[$i,busy]" < <(awk -v n="$n" -v hz="$CLK_TCK" -v dt=$((t1 - t0)) -v dr=$((r1 - r0)) \
        -v b="$b0 $b1" -v ncpu="$(nproc)" 'BEGIN { split(b, x, " ");
            printf "%.1f %.1f %.0f\n", n ? dt * 1e6 / hz / n : 0, n ? dr * 1e6 / hz / n : 0,
                   (x[4] - x[2]) ? 100 * ncpu * (x[3] - x[1]) / (x[4] - x[2]) : 0 }')
    RR[$i,rps]=$(field "$res" rps) RR[$i,p50]=$(field "$res" p50_ms) RR[$i,p99]=$(field "$res" p99_ms)
    RR[$i,non2xx]=$(awk -v a="$(field "$res" non2xx)" -v n="$n" 'BEGIN { printf "%.1f", n ? 100 * a / n : 0 }')
    RR[$i,sockerr]=$(field "$res" sockerr) RR[$i,probe]=$pr
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$tname" "$w" "$algo" "$mode" "$CONNS" "$i" "$(field "$res" secs)" "$n" "${RR[$i,rps]}" \
        "${RR[$i,p50]}" "$(field "$res" p90_ms)" "${RR[$i,p99]}" "$(field "$res" max_ms)" \
        "$(field "$res" non2xx)" "${RR[$i,sockerr]}" "${RR[$i,tcpu]}" "${RR[$i,rcpu]}" "${RR[$i,busy]}" "$pr" \
        "${RR[$i,rcalls]}" "${RR[$i,rmod]}" >>"$RAW"
    log "$key$([ "$ROUNDS" -gt 1 ] && echo " round $i"): ${RR[$i,rps]} req/s, p99 ${RR[$i,p99]} ms, target ${RR[$i,tcpu]} µs/req, redis ${RR[$i,rcpu]} µs/req, redis calls ${RR[$i,rcalls]}/req (module ${RR[$i,rmod]}%), non-2xx ${RR[$i,non2xx]}%, probe $pr, box ${RR[$i,busy]}%"
    [ -n "$METRIC_HIST" ] && log "$key: $METRIC_HIST: ${RR[$i,hist]}"
    [ -n "$METRIC_SUM" ] && log "$key: ${METRIC_SUM}*: ${RR[$i,msum]}"
    return 0
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

# run_rl W: ratelimitd with W workers (rl1 before the targets of issue 20,
# rl2 last: what --deadline skips first).
run_rl() {
    local w=$1 a m
    want "rl$w" || return 0
    if [ "$w" = 2 ] && [ "$RL2_OK" = 0 ]; then
        for a in fixed_window:fw token_bucket:tb; do
            for m in spread hot; do na_row "rl2-${a#*:}-$m" ratelimitd 2 "${a%:*}" "$m" "this ratelimitd has no \`workers:\` field"; done
        done
        return 0
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
}

run_rl 1

# rlmod: rl1's fixed_window rows with `redis.module: on`, on the same Redis
# (rl1's are `off`): the module decides every check (the module share of
# the row's Redis calls, in the log and runs.tsv, says so).
if want rlmod; then
    tn="ratelimitd redis.module: on"
    if [ -z "$MOD_WHY" ] && RL_MOD=on spawn_rl rlmod rl_config ""; then
        TPID=$S_PID URL=$S_URL
        for m in spread hot; do measure "rlmod-fw-$m" "$tn" 1 fixed_window fw "$m"; done
    else
        for m in spread hot; do na_row "rlmod-fw-$m" "$tn" 1 fixed_window "$m" "${MOD_WHY:-$START_ERR}"; done
    fi
    stop_target
fi

# ------------------------------------------------ targets of issue 20 ---
# mem: ratelimitd `backend: memory`, GET /auth/mem (key from X-Key, token
# bucket 100 per 60 s), against nginx limit_req on the same GET load.
mem_config() {   # mem_config FILE PORT
    cat >"$1" <<CFG
listen: 127.0.0.1:$2
backend: memory
log_level: warn
policies:
  mem:
    key: "\${header:X-Key}"
    tiers:
      - {name: minute, algorithm: token_bucket, limit: 100, window: 60s}
CFG
}
start_nginx_lr() { start_nginx "$1" limit_req; }
declare -A X     # other figures of the run, by name

if want mem; then
    WRK_AUTH=/auth/mem
    if start_target start_nginx_lr 1; then
        measure lr-spread "nginx limit_req" 1 "token_bucket (limit_req)" mem spread
        measure lr-hot "nginx limit_req" 1 "token_bucket (limit_req)" mem hot
    else
        for m in spread hot; do na_row "lr-$m" "nginx limit_req" 1 "token_bucket (limit_req)" "$m" "$START_ERR"; done
    fi
    stop_target
    if spawn_rl mem mem_config; then
        TPID=$S_PID URL=$S_URL
        X[mem_rss0]=$(rss_kib "$TPID")
        measure mem-spread "ratelimitd memory /auth" 1 token_bucket mem spread
        measure mem-hot "ratelimitd memory /auth" 1 token_bucket mem hot
        X[mem_rss1]=$(rss_kib "$TPID")
        log "mem: daemon RSS ${X[mem_rss0]} KiB at start, ${X[mem_rss1]} KiB after its rows"
    else
        for m in spread hot; do na_row "mem-$m" "ratelimitd memory /auth" 1 token_bucket "$m" "$START_ERR"; done
    fi
    stop_target
    WRK_AUTH=""
fi

# rss_run: the daemon TPID's RSS over RSS_TOTAL spread checks (wrk slices of
# DUR seconds, at most 60 s of them (--quick 10), and not past the
# deadline): the growth from the end of the first slice to the end of the last.
rss_run() {
    local sent=0 slice=0 res n max
    max=$(( ( $([ "$QUICK" = 1 ] && echo 10 || echo 60) + DUR - 1) / DUR ))
    X[rss_start]=$(rss_kib "$TPID") X[rss_first]="" X[rss_last]=""
    while [ "$sent" -lt "$RSS_TOTAL" ] && [ "$slice" -lt "$max" ]; do
        if [ $(( $(elapsed) + DUR + 6 )) -gt "$DEADLINE" ]; then log "rss: stopped at $sent checks (deadline)"; break; fi
        res=$(wrk_run "$CONNS" "$DUR" spread fw "$URL")
        n=$(field "$res" requests)
        [ -n "$n" ] || { log "rss: wrk gave no result"; break; }
        sent=$(( sent + n )) slice=$(( slice + 1 ))
        X[rss_last]=$(rss_kib "$TPID")
        [ -n "${X[rss_first]}" ] || X[rss_first]=${X[rss_last]} X[rss_first_n]=$sent
        log "rss: $sent checks, RSS ${X[rss_last]} KiB"
    done
    X[rss_sent]=$sent
}

# redis_rows PATH: the `redis` target's two rows of one path (functions:
# this daemon, `redis.module: off`, rows redis-b*; module: `on`, rows
# redis-m*; base: BASE_BIN's daemon, rows redis-base*).
redis_rows() {
    local path=$1 b bn tn pre name mod=$RL_MOD bin=$RL_BIN why=""
    case $path in
        functions) pre=redis-b name="ratelimitd Functions" ;;
        module) pre=redis-m name="ratelimitd module" mod=on why=$MOD_WHY ;;
        base) pre=redis-base name="base ratelimitd Functions" bin=$BASE_BIN mod=off
            RL_BIN=$bin RL_MOD=off accepts rl_config "" || mod="" ;;
    esac
    for b in default 1; do
        if [ "$b" = default ]; then bn=""; tn="$name (default redis.batch)"; else bn=1; tn="$name, redis.batch: 1"; fi
        if [ -n "$why" ]; then na_row "$pre$b" "$tn" 1 fixed_window spread "$why"; continue; fi
        if [ "$b" = 1 ] && ! RL_BIN=$bin RL_MOD=$mod accepts rl_config "" 1; then
            log "$tn: n/a (redis.batch refused by this daemon): $ACCEPT_ERR"
            na_row "$pre$b" "$tn" 1 fixed_window spread "redis.batch refused by this daemon"
            continue
        fi
        if RL_BIN=$bin RL_MOD=$mod spawn_rl "$pre$b" rl_config "" $bn; then
            TPID=$S_PID URL=$S_URL
            measure "$pre$b" "$tn" 1 fixed_window fw spread
            [ "$path$b" = functionsdefault ] && rss_run
        else
            na_row "$pre$b" "$tn" 1 fixed_window spread "$START_ERR"
        fi
        stop_target
    done
}
if want redis; then
    # `redis.batch: 1` (one request per Redis call) against the default
    # batch: the same spread fixed_window load as rl1, 1 worker; by the
    # Functions, by the module, and by BASE_BIN's daemon where it is set.
    METRIC_HIST=ratelimitd_redis_batch_size
    redis_rows functions
    redis_rows module
    [ -n "$BASE_BIN" ] && redis_rows base
    METRIC_HIST=""
fi

# pair: what envoyproxy/ratelimit's decision costs Redis, a pipelined INCRBY
# + EXPIRE of the descriptor's key, on a redis-server of its own: nothing
# else is connected to it, so its whole CPU over a redis-benchmark run is
# the commands'. Every one of the KEYS keys first holds a counter with a
# TTL (a window under way, loaded unmeasured), so that no EXPIRE misses
# its key; then PAIR_N INCRBY and PAIR_N EXPIRE of random ones
# (redis-benchmark -P 16 -c 8, over loopback TCP as the daemon's calls).
# A round fails when INFO commandstats does not count PAIR_N calls or the
# INCRBY run made a key that was not loaded.
PAIR_N=${PAIR_N:-100000}
declare -A P    # P[round,incrby|expire|sum|incrby_rps|expire_rps], P[why]
redis_cpu_s() {   # redis_cpu_s PORT: Redis's own user + sys CPU seconds
    redis-cli -p "$1" info cpu | tr -d '\r' \
        | awk -F: '$1 == "used_cpu_user" || $1 == "used_cpu_sys" { s += $2 } END { printf "%.6f\n", s }'
}
pair_cmd() {   # pair_cmd PORT CMD ARGS...: "µs per command, commands/s" of one run
    local c0 c1 rps calls
    redis-cli -p "$1" config resetstat >/dev/null
    c0=$(redis_cpu_s "$1")
    rps=$(timeout -k 5 120 redis-benchmark -h 127.0.0.1 -p "$1" -P 16 -c 8 -n "$PAIR_N" -r "$KEYS" --csv "${@:2}" 2>&1 \
        | awk -F'"' 'NR == 2 && $4 ~ /^[0-9.]+$/ { print $4 }')
    c1=$(redis_cpu_s "$1")
    calls=$(redis-cli -p "$1" info commandstats | tr -d '\r' | awk -F'[:=,]' -v c="cmdstat_${2,,}" '$1 == c { print $3 }')
    if [ -z "$rps" ] || [ "${calls:-0}" != "$PAIR_N" ]; then
        log "pair: $2: redis-benchmark gave ${rps:-no result}, Redis counted ${calls:-no} calls of $PAIR_N"
        return 1
    fi
    awk -v a="$c0" -v b="$c1" -v n="$PAIR_N" -v r="$rps" 'BEGIN { printf "%.3f %.0f\n", (b - a) * 1e6 / n, r }'
}
pair_round() {   # pair_round PORT ROUND: one measured pair into P[ROUND,*]
    local out
    redis-cli -p "$1" flushall >/dev/null
    seq -f 'key:%012.0f' 0 $(( KEYS - 1 )) | awk '{ printf "INCRBY %s 1\r\nEXPIRE %s 60\r\n", $1, $1 }' \
        | timeout -k 5 60 redis-cli -p "$1" --pipe >/dev/null || { log "pair: loading the keys failed"; return 1; }
    out=$(pair_cmd "$1" INCRBY key:__rand_int__ 1) || return 1
    read -r "P[$2,incrby]" "P[$2,incrby_rps]" <<<"$out"
    # a key that redis-benchmark names otherwise than the loaded ones would
    # be new here, and its EXPIRE a cheaper miss
    out=$(redis-cli -p "$1" dbsize)
    [ "$out" = "$KEYS" ] || { log "pair: $out keys after INCRBY, not the $KEYS loaded"; return 1; }
    out=$(pair_cmd "$1" EXPIRE key:__rand_int__ 60) || return 1
    read -r "P[$2,expire]" "P[$2,expire_rps]" <<<"$out"
    P[$2,sum]=$(awk -v a="${P[$2,incrby]}" -v b="${P[$2,expire]}" 'BEGIN { printf "%.3f", a + b }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$2" "$PAIR_N" "${P[$2,incrby]}" "${P[$2,expire]}" "${P[$2,sum]}" \
        "${P[$2,incrby_rps]}" "${P[$2,expire_rps]}" >>"$OUT/pair.tsv"
    log "pair$([ "$ROUNDS" -gt 1 ] && echo " round $2"): INCRBY ${P[$2,incrby]} µs + EXPIRE ${P[$2,expire]} µs = ${P[$2,sum]} µs of Redis CPU per decision (${P[$2,incrby_rps]} and ${P[$2,expire_rps]} commands/s)"
}
if want pair; then
    printf 'round\tcommands\tincrby_us\texpire_us\tdecision_us\tincrby_per_s\texpire_per_s\n' >"$OUT/pair.tsv"
    if ! command -v redis-benchmark >/dev/null; then
        P[why]="redis-benchmark is missing (Debian redis-tools)"
    elif [ $(( $(elapsed) + ROUNDS * 10 + 5 )) -gt "$DEADLINE" ]; then
        P[why]="skipped (deadline ${DEADLINE}s)"
    elif ! redis_start "$TMP/pair"; then
        P[why]="its redis-server did not start: $(grep -v '^[[:space:]]*$' "$TMP/pair/log" | tail -n1 | cut -c1-200)"
    else
        list=""
        for i in $(seq 1 "$ROUNDS"); do pair_round "$RS_PORT" "$i" && list="$list$i ${P[$i,sum]}"$'\n'; done
        stop_pid "$RS_PID"
        if [ -n "$list" ]; then
            pick=$(median_round "$list")
            for f in incrby expire sum incrby_rps expire_rps; do P[$f]=${P[$pick,$f]}; done
            P[rounds]=$(printf '%s' "$list" | awk '{ printf "%s%s", (NR > 1 ? ", " : ""), $2 }')
        else
            P[why]="every round failed: its reason is in the log"
        fi
    fi
    [ -n "${P[why]:-}" ] && log "pair: n/a: ${P[why]}"
fi

# module: what one check costs Redis decided by the module (ratelimitd.so,
# `ratelimitd.check`) and by the Functions (FCALL), at the default
# redis.batch and at 1: bench/module_cost.py drives Redis itself with the
# daemon's exact framing (the decision alone: the `redis` target's module
# rows are the same through the daemon), on a redis-server of its own with
# both loaded, every key made before a round
# as the pair's are; the median of at least 3 rounds, each beside the pair.
declare -A M    # M[functions|module,BATCH] µs of Redis CPU per check, M[why]
M_BATCH=$(awk '$2 == "CONFIG_DEFAULT_REDIS_BATCH" { print $3 }' "$ROOT/src/config/config.h")
if want module; then
    if [ ! -f "$ROOT/ratelimitd.so" ] || [ ! -x "$ROOT/tests/unit/local_driver" ]; then
        M[why]="build it first: make ratelimitd.so tests/unit/local_driver"
    elif [ $(( $(elapsed) + 40 )) -gt "$DEADLINE" ]; then
        M[why]="skipped (deadline ${DEADLINE}s)"
    elif RUNS=$(( ROUNDS > 3 ? ROUNDS : 3 )) timeout -k 5 300 python3 "$HERE/module_cost.py" "$M_BATCH" 1 \
            >"$OUT/module.tsv" 2>"$TMP/module.err"; then
        while IFS=$'\t' read -r b path us _; do
            case "$us" in [0-9]*) M[$path,$b]=$us ;; esac
        done <"$OUT/module.tsv"
        log "module: Redis CPU per check, batch $M_BATCH / 1: Functions ${M[functions,$M_BATCH]:-?} / ${M[functions,1]:-?} µs, module ${M[module,$M_BATCH]:-?} / ${M[module,1]:-?} µs"
    else
        M[why]="module_cost.py failed: $(tail -n1 "$TMP/module.err" | cut -c1-200)"
    fi
    [ -n "${M[why]:-}" ] && log "module: n/a: ${M[why]}"
fi

# leases: one hot key whose limit is far above the load (fixed_window 10^9
# per 60 s), 3 daemons, CONNS/3 connections each (3 wrk -t1 at once).
lease_config() {   # lease_config FILE PORT BACKEND (redis|memory) [LEASE]
    {
        echo "listen: 127.0.0.1:$2"
        if [ "$3" = memory ]; then
            echo "backend: memory"
        else
            printf 'redis:\n  url: redis://127.0.0.1:%s/0\n  timeout: 1s\n' "$RPORT"
            [ -n "$RL_MOD" ] && echo "  module: $RL_MOD"
            echo "clock: $CLOCK"
        fi
        echo "log_level: warn"
        printf 'policies:\n  big:\n    failure_mode: closed\n'
        [ -n "${4:-}" ] && echo "    lease: $4"
        printf '    tiers:\n      - {name: minute, algorithm: fixed_window, limit: 1000000000, window: 60s}\n'
    } >"$1"
}
spawn3() {   # spawn3 NAME WRITER-ARGS...: 3 daemons -> MPIDS, MURLS
    local i
    MPIDS=() MURLS=()
    for i in 1 2 3; do
        spawn_rl "$1-$i" lease_config "${@:2}" || { stop_multi; return 1; }
        MPIDS+=("$S_PID") MURLS+=("$S_URL")
    done
}
if want leases; then
    METRIC_SUM=ratelimitd_local_lease
    for v in memory none auto; do
        case $v in
            memory) tn="3 × ratelimitd backend: memory"; args=(memory) ;;
            none) tn="3 × ratelimitd Redis, no lease"; args=(redis) ;;
            auto) tn="3 × ratelimitd Redis, lease: auto"; args=(redis auto) ;;
        esac
        if [ "$v" = auto ] && ! accepts lease_config "${args[@]}"; then
            log "leases: n/a (lease: refused by this daemon): $ACCEPT_ERR"
            na_row leases-auto "$tn" 1 fixed_window hot-allowed "lease: refused by this daemon"
            continue
        fi
        if spawn3 "lease-$v" "${args[@]}"; then
            measure "leases-$v" "$tn" 1 fixed_window big hot
            R[leases-$v,keys]=hot-allowed
        else
            na_row "leases-$v" "$tn" 1 fixed_window hot-allowed "$START_ERR"
        fi
        stop_multi
    done
    METRIC_SUM=""
    X[leases_load]="3 × wrk -t1 -c$(( CONNS / 3 )) -d${DUR}s at once, one per daemon, all on this box's $(nproc) cores"
fi

# grpc: bench/grpc.sh, ROUNDS runs of each front and case (medians); its ratio gRPC ÷
# /check with h2load on both fronts (h2load --h1 for /check).
declare -A G
if want grpc; then
    gdur=$(( DUR > 5 ? 5 : (QUICK ? 2 : DUR) ))
    est=$(( 2 * 3 * ROUNDS * (gdur + WARM) + 20 ))
    if ! command -v h2load >/dev/null; then
        G[why]="h2load is missing (Debian nghttp2-client)"
    elif [ $(( $(elapsed) + est )) -gt "$DEADLINE" ]; then
        G[why]="skipped (deadline ${DEADLINE}s)"
    else
        log "running bench/grpc.sh --runs $ROUNDS --duration $gdur --warmup $WARM (about ${est} s)"
        if RL_BIN=$RL_BIN timeout -k 5 $(( est + 60 )) bash "$HERE/grpc.sh" --runs "$ROUNDS" --duration "$gdur" --warmup "$WARM" \
            >"$OUT/grpc.txt" 2>"$TMP/grpc.err"; then
            # "grpc allowed N/s" / "check denied N/s" lines where grpc.sh prints
            # them; else its table: | case | gRPC (h2load) | wrk | x | /check (h2load --h1) | ...
            while read -r front c r; do G[$c,$front]=$r; done < <(awk '
                /^(grpc|check) (allowed|denied) [0-9.]+\/s/ { sub("/s", "", $3); print $1, $2, $3; lines = 1 }
                /^\| (allow|deny) \|/ { split($0, f, "|"); c = f[2]; gsub(/ /, "", c); c = (c == "allow") ? "allowed" : "denied"
                    split(f[3], g, " "); split(f[6], h, " "); tab[c] = g[1] " " h[1] }
                END { if (!lines) for (c in tab) { split(tab[c], x, " "); print "grpc", c, x[1]; print "check", c, x[2] } }' "$OUT/grpc.txt")
            log "grpc: allowed ${G[allowed,grpc]:-?} vs ${G[allowed,check]:-?}/s, denied ${G[denied,grpc]:-?} vs ${G[denied,check]:-?}/s"
        else
            G[why]="bench/grpc.sh failed: $(grep -v '^[[:space:]]*$' "$TMP/grpc.err" | tail -n1 | cut -c1-200)"
        fi
    fi
    [ -n "${G[why]:-}" ] && log "grpc: n/a: ${G[why]}"
fi

run_rl 2

# Hook: another script measures what one check costs inside Redis (one
# run per variant, 100 000 calls; --quick 20 000), for at most 120 s and
# not more than 30 s past the deadline.
REDIS_COST=""
cost_secs=$(( DEADLINE + 30 - $(elapsed) )); [ "$cost_secs" -gt 120 ] && cost_secs=120
if want cost && [ -f "$HERE/redis_cost.sh" ] && [ "$cost_secs" -lt 20 ]; then
    log "redis_cost.sh: skipped (deadline)"
elif want cost && [ -f "$HERE/redis_cost.sh" ]; then
    log "running bench/redis_cost.sh (hook, at most ${cost_secs} s)"
    calls=100000; [ "$QUICK" = 1 ] && calls=20000
    REDIS_HOST=127.0.0.1 REDIS_PORT=$RPORT RL_BIN=$RL_BIN QUICK=$QUICK RUNS=1 \
        timeout -k 5 "$cost_secs" bash "$HERE/redis_cost.sh" "$calls" \
        >"$OUT/redis_cost.txt" 2>"$TMP/redis_cost.err"
    case $? in
        0) REDIS_COST=$(cat "$OUT/redis_cost.txt") ;;
        124|137) log "redis_cost.sh: stopped after ${cost_secs} s (its table so far is in $OUT/redis_cost.txt)" ;;
        *) log "redis_cost.sh failed: $(tail -n3 "$TMP/redis_cost.err")" ;;
    esac
fi

stop_pid "$RPID"

# -------------------------------------------------------------- report ---
v() { printf '%s' "${R[$1,$2]:-}"; }
has() { case "${R[$1,rps]:-}" in [0-9]*) return 0 ;; esac; return 1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
unit() { case "$1" in n/a*) echo "$1" ;; *) echo "$1$2" ;; esac; }
verdict() {   # verdict VALUE OP LIMIT
    case "$1" in n/a*) echo "n/a"; return ;; esac
    awk -v x="$1" -v op="$2" -v l="$3" 'BEGIN { ok = (op == ">=") ? x >= l : x <= l; print ok ? "met" : "NOT met" }'
}

# ------------------------------------------------- issue 20's targets ---
# The row the Redis targets are read from: the `redis` target's default
# batch, else rl1's spread fixed_window row (the same load).
RK=""
if has redis-bdefault; then RK=redis-bdefault; elif has rl1-fw-spread; then RK=rl1-fw-spread; fi
# The same for the module's path (redis.module: on): the `redis` target's
# module row at the default batch, else rlmod's spread row; mk_na says why
# neither was measured.
MK=""
if has redis-mdefault; then MK=redis-mdefault; elif has rlmod-fw-spread; then MK=rlmod-fw-spread; fi
mk_na() { if [ -n "$(v redis-mdefault why)" ]; then na_why redis-mdefault; else na_why rlmod-fw-spread; fi; }
na_why() { if [ -n "$(v "$1" why)" ]; then echo "n/a ($(v "$1" why))"; else echo "n/a"; fi; }
fmt() { awk -v x="$1" 'BEGIN { printf "%.0f", x }'; }
srow() {   # srow WHAT VALUE UNIT OP LIMIT [DETAIL]
    printf '| %s | %s%s | %s %s%s | %s |\n' "$1" "$(unit "$2" "$3")" "${6:+ ($6)}" "$( [ "$4" = '>=' ] && echo '≥' || echo '≤')" \
        "$5" "$3" "$(verdict "$2" "$4" "$5")"
}
SUMMARY=$(
    echo "| target (issue 20) | measured | target | verdict |"
    echo "|---|---|---|---|"
    x=n/a d=""; [ -n "$RK" ] || x=$(na_why redis-bdefault)
    if [ -n "$RK" ] && has rlf-spread; then x=$(ratio "$(v $RK rps)" "$(v rlf-spread rps)"); d="$(fmt "$(v $RK rps)") vs $(fmt "$(v rlf-spread rps)") checks/s"; fi
    srow "spread fixed_window via Redis, 1 worker ÷ Node rate-limiter-flexible (2 workers)" "$x" x '>=' 2.0 "$d"
    x=n/a; [ -n "$RK" ] && x=$(v $RK p99)
    srow "p99 of that row (wrk -t1 -c$CONNS)" "$x" " ms" '<=' 2
    x=n/a; [ -n "$RK" ] && x=$(v $RK rcpu)
    srow "Redis CPU per check, that row" "$x" " µs" '<=' 5
    # issue 30: ours ÷ envoyproxy/ratelimit's INCRBY + EXPIRE (target pair)
    x="n/a${P[why]:+ (${P[why]})}" d=""
    if [ -n "$RK" ] && [ -n "${P[sum]:-}" ]; then x=$(ratio "$(v $RK rcpu)" "${P[sum]}"); d="$(v $RK rcpu) vs ${P[sum]} µs"; fi
    srow "that Redis CPU per check ÷ envoyproxy/ratelimit's INCRBY + EXPIRE per decision (issue 30)" "$x" x '<=' 0.5 "$d"
    x="n/a${P[why]:+ (${P[why]})}" d=""
    if has redis-b1 && [ -n "${P[sum]:-}" ]; then x=$(ratio "$(v redis-b1 rcpu)" "${P[sum]}"); d="$(v redis-b1 rcpu) vs ${P[sum]} µs"; fi
    srow "Redis CPU per check at redis.batch: 1 ÷ that pair (issue 30)" "$x" x '<=' 1.0 "$d"
    # issue 30 through the daemon by the module's path (redis.module: on)
    x=$(mk_na) d=""
    if [ -n "$MK" ] && has rlf-spread; then x=$(ratio "$(v $MK rps)" "$(v rlf-spread rps)"); d="$(fmt "$(v $MK rps)") vs $(fmt "$(v rlf-spread rps)") checks/s"; fi
    srow "the module (redis.module: on): spread fixed_window via Redis, 1 worker ÷ Node rate-limiter-flexible (issue 30)" "$x" x '>=' 2.0 "$d"
    x=$(mk_na); [ -n "$MK" ] && x=$(v $MK p99)
    srow "p99 of that row (issue 30)" "$x" " ms" '<=' 2
    x=$(mk_na) d=""; [ -n "${P[why]:-}" ] && x="n/a (pair: ${P[why]})"
    if [ -n "$MK" ] && [ -n "${P[sum]:-}" ]; then x=$(ratio "$(v $MK rcpu)" "${P[sum]}"); d="$(v $MK rcpu) vs ${P[sum]} µs"; fi
    srow "the module: Redis CPU per check ÷ the pair (issue 30)" "$x" x '<=' 0.5 "$d"
    x=$(na_why redis-m1) d=""; [ -n "${P[why]:-}" ] && x="n/a (pair: ${P[why]})"
    if has redis-m1 && [ -n "${P[sum]:-}" ]; then x=$(ratio "$(v redis-m1 rcpu)" "${P[sum]}"); d="$(v redis-m1 rcpu) vs ${P[sum]} µs"; fi
    srow "the module at redis.batch: 1: Redis CPU per check ÷ the pair (issue 30)" "$x" x '<=' 1.0 "$d"
    # the Functions no slower than today: beside BASE_BIN's daemon, same Redis
    for b in default 1; do
        x="n/a (set BASE_BIN to main's ratelimitd)" d=""
        [ -n "$BASE_BIN" ] && x=$(na_why "redis-base$b")
        if has "redis-b$b" && has "redis-base$b"; then
            x=$(ratio "$(v "redis-b$b" rcpu)" "$(v "redis-base$b" rcpu)")
            d="$(v "redis-b$b" rcpu) vs $(v "redis-base$b" rcpu) µs; $(fmt "$(v "redis-b$b" rps)") vs $(fmt "$(v "redis-base$b" rps)") checks/s"
        fi
        srow "the Functions' Redis CPU per check ÷ the base daemon's (BASE_BIN), $([ $b = 1 ] && echo 'redis.batch: 1' || echo 'default batch') (issue 30)" "$x" x '<=' 1.0 "$d"
    done
    for b in "$M_BATCH" 1; do
        x="n/a${M[why]:+ (${M[why]})}${P[why]:+ (pair: ${P[why]})}" d=""
        if [ -n "${M[module,$b]:-}" ] && [ -n "${P[sum]:-}" ]; then
            x=$(ratio "${M[module,$b]}" "${P[sum]}")
            d="${M[module,$b]} vs ${P[sum]} µs; the Functions ${M[functions,$b]:-?} µs = $(ratio "${M[functions,$b]:-0}" "${P[sum]}")×"
        fi
        srow "the decision alone, no daemon: the module's Redis CPU per check at redis.batch: $b ÷ that pair (bench/module_cost.py)" "$x" x '<=' "$([ "$b" = 1 ] && echo 1.0 || echo 0.5)" "$d"
    done
    x=$(na_why leases-auto) d=""
    if has leases-auto; then x=$(awk -v c="$(v leases-auto rcalls)" 'BEGIN { printf "%.2f", 100 * c }'); d="$(v leases-auto rcalls) FCALL/EVALSHA per check"; fi
    srow "one hot allowed key, 3 daemons, lease: auto: Redis calls per check" "$x" " %" '<=' 1 "$d"
    x=$(na_why leases-auto) d=""
    if has leases-auto && has leases-memory; then x=$(ratio "$(v leases-auto rps)" "$(v leases-memory rps)"); d="$(fmt "$(v leases-auto rps)") vs $(fmt "$(v leases-memory rps)") checks/s"; fi
    srow "that load's throughput with lease: auto ÷ backend: memory" "$x" x '>=' 0.8 "$d"
    for c in allowed denied; do
        x="n/a${G[why]:+ (${G[why]})}" d=""
        if [ -n "${G[$c,grpc]:-}" ] && [ -n "${G[$c,check]:-}" ]; then x=$(ratio "${G[$c,grpc]}" "${G[$c,check]}"); d="$(fmt "${G[$c,grpc]}") vs $(fmt "${G[$c,check]}")/s"; fi
        srow "gRPC ShouldRateLimit ÷ /check (h2load on both), $c" "$x" x '>=' 0.9 "$d"
    done
    for m in spread hot; do
        x=$(na_why "mem-$m") d=""
        if has "mem-$m" && has "lr-$m"; then x=$(ratio "$(v "mem-$m" rps)" "$(v "lr-$m" rps)"); d="$(fmt "$(v "mem-$m" rps)") vs $(fmt "$(v "lr-$m" rps)")/s, p99 $(v "mem-$m" p99) vs $(v "lr-$m" p99) ms"; fi
        srow "hold: backend: memory GET /auth ÷ nginx limit_req, $([ $m = hot ] && echo 'one hot key' || echo 'spread keys')" "$x" x '>=' 1.0 "$d"
    done
    x=n/a d=""
    if has rl1-fw-hot && has nginx1-hot; then x=$(ratio "$(v rl1-fw-hot rps)" "$(v nginx1-hot rps)"); d="$(fmt "$(v rl1-fw-hot rps)") vs $(fmt "$(v nginx1-hot rps)")/s"; fi
    srow "hold: one hot denied key (Redis, fixed_window) ÷ the nginx ceiling (1 worker)" "$x" x '>=' 1.0 "$d"
    x=n/a d=""
    if [ -n "$RK" ] && has nginx1-spread; then x=$(ratio "$(v $RK tcpu)" "$(v nginx1-spread tcpu)"); d="$(v $RK tcpu) vs $(v nginx1-spread tcpu) µs"; fi
    srow "hold: daemon CPU per check (Redis, spread) ÷ nginx constant 200 per request" "$x" x '<=' 1.6 "$d"
    x=$(na_why mem-spread) d=""
    if has mem-spread && has lr-spread; then x=$(ratio "$(v mem-spread tcpu)" "$(v lr-spread tcpu)"); d="$(v mem-spread tcpu) vs $(v lr-spread tcpu) µs"; fi
    srow "hold: daemon CPU per check (memory /auth, spread) ÷ nginx limit_req per request" "$x" x '<=' 1.6 "$d"
    x=n/a d=""
    if [ -n "${X[rss_last]:-}" ] && [ -n "${X[rss_first]:-}" ]; then
        x=$(( X[rss_last] - X[rss_first] ))
        d="${X[rss_first]} KiB after the first $(fmt "${X[rss_first_n]}") checks, ${X[rss_last]} KiB after $(fmt "${X[rss_sent]}")$([ "${X[rss_sent]}" -lt "$RSS_TOTAL" ] && echo ", short of $RSS_TOTAL")"
    fi
    srow "hold: daemon RSS growth over $RSS_TOTAL spread checks (Redis, default batch)" "$x" " KiB" '<=' 1024 "$d" \
        | { if [ "${X[rss_sent]:-0}" -lt "$RSS_TOTAL" ]; then sed 's/ | \([^|]*\) |$/ | \1 (over fewer checks) |/'; else cat; fi; }
)

# Throughput bars: each of the run's comparisons, ratelimitd and its peer.
BARS="$OUT/bars.dat"
{
    echo "# bench/run.sh $(date -u '+%Y-%m-%d %H:%M UTC'): label ratelimitd_rps peer_rps (NaN: not measured)${NOTE:+ ($NOTE)}"
    bar() {   # bar LABEL ROW_RL ROW_PEER
        local a=NaN b=NaN
        has "$2" && a=$(v "$2" rps)
        has "$3" && b=$(v "$3" rps)
        printf '"%s" %s %s\n' "$1" "$a" "$b"
    }
    bar "memory /auth spread | nginx limit_req" mem-spread lr-spread
    bar "memory /auth hot | nginx limit_req" mem-hot lr-hot
    bar "Redis spread | Node RLF" "$RK" rlf-spread
    bar "Redis spread, batch 1 | Node RLF" redis-b1 rlf-spread
    bar "Redis spread, module | Node RLF" "$MK" rlf-spread
    bar "hot denied | nginx 200" rl1-fw-hot nginx1-hot
    bar "3 daemons lease: auto | memory" leases-auto leases-memory
    bar "3 daemons no lease | memory" leases-none leases-memory
    for c in allowed denied; do printf '"gRPC %s | /check h2load" %s %s\n' "$c" "${G[$c,grpc]:-NaN}" "${G[$c,check]:-NaN}"; done
} >"$BARS"
gnuplot -e "barsfile='$BARS'; outfile='$OUT/bars.png'; title_note='${NOTE//\'/}'" "$HERE/plot.gp" 2>"$TMP/gnuplot-bars.err" \
    || log "gnuplot (bars) failed: $(cat "$TMP/gnuplot-bars.err")"
[ -s "$OUT/bars.png" ] && log "plot: $OUT/bars.png"

MD="$OUT/results.md"
{
    echo "## Results of bench/run.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) cores, $(uname -sr); $("$RL_BIN" --version 2>/dev/null | head -n1)," \
         "redis $(redis-server --version | awk '{sub("v=","",$3); print $3}'), $(nginx -v 2>&1 | sed 's/.*: //')," \
         "node $(node --version), wrk $(dpkg-query -W -f='${Version}' wrk 2>/dev/null)."
    echo "Command: \`$CMDLINE\`."
    echo "Load: wrk -t1 -c$CONNS, ${DUR} s per row after ${WARM} s of warmup$([ "$ROUNDS" -gt 1 ] && echo ", each row the run of median req/s of $ROUNDS (every run in runs.tsv)"); daemon clock: $CLOCK.$([ "$QUICK" = 1 ] && echo ' QUICK MODE (short runs).')"
    echo "Box busy before the load (other work on the machine, 1 s sample): ${IDLE_BUSY}% of $(( $(nproc) * 100 ))%."
    [ -n "$NOTE" ] && { echo; echo "**Note: $NOTE**"; }
    echo
    echo "| target | workers | algorithm | keys | req/s | p50 ms | p99 ms | target CPU µs/req | redis CPU µs/req | redis calls/req | non-2xx % | probe after |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for k in "${ROWS[@]}"; do
        if has "$k"; then
            printf '| %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s |\n' "$(v "$k" target)" "$(v "$k" workers)" \
                "$(v "$k" algo)" "$(v "$k" keys)" "$(v "$k" rps)" "$(v "$k" p50)" "$(v "$k" p99)" \
                "$(v "$k" tcpu)" "$(v "$k" rcpu)" "$(v "$k" rcalls)" "$(v "$k" non2xx)" "$(v "$k" probe)"
        else
            printf '| %s | %s | %s | %s | %s | | | | | | | |\n' "$(v "$k" target)" "$(v "$k" workers)" \
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
    echo
    echo "### The targets of issue 20"
    echo
    printf '%s\n' "$SUMMARY"
    echo
    echo "Details of its targets:"
    echo
    if has mem-spread; then
        echo "- mem: \`backend: memory\` GET /auth/mem (X-Key, token_bucket 100/60 s) and nginx limit_req (rate 100r/m, burst 100 nodelay), 1 worker each, the same GET load; the daemon's RSS ${X[mem_rss0]:-?} KiB at its start, ${X[mem_rss1]:-?} KiB after its rows."
    fi
    for k in redis-bdefault redis-b1 redis-mdefault redis-m1 redis-basedefault redis-base1; do
        if has "$k"; then
            echo "- $(v "$k" target): $(fmt "$(v "$k" rps)") checks/s, p99 $(v "$k" p99) ms, daemon $(v "$k" tcpu) µs and Redis $(v "$k" rcpu) µs of CPU per check, $(v "$k" rcalls) Redis calls (FCALL/EVALSHA/ratelimitd.check) per check, $(v "$k" rmod) % of them by the module; ratelimitd_redis_batch_size over the run: $(v "$k" hist)."
        elif [ -n "$(v "$k" target)" ]; then
            echo "- $(v "$k" target): $(na_why "$k")."
        fi
    done
    [ -n "${X[rss_sent]:-}" ] && echo "- RSS of the default-batch daemon: ${X[rss_start]:-?} KiB after its row, ${X[rss_first]:-?} KiB after the first $(fmt "${X[rss_first_n]:-0}") checks of the RSS run, ${X[rss_last]:-?} KiB after ${X[rss_sent]} (wrk -t1 -c$CONNS slices of ${DUR} s, spread keys)."
    if [ -n "${P[sum]:-}" ]; then
        echo "- pair (envoyproxy/ratelimit's decision): INCRBY ${P[incrby]} µs + EXPIRE ${P[expire]} µs = ${P[sum]} µs of Redis's own CPU (INFO cpu) per decision, ${P[incrby_rps]} and ${P[expire_rps]} commands/s (redis-benchmark -P 16 -c 8 -n $PAIR_N -r $KEYS on a redis-server of its own, every key holding a counter with a TTL$([ "$ROUNDS" -gt 1 ] && echo "; the median round of $ROUNDS: ${P[rounds]} µs"); every round in pair.tsv)."
    elif want pair; then
        echo "- pair (envoyproxy/ratelimit's decision): n/a${P[why]:+ (${P[why]})}."
    fi
    if [ -n "${M[module,$M_BATCH]:-}" ]; then
        echo "- module: Redis's own CPU (INFO cpu) per fixed_window check on 100 000 spread keys, each made first, driven by bench/module_cost.py with the daemon's exact framing and no daemon in the way (the decision's cost alone; the \`redis\` target's module rows are the same through the daemon), the median of $(( ROUNDS > 3 ? ROUNDS : 3 )) rounds (every round in module.tsv): at redis.batch $M_BATCH (the default), the Functions ${M[functions,$M_BATCH]} µs and the module ${M[module,$M_BATCH]} µs; at 1, ${M[functions,1]:-?} µs and ${M[module,1]:-?} µs."
    elif want module; then
        echo "- module: n/a${M[why]:+ (${M[why]})}."
    fi
    [ -n "${X[leases_load]:-}" ] && echo "- leases: one hot allowed key (fixed_window 10^9 per 60 s), ${X[leases_load]}."
    for k in leases-memory leases-none leases-auto; do
        if has "$k"; then
            echo "  - $(v "$k" target): $(fmt "$(v "$k" rps)") checks/s, p99 $(v "$k" p99) ms (the worst of the 3 wrk), $(v "$k" rcalls) Redis calls (FCALL/EVALSHA/ratelimitd.check) per check; local lease counters over the run: $(v "$k" msum)."
        elif [ -n "$(v "$k" target)" ]; then
            echo "  - $(v "$k" target): $(na_why "$k")."
        fi
    done
    if want grpc; then
        if [ -n "${G[why]:-}" ]; then echo "- grpc: n/a (${G[why]})."
        else echo "- grpc: bench/grpc.sh --runs $ROUNDS --duration $gdur --warmup $WARM, its whole output in grpc.txt:"; echo; echo '```'; cat "$OUT/grpc.txt"; echo '```'; fi
    fi
    echo
    echo "Throughput of each comparison: [bars.png](bars.png), data in bars.dat."
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

{
    echo "## The targets of issue 20: bench/run.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Command: \`$CMDLINE\`$([ "$QUICK" = 1 ] && echo ' (QUICK MODE: short runs)'); box busy before the load: ${IDLE_BUSY}% of $(( $(nproc) * 100 ))%; details in results.md."
    [ -n "$NOTE" ] && { echo; echo "**Note: $NOTE**"; }
    echo
    printf '%s\n' "$SUMMARY"
} >"$OUT/summary.md"

cat "$MD"
log "done in $(elapsed) s; results in $OUT"
