#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# deps.sh: installs the Debian packages that are missing, in three lists:
#   sh tools/deps.sh           build + run: what tools/build.sh and
#                              tools/run.sh need (the README's first command)
#   sh tools/deps.sh --build   build only (the image's build stage)
#   sh tools/deps.sh --test    build + run + test: what tools/test.sh needs
# --list prints the chosen packages, one a line, and installs nothing.
# Needs root (or sudo) only when something is missing.
#
# No service starts during the install (a policy-rc.d that refuses, unless
# the machine has one already), and the services of the packages installed
# here are disabled afterwards: nginx and caddy would serve :80, podman its
# API socket, redis-server 6379 at the next boot. Only their programs are
# wanted; the tests start their own servers on loopback.
set -eu

# Each list: one package a line, a comment on why. Append to the test list
# when a test needs a new tool.
build_packages() {
    sed 's/#.*//' <<'LIST'
gcc                   # the compiler (build-essential would add g++ and dpkg-dev)
libc6-dev
make
autoconf              # autoreconf -fi
automake
pkg-config            # configure finds the libraries with it
libevent-dev
libhiredis-dev
libjansson-dev
libyaml-dev
libhttp-parser-dev
libssl-dev
libsystemd-dev        # sd_notify (--with-systemd)
libnghttp2-dev        # the gRPC front
libprotobuf-c-dev
protobuf-c-compiler   # protoc-c makes the messages from proto/ at build time
LIST
}

# Runtime for tools/run.sh: the example policy has backend: redis, so run.sh
# starts a throwaway redis-server (not the service: see above); redis-cli
# (redis-tools, a dependency) asks whether a port already answers. curl asks
# the daemon, as the README's examples do. No other server.
run_packages() {
    sed 's/#.*//' <<'LIST'
redis-server
curl
tzdata                # /usr/share/zoneinfo: calendar tiers' time zones
LIST
}

test_packages() {
    sed 's/#.*//' <<'LIST'
python3               # the integration tests' harness
redis-tools           # redis-cli: the cluster tests make clusters with it
redis-sentinel        # test_sentinel.py
openssl               # test_tls.py makes its certificates
python3-yaml          # parses YAML files the tests check (compose.yaml, ...)
python3-jsonschema    # every HTTP answer held against docs/openapi.yaml
python3-grpcio        # test_grpc.py, test_rls_grpc.py: a real gRPC client
python3-grpc-tools
python3-protobuf
groff-base            # test_manpages.sh
man-db
clang                 # the fuzzing build
libclang-rt-14-dev
clang-format          # tools/test.sh's format check
valgrind              # tools/valgrind.sh
nginx                 # test_gateways.py: auth_request in front of the daemon
caddy                 # test_gateways.py: forward_auth
nghttp2-client        # h2load, for bench/grpc.sh
podman                # test_image.sh builds the image (--isolation=chroot)
mmdebstrap            # tools/rootfs.sh: the base image with no registry
curl                  # test_deb.sh asks the packaged daemon
jq                    # docs/recipes.md's "Find who is being limited" session
debhelper             # tools/package.sh: the .deb (dh, dh-autoreconf)
dpkg-dev
fakeroot
lintian               # tools/package.sh: no error, no warning
prometheus            # promtool: test_monitoring.py (the server never starts)
chromium              # test_status_page.py: the status page in a real browser
chromium-driver       # ... driven through WebDriver
python3-selenium
faketime              # test_calendar.py: the daemon and redis-server at a chosen date
systemd               # systemd-socket-activate: test_socket_activation.py; systemd-analyze: test_systemd.py
LIST
}

mode=run
list=0
for arg in "$@"; do
    case $arg in
    --build) mode=build ;;
    --test) mode="test" ;;
    --list) list=1 ;;
    *) echo "usage: deps.sh [--build | --test] [--list]" >&2; exit 64 ;;
    esac
done
case $mode in
build) PACKAGES=$(build_packages) ;;
run) PACKAGES="$(build_packages) $(run_packages)" ;;
test) PACKAGES="$(build_packages) $(run_packages) $(test_packages)" ;;
esac
if [ "$list" -eq 1 ]; then
    # shellcheck disable=SC2086
    printf '%s\n' $PACKAGES
    exit 0
fi

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps.sh: installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    # 101: "action forbidden", invoke-rc.d and deb-systemd-invoke start nothing.
    printf '#!/bin/sh\n# deps.sh: no service starts while it installs\nexit 101\n' |
        $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
fi
before=$(mktemp)
dpkg-query -W -f='${Package}\n' | sort >"$before"
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
# The units every package just installed enabled (those named and their
# dependencies: nginx's unit is nginx-common's): disabled, so that a reboot
# starts none.
new=$(dpkg-query -W -f='${Package}\n' | sort | comm -13 "$before" -)
rm -f "$before"
units=""
for p in $new; do
    units="$units $(dpkg-query -L "$p" 2>/dev/null |
        grep -E '^(/usr)?/lib/systemd/system/[^/]+\.(service|socket)$' | xargs -r -n1 basename || true)"
done
if command -v systemctl >/dev/null && [ -n "$(echo "$units" | tr -d ' ')" ]; then
    # shellcheck disable=SC2086
    $SUDO systemctl disable --quiet $units 2>/dev/null || true
fi
