#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_spdx.py: every file we wrote names its licence in an SPDX line near
its top, and every copied proto/ file names its own (TAP).

The files of ours are those under src/, lua/, tests/, tools/, bench/,
deploy/, docker/ and debian/ (and .ci/run) that can hold a comment; left
out are data without comment syntax (JSON, the fuzzers' corpora, recorded
benchmark results, pictures) and what the build generates. The line must
be among a file's first five, so that a reader sees it before the code.
Files are those git tracks, or, in a tree without .git (make distcheck),
every file under those folders.

Needs only python3 and $RL_SRCDIR.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR", ".")
OURS = ("src/", "lua/", "tests/", "tools/", "bench/", "deploy/", "docker/", "debian/", ".ci/")
# envoyproxy/ratelimit's test configuration, copied byte for byte: a line
# added would change it (NOTICE names each file instead).
COPIED = "tests/envoy-ratelimit/"
# Data that cannot carry a comment, or that a tool writes.
NO_COMMENT_SUFFIXES = (".json", ".png", ".dat", ".tsv", ".md", ".svg")
NO_COMMENT_FOLDERS = ("tests/fuzz/corpus/", "bench/results/", "deploy/test/node_modules/",
                      COPIED)
GENERATED = ("_lua.c", ".pb-c.c", ".pb-c.h")
# Debian's files that are data read whole (a format, a changelog, lists of
# files), and the two that state the licence in Debian's own form.
DEBIAN_NO_COMMENT = ("debian/compat", "debian/source/format", "debian/changelog",
                     "debian/ratelimitd.docs", "debian/ratelimitd.examples",
                     "debian/copyright", "debian/control")
LINE = "SPDX-License-Identifier: Apache-2.0"
HEAD_LINES = 5


def tracked_files(top):
    """The tree's files relative to top: git's list, or a walk without .git."""
    if os.path.exists(os.path.join(top, ".git")):
        out = subprocess.run(["git", "-C", top, "ls-files", "-z"], check=True,
                             capture_output=True).stdout
        return sorted(p for p in out.decode().split("\0") if p)
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in (".git", "node_modules", ".deps", "autom4te.cache")]
        for name in filenames:
            found.append(os.path.relpath(os.path.join(dirpath, name), top).replace(os.sep, "/"))
    return sorted(found)


def ours(path):
    if not path.startswith(OURS) or path.startswith(NO_COMMENT_FOLDERS):
        return False
    if path.endswith(NO_COMMENT_SUFFIXES + GENERATED) or path in DEBIAN_NO_COMMENT:
        return False
    # Build products a walk of a built tree sees (distcheck's copy).
    base = os.path.basename(path)
    if base.endswith((".o", ".a", ".trs", ".log")) or base.startswith("."):
        return base in (".gitignore",) or path == ".ci/run"
    return "." in base or path == ".ci/run" or base in ("Dockerfile", "rules", "control", "copyright") \
        or os.access(os.path.join(SRCDIR, path), os.X_OK)


def head(top, path, n=HEAD_LINES):
    try:
        with open(os.path.join(top, path), "rb") as f:
            return [f.readline().decode("utf-8", "replace") for _ in range(n)]
    except OSError:
        return []


def missing_lines(top, files, wanted=LINE):
    """The files among `files` whose first lines do not carry `wanted`."""
    return [p for p in files if not any(wanted in line for line in head(top, p))]


def main():
    files = tracked_files(SRCDIR)
    mine = [p for p in files if ours(p)]
    harness.ok(len(mine) > 150, "%d files of ours looked at" % len(mine))
    bad = missing_lines(SRCDIR, mine)
    harness.ok(not bad, "every file of ours carries %r in its first %d lines" % (LINE, HEAD_LINES))
    for p in bad[:40]:
        harness.diag("no SPDX line: %s" % p)

    protos = [p for p in files if p.startswith("proto/") and p.endswith(".proto")]
    harness.ok(len(protos) >= 7, "%d copied proto files looked at" % len(protos))
    harness.ok(not missing_lines(SRCDIR, protos, "SPDX-License-Identifier: "),
               "every proto/ file names its own licence")
    notice = open(os.path.join(SRCDIR, "NOTICE")).read()
    harness.ok(all(p in notice for p in protos), "NOTICE names every proto/ file")
    copied = [p for p in files if p.startswith(COPIED) and not p.endswith(".md")]
    harness.ok(copied and all(p in notice for p in copied),
               "NOTICE names every file copied under %s (%d)" % (COPIED, len(copied)))
    harness.ok("Apache License" in open(os.path.join(SRCDIR, "LICENSE")).read()[:300],
               "LICENSE is the Apache License")

    # The checker itself: a file without the line is found, one with it
    # after a shebang is not.
    tmp = harness.make_tempdir()
    os.makedirs(os.path.join(tmp, "src"))
    with open(os.path.join(tmp, "src", "a.c"), "w") as f:
        f.write("/*\n * a.c: no licence line\n */\n")
    with open(os.path.join(tmp, "src", "b.sh"), "w") as f:
        f.write("#!/bin/sh\n# %s\n" % LINE)
    harness.eq(missing_lines(tmp, ["src/a.c", "src/b.sh"]), ["src/a.c"],
               "the check finds a file without the line and passes one with it")
    harness.done()


if __name__ == "__main__":
    main()
