#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# build.sh: installs what is missing, then configures (once) and builds in
# the source tree, warnings as errors.
set -eu
cd "$(dirname "$0")/.."
sh tools/deps.sh
[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure --enable-werror
make -j"$(nproc)"
