#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh: builds ratelimitd if needed and runs it in the foreground with the
# example policy (conf/ratelimitd.yaml) or yours, /check on 127.0.0.1:$PORT.
# Ctrl-C stops it and the Redis it started. Other arguments go to the daemon.
#
#   POLICY=FILE        the policy file (default conf/ratelimitd.yaml)
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
# policy file in a temporary directory (its top-level listen and backend
# lines and the url line of its redis section replaced, or added): a
# --config argument would bypass them, and is refused.
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
    -c | --config | --config=*)
        echo "run.sh: give the policy file as POLICY=FILE (run.sh puts its port and Redis in a copy)" >&2
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

# The policy with this run's port, backend and Redis: each top-level line
# replaced where the file has it, added where it has none.
cfg=$tmp/ratelimitd.yaml
esc=$(printf '%s' "$url" | sed 's/[\\|&]/\\&/g')
sed -e "s|^listen:.*|listen: 127.0.0.1:$PORT|" -e "s|^backend:.*|backend: $BACKEND|" \
    "$POLICY" >"$cfg"
grep -q '^listen:' "$cfg" || printf 'listen: 127.0.0.1:%s\n' "$PORT" >>"$cfg"
grep -q '^backend:' "$cfg" || printf 'backend: %s\n' "$BACKEND" >>"$cfg"
if [ "$BACKEND" = redis ]; then
    if ! grep -q '^redis:' "$cfg"; then
        printf 'redis:\n  url: %s\n' "$url" >>"$cfg"
    elif sed -n '/^redis:/,/^[^ #]/p' "$cfg" | grep -q '^  url:'; then
        # Only the url of the redis section (the block up to the next
        # top-level key), not another section's.
        sed -i "/^redis:/,/^[^ #]/ s|^  url:.*|  url: $esc|" "$cfg"
    else
        sed -i "s|^redis:[[:space:]]*\$|redis:\n  url: $esc|" "$cfg"
    fi
fi
for line in "listen: 127.0.0.1:$PORT" "backend: $BACKEND"; do
    grep -qxF "$line" "$cfg" || { echo "run.sh: cannot set '$line' in a copy of $POLICY" >&2; exit 1; }
done
if [ "$BACKEND" = redis ] && ! grep -qxF "  url: $url" "$cfg"; then
    echo "run.sh: cannot set redis.url in a copy of $POLICY (a redis: section in flow style?)" >&2
    exit 1
fi
"$bin" --check-config --config "$cfg" >/dev/null || exit 1
echo "run.sh: ratelimitd on http://127.0.0.1:$PORT (Ctrl-C stops it)"
"$bin" --config "$cfg" "$@" &
daemon=$!
wait "$daemon" || { rc=$?; daemon=""; exit "$rc"; }
daemon=""
