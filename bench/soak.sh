#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# bench/soak.sh: the soak of issue 31, two daemons and one Redis under load
# and a fault a minute (bench/soak.py says what, and what fails it); from a
# built tree. Options are soak.py's (--minutes N, default 60; --faults;
# --rate; --data FILE; --tap). Exit 1 if a bound was passed.
set -eu
cd "$(dirname "$0")/.."
exec python3 bench/soak.py "$@"
