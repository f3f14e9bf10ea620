#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# rss.sh [TOTAL] [KEYS]: memory over a long run. Starts a private
# redis-server and the daemon (a two-tier policy), sends TOTAL checks
# (default 1000000) over KEYS distinct keys (default 100000) with wrk in
# slices, and prints the daemon's RSS after each slice, then the median
# rate and the RSS growth from the first slice to the last.
# Needs a built tree and the Debian packages wrk and redis-server.
set -eu
cd "$(dirname "$0")/.."
TOTAL=${1:-1000000}
KEYS=${2:-100000}
command -v wrk >/dev/null || { echo "rss.sh: install wrk" >&2; exit 2; }
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port 0 --unixsocket "$dir/redis.sock" --save "" --appendonly no >"$dir/redis.log" 2>&1 &
rpid=$!
cat >"$dir/bench.yaml" <<YAML
listen: 127.0.0.1:$port
redis: {url: "unix:$dir/redis.sock", timeout: 500ms}
policies:
  bench:
    tiers:
      - {name: burst, algorithm: token_bucket, limit: 1000, window: 1s}
      - {name: hour, algorithm: sliding_window_counter, limit: 100000, window: 1h}
YAML
sleep 0.3
./ratelimitd --config "$dir/bench.yaml" >"$dir/daemon.log" 2>&1 &
dpid=$!
trap 'kill $dpid $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
i=0
until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "daemon not ready" >&2; cat "$dir/daemon.log"; exit 1; }
    sleep 0.1
done
rss() { awk '/VmRSS/ {print $2}' "/proc/$dpid/status"; }
echo "slice requests rate_per_s rss_kib"
sent=0
slice=0
: >"$dir/rates"
while [ "$sent" -lt "$TOTAL" ]; do
    slice=$((slice + 1))
    out=$(RL_KEYS=$KEYS wrk -t2 -c32 -d5s -s bench/keys.lua "http://127.0.0.1:$port" 2>&1)
    n=$(echo "$out" | awk '/requests in/ {print $1}')
    rate=$(echo "$out" | awk '/Requests\/sec/ {printf "%d", $2}')
    sent=$((sent + n))
    echo "$rate" >>"$dir/rates"
    r=$(rss)
    [ "$slice" -eq 1 ] && first=$r
    echo "$slice $sent $rate $r"
done
median=$(sort -n "$dir/rates" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "total=$sent keys=$KEYS median_rate=${median}/s rss_first=${first}KiB rss_last=${r}KiB growth=$((r - first))KiB"
