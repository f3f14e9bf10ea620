#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/tls.sh: what TLS costs per check on ratelimitd's listen, against the
# same TLS done by nginx, in one run on 127.0.0.1.
#
#   bench/tls.sh [--duration S] [--reps N] [--conns N]
#
# Four servers, each one worker, with one ECDSA P-256 certificate made here
# by openssl: ratelimitd (backend: memory, POST /check of one policy, one
# key, a limit never reached) plain and with `tls:`; nginx plain and HTTPS
# answering the same POST with `return 200` and a JSON body (the HTTP
# ceiling: no limiting at all). Two cases, each with wrk -t1 -cCONNS
# (default 16) and bench/post.lua:
#   keepalive  connections kept open: TLS costs its record layer only
#   newconn    "Connection: close": a TCP connection and a full handshake
#              (wrk resumes no session) per request
# Each case runs REPS times (default 3) for S seconds (default 5) after a
# 1 s warm-up; printed are the medians of requests/s and of the server's
# CPU per request (utime + stime from /proc over the run, the nginx master
# and its worker summed), and TLS's cost per check: CPU per request with
# TLS minus without, for ratelimitd and for nginx, and their ratio.
# Needs wrk, nginx, openssl, curl; RL_BIN=/path/to/ratelimitd (default
# ./ratelimitd). Everything started here is stopped on exit.
set -eu -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RL_BIN=$(readlink -f "${RL_BIN:-./ratelimitd}")
DUR=5 REPS=3 CONNS=16
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) DUR=$2; shift ;;
        --reps) REPS=$2; shift ;;
        --conns) CONNS=$2; shift ;;
        -h|--help) sed -n '2,/^set -eu/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "tls.sh: unknown option $1" >&2; exit 64 ;;
    esac
    shift
done
for p in wrk nginx openssl curl; do
    command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] || { echo "tls.sh: $p not found" >&2; exit 69; }
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
T=$(mktemp -d)
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
ticks() { local t=0 p; for p in $(pgrep -P "$1") "$1"; do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$T/key.pem" -out "$T/cert.pem" 2>/dev/null

# ratelimitd, plain and TLS
start_rl() { # name port tls(0|1)
    { echo "listen: 127.0.0.1:$2"; echo "backend: memory"; echo "log_level: warn"
      echo "max_connections: 100000"
      if [ "$3" = 1 ]; then printf 'tls:\n  cert_file: %s\n  key_file: %s\n' "$T/cert.pem" "$T/key.pem"; fi
      echo "policies:"
      echo "  fw: {tiers: [{name: t, algorithm: fixed_window, limit: 1000000000, window: 1h}]}"
    } >"$T/$1.yaml"
    "$RL_BIN" --config "$T/$1.yaml" 2>"$T/$1.log" &
}
# nginx, plain and HTTPS, one worker each
start_ng() { # name port tls(0|1)
    mkdir -p "$T/$1"
    local listen="listen 127.0.0.1:$2 backlog=4096;"
    if [ "$3" = 1 ]; then listen="listen 127.0.0.1:$2 ssl backlog=4096; ssl_certificate $T/cert.pem; ssl_certificate_key $T/key.pem; ssl_protocols TLSv1.2 TLSv1.3;"; fi
    cat >"$T/$1/nginx.conf" <<NG
daemon off; master_process on; worker_processes 1; pid nginx.pid; error_log stderr warn;
$( [ "$(id -u)" = 0 ] && echo "user root root;" )
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000;
  client_body_temp_path cbt; proxy_temp_path pt; fastcgi_temp_path ft; uwsgi_temp_path ut; scgi_temp_path st;
  server { $listen
    location /check { default_type application/json; return 200 '{"allowed":true}'; } }
}
NG
    "$NGINX" -p "$T/$1/" -c "$T/$1/nginx.conf" -e stderr 2>"$T/$1.log" &
}

declare -A PID PORT URL
for s in rl_plain rl_tls ng_plain ng_tls; do
    PORT[$s]=$(free_port)
    tls=0; case $s in *_tls) tls=1 ;; esac
    case $s in rl_*) start_rl "$s" "${PORT[$s]}" $tls ;; *) start_ng "$s" "${PORT[$s]}" $tls ;; esac
    PID[$s]=$!
    if [ $tls = 1 ]; then URL[$s]="https://localhost:${PORT[$s]}"; else URL[$s]="http://127.0.0.1:${PORT[$s]}"; fi
done
for s in rl_plain rl_tls ng_plain ng_tls; do
    ok=0
    for _ in $(seq 50); do
        code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$T/cert.pem" -d '{"policy":"fw","key":"k"}' "${URL[$s]}/check" || true)
        [ "$code" = 200 ] && { ok=1; break; }
        sleep 0.1
    done
    [ $ok = 1 ] || { echo "tls.sh: $s does not answer 200:" >&2; cat "$T/$s.log" >&2; exit 1; }
done

run() { # server case -> "rps cpu_us_per_req"
    local s=$1 c=$2 close=0 t0 t1 out
    if [ "$c" = newconn ]; then close=1; fi
    BENCH_CLOSE=$close BENCH_MODE=hot BENCH_POLICY=fw wrk -t1 -c"$CONNS" -d1s -s "$HERE/post.lua" "${URL[$s]}" >/dev/null 2>&1 || true
    t0=$(ticks "${PID[$s]}")
    out=$(BENCH_CLOSE=$close BENCH_MODE=hot BENCH_POLICY=fw wrk -t1 -c"$CONNS" -d"${DUR}s" -s "$HERE/post.lua" "${URL[$s]}" | grep '^RESULT')
    t1=$(ticks "${PID[$s]}")
    python3 - "$out" $((t1 - t0)) "$(getconf CLK_TCK)" <<'PY'
import sys
kv = dict(x.split("=") for x in sys.argv[1].split()[1:])
req, ticks, hz = int(kv["requests"]), int(sys.argv[2]), int(sys.argv[3])
if int(kv["non2xx"]):
    print("tls.sh: errors:", sys.argv[1], file=sys.stderr)
print("%.0f %.2f %s" % (float(kv["rps"]), ticks * 1e6 / hz / max(req, 1), kv["sockerr"]))
PY
}

echo "# bench/tls.sh --duration $DUR --reps $REPS --conns $CONNS; $(nproc) CPUs; $("$RL_BIN" --version | head -1); $("$NGINX" -v 2>&1); $(openssl version)"
for c in keepalive newconn; do
    for s in rl_plain rl_tls ng_plain ng_tls; do
        for r in $(seq "$REPS"); do echo "$c $s $(run "$s" "$c")"; done
    done
done | tee "$T/raw.txt" | sed 's/^/# raw: /'
python3 - "$T/raw.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for case, server, rps, cpu, sockerr in rows:
    med.setdefault((case, server), []).append((float(rps), float(cpu), int(sockerr)))
def m(case, server, i):
    return statistics.median(x[i] for x in med[(case, server)])
print("| case | server | req/s (median) | server CPU µs/req (median) |")
print("|---|---|---|---|")
for case in ("keepalive", "newconn"):
    for server in ("rl_plain", "rl_tls", "ng_plain", "ng_tls"):
        print("| %s | %s | %.0f | %.1f |" % (case, server, m(case, server, 0), m(case, server, 1)))
print()
out = []
for case in ("keepalive", "newconn"):
    rl = m(case, "rl_tls", 1) - m(case, "rl_plain", 1)
    ng = m(case, "ng_tls", 1) - m(case, "ng_plain", 1)
    print("%s: TLS costs ratelimitd %.1f µs CPU per check (%.2fx its plain CPU), nginx %.1f µs "
          "(%.2fx); ratelimitd's TLS cost / nginx's: %.2f; req/s TLS/plain: ratelimitd %.2f, "
          "nginx %.2f" % (case, rl, m(case, "rl_tls", 1) / m(case, "rl_plain", 1), ng,
                          m(case, "ng_tls", 1) / m(case, "ng_plain", 1), rl / ng if ng else 0,
                          m(case, "rl_tls", 0) / m(case, "rl_plain", 0),
                          m(case, "ng_tls", 0) / m(case, "ng_plain", 0)))
    out.append("%s_rl_tls_us=%.1f %s_ng_tls_us=%.1f" % (case, rl, case, ng))
print("RESULT " + " ".join(out))
PY
