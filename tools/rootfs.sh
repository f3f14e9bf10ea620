#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# rootfs.sh: prints the path of a minimal Debian bookworm root as a tarball
# (mmdebstrap --variant=minbase, from Debian's archive only), made once and
# reused while younger than a day. The package test installs the .deb into
# a copy of it; the image build imports it as debian:bookworm-slim when no
# registry is reachable. The same suites as this machine's (bookworm,
# bookworm-updates, bookworm-security), so that the libraries the binary
# was built against can be installed inside. (mmdebstrap picks the
# format from the name: the file it writes must end in .tar.)
# Usage: sh tools/rootfs.sh   (cache: $RL_ROOTFS_CACHE, default
# /var/cache/ratelimitd-ci)
set -eu
cache=${RL_ROOTFS_CACHE:-/var/cache/ratelimitd-ci}
tar="$cache/bookworm-minbase.tar"
mkdir -p "$cache"
if [ -s "$tar" ] && [ -n "$(find "$tar" -mmin -1440 2>/dev/null)" ]; then
    echo "$tar"
    exit 0
fi
command -v mmdebstrap >/dev/null || {
    echo "rootfs.sh: mmdebstrap is not installed (apt-get install mmdebstrap)" >&2
    exit 1
}
mirror=http://deb.debian.org/debian
mmdebstrap --variant=minbase --quiet bookworm "$cache/bookworm-minbase.new.tar" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" >&2
mv "$cache/bookworm-minbase.new.tar" "$tar"
echo "$tar"
