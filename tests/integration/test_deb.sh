#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_deb.sh: the Debian package installed the way a user installs it
# (TAP). Into a fresh bookworm root (tools/rootfs.sh: mmdebstrap minbase,
# Debian's archive only), chrooted: `apt-get install ./ratelimitd_*.deb`,
# which fetches its Depends from the archive; then the installed files, the
# conffile, the system user, the unit and its socket enabled, `ratelimitd --version` and
# `-t` of the installed policy file, its state_file in /var/lib/ratelimitd
# (the service user's, 0700); the daemon run as user ratelimitd with
# `backend: memory` on a free loopback port, answering POST /check (allowed,
# allowed, then denied), exiting 0 on SIGTERM with its state file written
# (0600), and denying at once when started again; `dpkg --purge` removing
# the binary, the unit, /etc/ratelimitd and /var/lib/ratelimitd, while the system user stays
# (Debian policy: files it owned may remain anywhere). Then the module's
# package, ratelimitd-redis-module (beside DEB), on its own with
# bookworm's redis-server: the .so and its RedisModule_OnLoad, loaded and
# deciding, purged.
#
# Needs root (chroot, mount) and mmdebstrap (for a root that is not cached
# yet); without them: 1..0 # SKIP. tools/test.sh runs it after
# tools/package.sh.
# Usage: sh tests/integration/test_deb.sh DEB   (RL_SRCDIR: the source tree)
set -u
src=${RL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
deb=${1:?usage: test_deb.sh ratelimitd_VERSION_ARCH.deb}

if [ "$(id -u)" -ne 0 ]; then
    echo "1..0 # SKIP not root: chroot and mount need it"
    exit 0
fi
if ! command -v mmdebstrap >/dev/null 2>&1 &&
    [ ! -s "${RL_ROOTFS_CACHE:-/var/cache/ratelimitd-ci}/bookworm-minbase.tar" ]; then
    echo "1..0 # SKIP mmdebstrap not installed (apt-get install mmdebstrap)"
    exit 0
fi

# shellcheck source=tests/integration/tap.sh
. "$src/tests/integration/tap.sh"
diag() { # diag FILE: its last lines as TAP comments
    tail -n 20 "$1" | sed 's/^/# /'
}

root=$(mktemp -d /tmp/rl-deb-root.XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
    for m in "$root/dev" "$root/proc"; do
        mountpoint -q "$m" && umount -l "$m"
    done
    # Never delete through a mount that is still there.
    if mountpoint -q "$root/dev" || mountpoint -q "$root/proc"; then
        echo "# $root: still mounted, left in place"
    else
        rm -rf "$root"
    fi
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
in_root() { # in_root COMMAND...: run COMMAND chrooted into the root
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"
}

version=$(basename "$deb" | sed -n 's/^ratelimitd_\([^_]*\)_.*\.deb$/\1/p')
tar=$(sh "$src/tools/rootfs.sh") && tar -C "$root" -xf "$tar"
ok $? "a fresh bookworm minbase root from tools/rootfs.sh"
cp "$deb" "$root/tmp/" && cp /etc/resolv.conf "$root/etc/resolv.conf" &&
    mount --bind /dev "$root/dev" && mount -t proc proc "$root/proc"
ok $? "the .deb copied in; /dev and /proc mounted"

# 1. apt-get install ./ratelimitd_*.deb: the Depends come from the archive.
log=$root/tmp/apt.log
in_root sh -c 'apt-get update -qq && cd /tmp &&
    apt-get install -y -q --no-install-recommends ./ratelimitd_*.deb' >"$log" 2>&1
rc=$?
ok $rc "apt-get install ./$(basename "$deb") in the root"
[ "$rc" -eq 0 ] || diag "$log"
# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
[ "$(in_root dpkg-query -W -f='${Status} ${Version}' ratelimitd)" = "install ok installed $version" ]
ok $? "dpkg says ratelimitd $version is installed"

# 2. What the package put where.
for f in /usr/sbin/ratelimitd /lib/systemd/system/ratelimitd.service \
    /lib/systemd/system/ratelimitd.socket /usr/share/man/man8/ratelimitd.8.gz /usr/share/man/man5/ratelimitd.yaml.5.gz \
    /usr/share/doc/ratelimitd/examples/ratelimitd.yaml \
    /usr/share/doc/ratelimitd/examples/redis-cluster.yaml \
    /usr/share/doc/ratelimitd/copyright /usr/lib/sysusers.d/ratelimitd.conf; do
    [ -f "$root$f" ]
    ok $? "installed: $f"
done
# shellcheck disable=SC2016
in_root dpkg-query -W -f='${Conffiles}\n' ratelimitd | grep -q '^ /etc/ratelimitd/ratelimitd.yaml '
ok $? "/etc/ratelimitd/ratelimitd.yaml is a conffile"
grep -q '^ExecStart=/usr/sbin/ratelimitd --config /etc/ratelimitd/ratelimitd.yaml$' \
    "$root/lib/systemd/system/ratelimitd.service"
ok $? "the unit runs /usr/sbin/ratelimitd with /etc/ratelimitd/ratelimitd.yaml"
[ -L "$root/etc/systemd/system/multi-user.target.wants/ratelimitd.service" ]
ok $? "the unit is enabled (multi-user.target.wants)"
[ -L "$root/etc/systemd/system/sockets.target.wants/ratelimitd.socket" ]
ok $? "its socket is enabled (sockets.target.wants): a restart refuses no connection"
user=$(in_root getent passwd ratelimitd)
uid=$(echo "$user" | cut -d: -f3)
[ -n "$uid" ] && [ "$uid" -lt 1000 ] && [ "$(echo "$user" | cut -d: -f7)" = /usr/sbin/nologin ] &&
    in_root getent group ratelimitd >/dev/null
ok $? "system user and group ratelimitd (uid ${uid:-none} < 1000, no login shell)"

# 3. The installed binary.
out=$(in_root ratelimitd --version)
echo "$out" | grep -Eq "^ratelimitd $version \\(commit [0-9a-z-]+; features [a-z,]+\\)$"
ok $? "ratelimitd --version: $out"
# -t takes no file (as nginx's): -c names it; without -c, the compiled-in
# default must be the packaged file.
for args in "-t -c /etc/ratelimitd/ratelimitd.yaml" "-t"; do
    # shellcheck disable=SC2086
    in_root ratelimitd $args >"$root/tmp/t.log" 2>&1
    rc=$?
    ok $rc "ratelimitd $args: the packaged policy file is valid"
    [ "$rc" -eq 0 ] || diag "$root/tmp/t.log"
done

grep -q '^state_file: /var/lib/ratelimitd/state$' "$root/etc/ratelimitd/ratelimitd.yaml"
ok $? "the packaged policy file keeps the in-memory counters in /var/lib/ratelimitd/state"
perm=$(in_root stat -c '%U:%G %a' /var/lib/ratelimitd 2>&1)
[ "$perm" = "ratelimitd:ratelimitd 700" ]
ok $? "/var/lib/ratelimitd made for the service user alone (got $perm)"

# 4. The daemon as user ratelimitd, backend: memory, on a free port.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$root/tmp/memory.yaml" <<YAML
listen: 127.0.0.1:$port
backend: memory
state_file: /var/lib/ratelimitd/state
policies:
  api:
    tiers: [{name: hour, algorithm: fixed_window, limit: 2, window: 1h}]
YAML
chmod 644 "$root/tmp/memory.yaml"
start_daemon() { # as user ratelimitd, in the background ($pid); 0 once /healthz answers
    chroot "$root" setpriv --reuid=ratelimitd --regid=ratelimitd --init-groups \
        ratelimitd --config /tmp/memory.yaml >>"$root/tmp/daemon.log" 2>&1 &
    pid=$!
    i=0
    until curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" || [ "$i" -ge 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ "$i" -lt 100 ]
}
start_daemon
ok $? "the daemon answers /healthz on 127.0.0.1:$port"
[ "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" = "$uid" ]
ok $? "it runs as user ratelimitd (uid $uid)"
codes=""
for _ in 1 2 3; do
    codes="$codes $(curl -s -o /dev/null -w '%{http_code}' -X POST \
        "http://127.0.0.1:$port/check" -d '{"policy":"api","key":"k"}')"
done
[ "$codes" = " 200 200 429" ]
ok $? "POST /check with a limit of 2: allowed, allowed, denied (got$codes)"
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
ok $rc "exit status 0 on SIGTERM"
[ "$rc" -eq 0 ] || diag "$root/tmp/daemon.log"
perm=$(in_root stat -c '%U %a' /var/lib/ratelimitd/state 2>&1)
[ "$perm" = "ratelimitd 600" ]
ok $? "the state file written at the stop, the service user's, mode 0600 (got $perm)"
start_daemon
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$port/check" \
    -d '{"policy":"api","key":"k"}')
[ "$code" = 429 ]
ok $? "started again, the key's count is kept: denied (got $code)"
kill -TERM "$pid"
wait "$pid"
pid=""

# 5. Purge: everything but the system user goes.
in_root dpkg --purge ratelimitd >"$root/tmp/purge.log" 2>&1
rc=$?
ok $rc "dpkg --purge ratelimitd"
[ "$rc" -eq 0 ] || diag "$root/tmp/purge.log"
for f in /usr/sbin/ratelimitd /etc/ratelimitd /lib/systemd/system/ratelimitd.service \
    /lib/systemd/system/ratelimitd.socket /etc/systemd/system/sockets.target.wants/ratelimitd.socket \
    /etc/systemd/system/multi-user.target.wants/ratelimitd.service /usr/share/doc/ratelimitd \
    /usr/lib/sysusers.d/ratelimitd.conf /var/lib/ratelimitd; do
    [ ! -e "$root$f" ] && [ ! -L "$root$f" ]
    ok $? "purged: $f"
done
in_root getent passwd ratelimitd >/dev/null
ok $? "the system user stays after the purge (Debian policy 9.2.2: never removed)"

# 6. The module's package on a Redis host without the daemon: with
# bookworm's redis-server (not started by its postinst: policy-rc.d), the
# .so where dpkg says, exporting RedisModule_OnLoad, loaded by redis-server
# running as user redis, deciding; then purged.
cp "$(dirname "$deb")"/ratelimitd-redis-module_"$version"_*.deb "$root/tmp/"
ok $? "the module's .deb beside $(basename "$deb") copied in"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 755 "$root/usr/sbin/policy-rc.d"
in_root sh -c 'cd /tmp && apt-get install -y -q --no-install-recommends \
    ./ratelimitd-redis-module_*.deb redis-server' >"$log" 2>&1
rc=$?
ok $rc "apt-get install ./ratelimitd-redis-module_*.deb redis-server"
[ "$rc" -eq 0 ] || diag "$log"
# shellcheck disable=SC2016
[ "$(in_root dpkg-query -W -f='${Status}' ratelimitd 2>/dev/null)" != "install ok installed" ]
ok $? "the module's package does not bring the daemon's"
so=$(in_root dpkg -L ratelimitd-redis-module | grep '/ratelimitd/ratelimitd\.so$')
case $so in
/usr/lib/*/ratelimitd/ratelimitd.so) [ -f "$root$so" ] ;;
*) false ;;
esac
ok $? "installed: ${so:-no ratelimitd.so}"
readelf -W --dyn-syms "$root$so" 2>/dev/null | grep -Eq ' GLOBAL +DEFAULT +[0-9]+ RedisModule_OnLoad$'
ok $? "it exports RedisModule_OnLoad"
sock=/tmp/rl-module.sock
chroot "$root" setpriv --reuid=redis --regid=redis --init-groups redis-server --port 0 \
    --unixsocket "$sock" --save '' --appendonly no --dir /tmp --loadmodule "$so" \
    >"$root/tmp/redis.log" 2>&1 &
pid=$!
i=0
until in_root redis-cli -s "$sock" PING 2>/dev/null | grep -q PONG || [ "$i" -ge 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
ok "$([ "$i" -lt 100 ]; echo $?)" "bookworm's redis-server with loadmodule $so answers"
[ "$i" -lt 100 ] || diag "$root/tmp/redis.log"
in_root redis-cli -s "$sock" MODULE LIST | grep -qx ratelimitd
ok $? "MODULE LIST names ratelimitd"
got=""
for _ in 1 2 3; do
    got="$got $(in_root redis-cli -s "$sock" ratelimitd.check 1 k 1700000000000000 0 1 \
        '0 fixed_window 2 3600000000 0 0' | sed -n 2p)"
done
[ "$got" = " 1 1 0" ]
ok $? "ratelimitd.check with a limit of 2: allowed, allowed, denied (got$got)"
kill -TERM "$pid"
wait "$pid"
pid=""
in_root dpkg --purge ratelimitd-redis-module >"$root/tmp/purge.log" 2>&1 && [ ! -e "$root$so" ]
ok $? "dpkg --purge ratelimitd-redis-module removes ${so:-the module}"

echo "1..$n"
[ "$failed" -eq 0 ]
