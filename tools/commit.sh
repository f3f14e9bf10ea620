#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# commit.sh: prints the commit a build of SRCDIR comes from, for
# `ratelimitd --version` and ratelimitd_build_info{commit}: git's short hash
# when SRCDIR is a git checkout (with "-dirty" when tracked files differ
# from it), else the SRCDIR/.commit that `make dist` writes into the tarball
# (a build from a release tarball knows its commit too), else "unknown".
# Usage: sh tools/commit.sh SRCDIR
set -eu
src=${1:-.}
if [ -e "$src/.git" ] && command -v git >/dev/null 2>&1 &&
    hash=$(git -C "$src" rev-parse --short HEAD 2>/dev/null); then
    # Only tracked files: the build's own outputs in an in-tree build are
    # untracked and say nothing about the source.
    git -C "$src" diff --quiet HEAD -- 2>/dev/null || hash="$hash-dirty"
    echo "$hash"
elif [ -s "$src/.commit" ]; then
    # The first word only: the file is ours, but a label value must stay one
    # token.
    head -n 1 "$src/.commit" | tr -cd '0-9a-zA-Z-'
    echo
else
    echo unknown
fi
