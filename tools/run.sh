#!/bin/sh
# run.sh: builds ratelimitd if needed and runs it in the foreground with the
# example policy (conf/ratelimitd.yaml) against Redis on 127.0.0.1:6379,
# starting a throwaway redis-server there if none answers. Ctrl-C stops both.
set -eu
cd "$(dirname "$0")/.."
sh tools/build.sh >/dev/null
redis_pid=""
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "run.sh: no Redis on 127.0.0.1:6379, starting one (data not saved)"
    redis-server --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null &
    redis_pid=$!
    i=0
    until redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; do
        i=$((i + 1))
        [ "$i" -lt 100 ] || { echo "run.sh: redis-server did not start" >&2; exit 1; }
        sleep 0.1
    done
fi
cleanup() { [ -z "$redis_pid" ] || kill "$redis_pid" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
./ratelimitd --config conf/ratelimitd.yaml "$@" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon; cleanup; exit 0' INT TERM
wait $daemon
