#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_manpages.sh: the man pages (TAP).
#
# - each page formats with `groff -man -ww -z` without a single warning, and
#   renders with `man --warnings -l` (when man-db is installed);
# - ratelimitd.yaml(5) has an entry for every field of docs/configuration.md's
#   reference table (its lines starting with "| `", first column);
# - with $RATELIMITD (set by `make check`): ratelimitd(8) names every long
#   option of `ratelimitd --help`, and the EXAMPLE of ratelimitd.yaml(5)
#   passes `ratelimitd --check-config`.
#
# RL_SRCDIR is the source tree (default .). Without groff: 1..0 # SKIP.
set -u

src=${RL_SRCDIR:-.}
pages="man/ratelimitd.8 man/ratelimitd.yaml.5"

if ! command -v groff >/dev/null 2>&1; then
    echo "1..0 # SKIP groff not installed"
    exit 0
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

# shellcheck source=tests/integration/tap.sh
. "$src/tests/integration/tap.sh"
skip() { # skip DESCRIPTION REASON
    n=$((n + 1))
    echo "ok $n - $1 # SKIP $2"
}
diag() { # diag FILE: its lines as TAP comments
    sed 's/^/# /' "$1"
}

# 1. groff -ww: no warning at all (and an exit status of 0).
for page in $pages; do
    f=$src/$page
    if [ ! -r "$f" ]; then
        ok 1 "$page exists"
        continue
    fi
    groff -man -Tutf8 -ww -z "$f" >"$tmp/groff.err" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] && [ ! -s "$tmp/groff.err" ]
    ok $? "$page: groff -man -Tutf8 -ww -z reports no warning"
    diag "$tmp/groff.err"
done

# 2. man --warnings -l: renders, with nothing on stderr.
for page in $pages; do
    f=$src/$page
    [ -r "$f" ] || continue
    if ! command -v man >/dev/null 2>&1; then
        skip "$page: man --warnings -l renders it" "man-db not installed"
        continue
    fi
    LC_ALL=C MANWIDTH=80 man --warnings -l "$f" >"$tmp/man.out" 2>"$tmp/man.err"
    rc=$?
    [ "$rc" -eq 0 ] && [ -s "$tmp/man.out" ] && [ ! -s "$tmp/man.err" ]
    ok $? "$page: man --warnings -l renders it without a warning"
    diag "$tmp/man.err"
done

# Plain text of a page: no bold, no underline, no SGR sequences; lines long
# enough that no tag is broken.
render() { # render PAGE OUT
    groff -man -Tutf8 -rLL=200n -P-c -P-b -P-o -P-u "$src/$1" >"$2" 2>/dev/null
}

# 3. every field of docs/configuration.md's reference table has an entry in
# ratelimitd.yaml(5): a line of the rendered page that starts with the field
# (a .TP tag), alone or followed by a space.
awk '/^## /{intable = ($0 == "## Fields")} intable && /^\| `/' \
    "$src/docs/configuration.md" >"$tmp/table" 2>/dev/null
: >"$tmp/fields"
while IFS= read -r line; do
    # shellcheck disable=SC2016 # the backquotes are literal
    printf '%s\n' "$line" | grep -o '`[][a-zA-Z_.]*`' | head -n 1 | tr -d '`' >>"$tmp/fields"
done <"$tmp/table"
nfields=$(grep -c . "$tmp/fields")
[ "$nfields" -ge 10 ]
ok $? "docs/configuration.md's reference table lists fields ($nfields found)"

render man/ratelimitd.yaml.5 "$tmp/yaml5.txt"
while IFS= read -r field; do
    [ -n "$field" ] || continue
    awk -v f="$field" '
        { sub(/^[ \t]+/, "") }
        $0 == f || substr($0, 1, length(f) + 1) == f " " { found = 1 }
        END { exit !found }' "$tmp/yaml5.txt"
    ok $? "ratelimitd.yaml(5) documents $field"
done <"$tmp/fields"

# 4. with the daemon at hand: options and the example.
bin=${RATELIMITD:-}
if [ -n "$bin" ] && [ -x "$bin" ]; then
    render man/ratelimitd.8 "$tmp/rl8.txt"
    "$bin" --help 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u >"$tmp/options"
    [ -s "$tmp/options" ]
    ok $? "ratelimitd --help lists long options"
    while IFS= read -r opt; do
        grep -q -F -e "$opt" "$tmp/rl8.txt"
        ok $? "ratelimitd(8) documents $opt"
    done <"$tmp/options"

    # The EXAMPLE section's .EX block, unescaped (\- is the only escape in it).
    sed -n '/^\.SH EXAMPLE/,/^\.EE/p' "$src/man/ratelimitd.yaml.5" |
        sed '1,/^\.EX/d; /^\.EE/d; s/\\-/-/g' >"$tmp/example.yaml"
    "$bin" --check-config --config "$tmp/example.yaml" >"$tmp/check.out" 2>&1
    ok $? "the EXAMPLE of ratelimitd.yaml(5) passes ratelimitd --check-config"
    diag "$tmp/check.out"
else
    skip "ratelimitd(8) documents every option of --help" "RATELIMITD not set"
    skip "the EXAMPLE of ratelimitd.yaml(5) passes --check-config" "RATELIMITD not set"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
