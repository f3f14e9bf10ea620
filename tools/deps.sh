#!/bin/sh
# deps.sh: installs the Debian packages that building, running and testing
# ratelimitd need, when any is missing. Needs root (or sudo) only then.
# redis-server, redis-tools (redis-cli: the cluster tests and bench/cluster.sh
# make clusters with it) and redis-sentinel run the real deployments that
# the integration tests start.
set -eu
PACKAGES="build-essential autoconf automake pkg-config libevent-dev libhiredis-dev \
libjansson-dev libyaml-dev libhttp-parser-dev libssl-dev openssl libsystemd-dev redis-server redis-tools redis-sentinel python3 curl \
groff-base man-db clang clang-format libclang-rt-14-dev valgrind nginx caddy \
libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler python3-grpcio python3-grpc-tools \
python3-protobuf nghttp2-client python3-yaml"
missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps.sh: installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
