#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh: builds ratelimitd if needed and runs it in the foreground with the
# example policy (conf/ratelimitd.yaml) or yours, /check on 127.0.0.1:$PORT.
# Ctrl-C, Ctrl-\ or closing the terminal stops it and the Redis it started.
# Other arguments go to the daemon.
#
#   POLICY=FILE        the policy file (default conf/ratelimitd.yaml)
#   PORT=8080          the daemon's port on 127.0.0.1
#   BACKEND=redis      or memory: counters in the daemon, no Redis at all
#   REDIS_PORT=6379    where the throwaway redis-server (no data saved) listens
#   REDIS_URL=...      use this Redis instead, on purpose: none is started
#                      (passed as --redis-url: others on this machine can
#                      read a password in it with ps)
#   RATELIMITD=path    a built daemon: tools/build.sh is not run
#
# It never writes into a Redis it did not start unless REDIS_URL names it:
# when something already answers on REDIS_PORT, it says so and starts its
# Redis on the next port that nothing answers on. The daemon reads the
# policy file itself, with this run's port, backend and Redis given as
# --listen, --backend and --redis-url, which hold over the file's lines at
# start and on every reload: edit the file and reload (kill -HUP the
# daemon, or watch: true in the file), and its messages name the file.
# Those options, and --config, given here would undo PORT and POLICY:
# refused.
set -eu
# Paths the caller gave are the caller's: absolute before the cd.
case ${POLICY:-} in "" | /*) ;; *) POLICY=$(pwd)/$POLICY ;; esac
case ${RATELIMITD:-} in "" | /*) ;; *) RATELIMITD=$(pwd)/$RATELIMITD ;; esac
cd "$(dirname "$0")/.."
PORT=${PORT:-8080}
BACKEND=${BACKEND:-redis}
REDIS_PORT=${REDIS_PORT:-6379}
REDIS_URL=${REDIS_URL:-}
POLICY=${POLICY:-conf/ratelimitd.yaml}
for a in "$@"; do
    case $a in
    -c | --config | --config=* | --listen | --listen=* | --backend | --backend=* | \
        --redis-url | --redis-url=*)
        echo "run.sh: not $a: give POLICY=, PORT=, BACKEND=, REDIS_URL= (run.sh passes them)" >&2
        exit 64
        ;;
    esac
done
[ -r "$POLICY" ] || { echo "run.sh: cannot read the policy file $POLICY" >&2; exit 66; }
case $BACKEND in
redis | memory) ;;
*) echo "run.sh: BACKEND is redis or memory, not '$BACKEND'" >&2; exit 64 ;;
esac
if [ -n "${RATELIMITD:-}" ]; then
    bin=$RATELIMITD
else
    sh tools/build.sh >/dev/null
    bin=./ratelimitd
fi

tmp=$(mktemp -d)
redis_pid=""
daemon=""
# A terminal's hang-up reaches its whole foreground process group: this
# script, the daemon (which takes a HUP as a reload) and redis-server
# (which ignores it). Only this script's trap stops them, so a second
# signal (Ctrl-C pressed twice, the hang-up after it) must not cut the
# cleanup short.
cleanup() {
    trap '' HUP INT QUIT TERM
    [ -z "$daemon" ] || { kill -TERM "$daemon" 2>/dev/null && wait "$daemon"; } || true
    [ -z "$redis_pid" ] || { kill "$redis_pid" 2>/dev/null && wait "$redis_pid"; } || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 0' INT TERM
trap 'exit 129' HUP
trap 'exit 131' QUIT

# Starts redis-server on 127.0.0.1:$1; 0 once it answers and is ours (its
# process_id is the one started here), 1 if it exited (the port was taken).
start_redis() {
    redis-server --bind 127.0.0.1 --port "$1" --save "" --appendonly no \
        --dir "$tmp" --logfile "$tmp/redis.log" &
    redis_pid=$!
    i=0
    while [ "$i" -lt 100 ]; do
        if redis-cli -h 127.0.0.1 -p "$1" info server 2>/dev/null | tr -d '\r' |
            grep -qx "process_id:$redis_pid"; then
            return 0
        fi
        kill -0 "$redis_pid" 2>/dev/null || { wait "$redis_pid" || true; redis_pid=""; return 1; }
        i=$((i + 1))
        sleep 0.1
    done
    echo "run.sh: redis-server did not answer on 127.0.0.1:$1" >&2
    exit 1
}

url=redis://127.0.0.1:6379/0
if [ "$BACKEND" = memory ]; then
    echo "run.sh: backend: memory, no Redis"
elif [ -n "$REDIS_URL" ]; then
    url=$REDIS_URL
    echo "run.sh: using the Redis of REDIS_URL"
else
    port=$REDIS_PORT
    n=0
    while :; do
        if redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1; then
            echo "run.sh: something already answers on 127.0.0.1:$port: not ours, left alone"
        elif start_redis "$port"; then
            break
        fi
        n=$((n + 1))
        [ "$n" -lt 20 ] || { echo "run.sh: no free port for redis-server from $REDIS_PORT" >&2; exit 1; }
        port=$((port + 1))
    done
    url=redis://127.0.0.1:$port/0
    echo "run.sh: started redis-server on 127.0.0.1:$port (data not saved)"
fi

set -- --config "$POLICY" --listen "127.0.0.1:$PORT" --backend "$BACKEND" "$@"
[ "$BACKEND" = memory ] || set -- --redis-url "$url" "$@"
"$bin" --check-config "$@" >/dev/null || exit 1

# Any answer on PORT: /healthz's 200, a 404 when the policy serves it on
# admin_listen, a TLS listener's refusal of plain HTTP. Not a refused
# connection (7) nor a silence (28).
answers() {
    rc=0
    curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/healthz" || rc=$?
    [ "$rc" -ne 7 ] && [ "$rc" -ne 28 ]
}
# Something answering on PORT already is not the daemon: it will fail to
# bind there, and its own message says so.
taken=0
if answers; then taken=1; fi
"$bin" "$@" &
daemon=$!
deadline=$(($(date +%s) + 60))
until [ "$taken" = 0 ] && answers; do
    if ! kill -0 "$daemon" 2>/dev/null; then
        # 0: asked for something else (--help, --version, ...), done.
        rc=0
        wait "$daemon" || rc=$?
        daemon=""
        [ "$rc" = 0 ] || echo "run.sh: ratelimitd did not start (exit $rc)" >&2
        exit "$rc"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "run.sh: ratelimitd did not answer on 127.0.0.1:$PORT within 60 s" >&2
        exit 1
    fi
    sleep 0.1
done
echo "run.sh: ratelimitd on http://127.0.0.1:$PORT (Ctrl-C stops it)"
wait "$daemon" || { rc=$?; daemon=""; exit "$rc"; }
daemon=""
