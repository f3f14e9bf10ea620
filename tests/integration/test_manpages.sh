#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_manpages.sh: the man pages (TAP), as make makes them from man/*.in.
#
# - each page formats with `groff -man -ww -z` without a single warning, and
#   renders with `man --warnings -l` (when man-db is installed);
# - no alternating-font macro (.BR, .RB, .BI, ...) runs words together
#   (".BR x ); otherwise" renders "x);otherwise", which groff does not warn
#   of): a word, ";", "," or ")" then a word, but for an italic placeholder
#   beside a literal;
# - ratelimitd.yaml(5) has an entry for every field of docs/configuration.md's
#   reference table (its lines starting with "| `", first column);
# - ratelimitd(8)'s list of error codes (between the "errors:" marks) is
#   exactly docs/openapi.yaml's ErrorCode enum, the list every answer of the
#   integration tests is held to;
# - with $RATELIMITD (set by `make check`): both pages' .TH name the version
#   of `ratelimitd --version`, and their FILES the default policy file of
#   `ratelimitd --help`; ratelimitd(8)'s SYNOPSIS and OPTIONS and
#   docs/operations.md's synopsis name every option of `ratelimitd --help`
#   and no other, and the daemon accepts each one; the EXAMPLE of
#   ratelimitd.yaml(5) passes `ratelimitd --check-config`.
#
# RL_SRCDIR is the source tree, RL_BUILDDIR the build tree with the pages
# (both default to .). Without groff: 1..0 # SKIP.
set -u

src=${RL_SRCDIR:-.}
build=${RL_BUILDDIR:-.}
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
    f=$build/$page
    if [ ! -r "$f" ]; then
        ok 1 "$page exists (make makes it)"
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
    f=$build/$page
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

# 2b. words run together by an alternating-font macro, which joins its
# arguments with no space: each such line, as FILE:LINE: text.
runon() { # runon PAGE
    awk '
    function plain(s) {
        gsub(/\\f(\[[^]]*\]|\(..|.)/, "", s)
        gsub(/\\[&c]/, "", s)
        gsub(/\\\(dq/, "\"", s); gsub(/\\\(aq/, "'"'"'", s)
        gsub(/\\[-e]/, "-", s); gsub(/\\[~ ]/, " ", s); gsub(/\\\(../, "*", s)
        return s
    }
    /^\.(BR|RB|BI|IB|IR|RI)[ \t]/ {
        rest = substr($0, 4); n = 0; i = 1; len = length(rest)
        while (i <= len) {
            while (i <= len && substr(rest, i, 1) ~ /[ \t]/) i++
            if (i > len) break
            arg = ""
            if (substr(rest, i, 1) == "\"") {
                for (i++; i <= len; i++) {
                    c = substr(rest, i, 1)
                    if (c == "\"" && substr(rest, i + 1, 1) == "\"") { arg = arg c; i++; continue }
                    if (c == "\"") { i++; break }
                    arg = arg c
                }
            } else {
                for (; i <= len && substr(rest, i, 1) !~ /[ \t]/; i++) {
                    if (substr(rest, i, 2) == "\\\"") { i = len + 1; break }
                    arg = arg substr(rest, i, 1)
                }
            }
            args[++n] = plain(arg)
        }
        # An italic placeholder may abut a literal word: key_prefix reset.
        italic = substr($0, 2, 2) ~ /I/
        for (k = 1; k < n; k++) {
            last = substr(args[k], length(args[k]), 1)
            if (substr(args[k + 1], 1, 1) ~ /[A-Za-z0-9]/ &&
                (last ~ /[;,)]/ || (!italic && last ~ /[A-Za-z0-9]/))) {
                printf "%s:%d: %s\n", FILENAME, FNR, $0
                break
            }
        }
    }' "$build/$1"
}
for page in $pages; do
    [ -r "$build/$page" ] || continue
    runon "$page" >"$tmp/runon"
    [ ! -s "$tmp/runon" ]
    ok $? "$page: no macro runs words together"
    diag "$tmp/runon"
done

# Plain text of a page: no bold, no underline, no SGR sequences; lines long
# enough that no tag is broken.
render() { # render PAGE OUT
    groff -man -Tutf8 -rLL=200n -P-c -P-b -P-o -P-u "$build/$1" >"$2" 2>/dev/null
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

# 4. ratelimitd(8)'s error codes: the tags of the .TP entries between its
# "errors:" marks, against docs/openapi.yaml's ErrorCode enum.
awk '/^\.\\" errors: begin/ { on = 1 } /^\.\\" errors: end/ { on = 0 }
     on && tp && /^\.BR? / { print $2 } { tp = on && $0 == ".TP" }' \
    "$build/man/ratelimitd.8" | sort >"$tmp/codes.man"
awk '/^    ErrorCode:$/ { on = 1; next }
     on && /^        - / { print $2; next }
     on && !/^      enum:$/ { exit }' "$src/docs/openapi.yaml" | sort >"$tmp/codes.api"
[ "$(grep -c . "$tmp/codes.api")" -ge 20 ]
ok $? "docs/openapi.yaml's ErrorCode enum lists codes ($(grep -c . "$tmp/codes.api"))"
comm -13 "$tmp/codes.man" "$tmp/codes.api" >"$tmp/codes.missing"
[ ! -s "$tmp/codes.missing" ]
ok $? "ratelimitd(8) lists every error code of docs/openapi.yaml"
diag "$tmp/codes.missing"
comm -23 "$tmp/codes.man" "$tmp/codes.api" >"$tmp/codes.extra"
[ ! -s "$tmp/codes.extra" ]
ok $? "ratelimitd(8) lists no error code that docs/openapi.yaml lacks"
diag "$tmp/codes.extra"

# The options a text names: each -x or --word not inside a word.
named_options() { # named_options FILE
    grep -oE -- '(^|[^A-Za-z0-9-])--?[A-Za-z][A-Za-z-]*' "$1" | sed 's/^[^-]*//' | sort -u
}
# Whether FILE names the option OPT (not as part of a longer one).
names_option() { # names_option FILE OPT
    grep -qE -e "(^|[^A-Za-z0-9-])$2([^A-Za-z0-9-]|\$)" "$1"
}
# Each option a text names is one of --help's (known is every short and
# long of $tmp/options, one a line).
only_known() { # only_known FILE WHAT
    named_options "$1" | grep -vxF -f "$tmp/known" >"$tmp/unknown"
    [ ! -s "$tmp/unknown" ]
    ok $? "$2 names no option that ratelimitd --help lacks"
    diag "$tmp/unknown"
}

# 5. with the daemon at hand: version, paths, options and the example.
bin=${RATELIMITD:-}
if [ -n "$bin" ] && [ -x "$bin" ]; then
    render man/ratelimitd.8 "$tmp/rl8.txt"
    render man/ratelimitd.yaml.5 "$tmp/yaml5.txt"

    version=$("$bin" --version | awk '{ print $2 }')
    for page in $pages; do
        grep -q "^\.TH [^ ]* [0-9] [0-9-]* \"ratelimitd $version\" " "$build/$page"
        ok $? "$page: .TH says ratelimitd $version, as ratelimitd --version"
    done
    default=$("$bin" --help | sed -n 's/.*policy file (default \(.*\))$/\1/p')
    [ -n "$default" ]
    ok $? "ratelimitd --help names the default policy file ($default)"
    sed -n '/^FILES$/,/^[A-Z]/p' "$tmp/rl8.txt" | sed -n 2p | grep -qxF "       $default"
    ok $? "ratelimitd(8)'s FILES starts with $default"
    sed -n '/^SYNOPSIS$/,/^[A-Z]/p' "$tmp/yaml5.txt" | grep -qF "$default"
    ok $? "ratelimitd.yaml(5)'s SYNOPSIS names $default"

    # --help's options, one "SHORT LONG" a line ("-" for no short form).
    "$bin" --help | sed -n 's/^  \(-[A-Za-z]\), \(--[a-z][a-z-]*\).*/\1 \2/p
        s/^      \(--[a-z][a-z-]*\).*/- \1/p' >"$tmp/options"
    [ "$(grep -c . "$tmp/options")" -ge 10 ]
    ok $? "ratelimitd --help lists its options ($(grep -c . "$tmp/options"))"
    tr ' ' '\n' <"$tmp/options" | grep -vx -- - >"$tmp/known"

    sed -n '/^SYNOPSIS$/,/^DESCRIPTION$/p' "$tmp/rl8.txt" >"$tmp/synopsis"
    sed -n '/^OPTIONS$/,/^[A-Z]/p' "$tmp/rl8.txt" | grep -- '^       -' >"$tmp/tags"
    awk '/^## /{ on = ($0 == "## Command line") } on && /^    / { print }' \
        "$src/docs/operations.md" >"$tmp/ops"
    [ -s "$tmp/ops" ]
    ok $? "docs/operations.md's Command line has a synopsis"
    while read -r short long; do
        # The SYNOPSIS gives the short form where there is one.
        [ "$short" = - ] && word=$long || word=$short
        names_option "$tmp/synopsis" "$word"
        ok $? "ratelimitd(8)'s SYNOPSIS names $word"
        names_option "$tmp/tags" "$long" && { [ "$short" = - ] || names_option "$tmp/tags" "$short"; }
        ok $? "ratelimitd(8)'s OPTIONS has an entry for $long"
        names_option "$tmp/ops" "$long"
        ok $? "docs/operations.md's synopsis names $long"
        # Given an argument whatever it takes, then --version: an option the
        # daemon does not know is "unrecognized"; any other answer (0, or 64
        # for an argument it refuses) proves it knows it. Nothing starts.
        "$bin" "$long=probe" --version >/dev/null 2>"$tmp/probe.err"
        rc=$?
        if { [ "$rc" -eq 0 ] || [ "$rc" -eq 64 ]; } && ! grep -q unrecognized "$tmp/probe.err"; then
            ok 0 "ratelimitd knows $long"
        else
            ok 1 "ratelimitd knows $long"
            diag "$tmp/probe.err"
        fi
    done <"$tmp/options"
    only_known "$tmp/synopsis" "ratelimitd(8)'s SYNOPSIS"
    only_known "$tmp/tags" "ratelimitd(8)'s OPTIONS"
    only_known "$tmp/ops" "docs/operations.md's synopsis"
    "$bin" --no-such-option=probe --version >/dev/null 2>"$tmp/probe.err"
    [ $? -eq 64 ] && grep -q unrecognized "$tmp/probe.err"
    ok $? "ratelimitd does not know --no-such-option (the probe can fail)"

    # The EXAMPLE section's .EX block, unescaped (\- is the only escape in it).
    sed -n '/^\.SH EXAMPLE/,/^\.EE/p' "$build/man/ratelimitd.yaml.5" |
        sed '1,/^\.EX/d; /^\.EE/d; s/\\-/-/g' >"$tmp/example.yaml"
    "$bin" --check-config --config "$tmp/example.yaml" >"$tmp/check.out" 2>&1
    ok $? "the EXAMPLE of ratelimitd.yaml(5) passes ratelimitd --check-config"
    diag "$tmp/check.out"
else
    skip "the pages' version, paths and options, against the daemon" "RATELIMITD not set"
    skip "the EXAMPLE of ratelimitd.yaml(5) passes --check-config" "RATELIMITD not set"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
