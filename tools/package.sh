#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# package.sh: builds the Debian package from the distributed tree (a
# `make distdir` copy, or the release tarball given), so that a file
# missing from the tarball fails here too; runs lintian on the .deb and the
# .changes (any error or warning fails); copies the .deb, .changes and
# .buildinfo into OUTDIR and prints the .deb's path (alone on stdout).
#
# Installs what it is missing with apt-get (needs root then): the packaging
# tools (debhelper, dpkg-dev, fakeroot, lintian) and debian/control's
# Build-Depends (`apt-get satisfy`), and says which.
#
# dpkg-buildpackage runs the unit tests (dh_auto_test; the integration
# tests are tools/test.sh's); DEB_BUILD_OPTIONS=nocheck skips them.
#
# Usage: sh tools/package.sh [OUTDIR [TARBALL]]   (OUTDIR default: pkg/)
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
out=${1:-$top/pkg}
tarball=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
missing=""
for p in debhelper dpkg-dev fakeroot lintian; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "package.sh: installing:$missing"
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "$tarball" ]; then
    tar -C "$work" -xzf "$tarball"
else
    [ -f Makefile ] || sh tools/build.sh
    version=$(sed -n 's/^AC_INIT(\[ratelimitd\], \[\([^]]*\)\].*/\1/p' configure.ac)
    make distdir distdir="$work/ratelimitd-$version" >/dev/null
fi
set -- "$work"/ratelimitd-*/
tree=$1
[ -d "$tree/debian" ] || {
    echo "package.sh: $tree has no debian/ (not in EXTRA_DIST?)" >&2
    exit 1
}

# Build-Depends, one line, for `apt-get satisfy` (which installs only what
# is missing).
deps=$(awk '/^Build-Depends:/ {on = 1; sub(/^Build-Depends:/, "")}
    on && /^[^ ]/ && !/^Build-Depends:/ && NR > 1 && seen {on = 0}
    on {printf "%s", $0; seen = 1}' "$tree/debian/control")
if ! (cd "$tree" && dpkg-checkbuilddeps >/dev/null 2>&1); then
    echo "package.sh: installing Build-Depends: $deps"
    $SUDO apt-get update -qq
    $SUDO apt-get satisfy -y -qq --no-install-recommends "$deps"
fi

# The build's and lintian's words on stderr: stdout is the .deb's path.
(cd "$tree" && DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:+$DEB_BUILD_OPTIONS }parallel=$(nproc)" \
    dpkg-buildpackage -us -uc -b) >&2

# Errors and warnings fail; info tags are shown (overrides need a comment
# in debian/ratelimitd.lintian-overrides saying why).
echo "package.sh: lintian $(cd "$work" && echo ./*.changes)" >&2
lintian --fail-on error,warning --display-info "$work"/*.changes >&2

cp "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out"/
set -- "$work"/ratelimitd_*.deb
echo "$out/$(basename "$1")"
