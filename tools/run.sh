#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh: builds ratelimitd if needed and runs it in the foreground with the
# example policy (conf/ratelimitd.yaml), /check on 127.0.0.1:$PORT. Ctrl-C
# stops it and the Redis it started.
#
#   PORT=8080          the daemon's port on 127.0.0.1
#   BACKEND=redis      or memory: counters in the daemon, no Redis at all
#   REDIS_PORT=6379    where the throwaway redis-server (no data saved) listens
#   REDIS_URL=...      use this Redis instead, on purpose: none is started
#   RATELIMITD=path    a built daemon: tools/build.sh is not run
#
# It never writes into a Redis it did not start unless REDIS_URL names it:
# when something already answers on REDIS_PORT, it says so and starts its
# Redis on the next port that nothing answers on. The daemon has no option
# for its listen address or Redis URL, so those go into a copy of the
# example policy in a temporary directory.
set -eu
cd "$(dirname "$0")/.."
PORT=${PORT:-8080}
BACKEND=${BACKEND:-redis}
REDIS_PORT=${REDIS_PORT:-6379}
REDIS_URL=${REDIS_URL:-}
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
cleanup() {
    [ -z "$daemon" ] || { kill -TERM "$daemon" 2>/dev/null && wait "$daemon"; } || true
    [ -z "$redis_pid" ] || { kill "$redis_pid" 2>/dev/null && wait "$redis_pid"; } || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

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

# The example policy with this run's port, backend and Redis; each line
# must be there as written, or this script is out of date.
esc=$(printf '%s' "$url" | sed 's/[\\|&]/\\&/g')
sed -e "s|^listen: 127\.0\.0\.1:8080\$|listen: 127.0.0.1:$PORT|" \
    -e "s|^backend: redis\$|backend: $BACKEND|" \
    -e "s|^  url: redis://127\.0\.0\.1:6379/0\$|  url: $esc|" \
    conf/ratelimitd.yaml >"$tmp/ratelimitd.yaml"
for line in "listen: 127.0.0.1:$PORT" "backend: $BACKEND" "  url: $url"; do
    grep -qxF "$line" "$tmp/ratelimitd.yaml" || {
        echo "run.sh: conf/ratelimitd.yaml has no line for '$line'" >&2
        exit 1
    }
done
echo "run.sh: ratelimitd on http://127.0.0.1:$PORT (Ctrl-C stops it)"
"$bin" --config "$tmp/ratelimitd.yaml" "$@" &
daemon=$!
wait "$daemon" || { rc=$?; daemon=""; exit "$rc"; }
daemon=""
