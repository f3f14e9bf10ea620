# SPDX-License-Identifier: Apache-2.0
"""test_fresh_build.py: one make target, alone, builds in a tree that has
never been built (a fresh clone, a release tarball, the image's build
stage runs `make ratelimitd`). automake makes BUILT_SOURCES first for
`make all`, `check` and `install` only, so an object that includes a
generated header needs it named in Makefile.am (TAP).

The tree is this build's `make distdir` (what the release tarball holds:
no generated file), copied afresh and configured for each target:
- `make ratelimitd` links the daemon, which answers --version;
- each object whose source includes a generated header (build_info.h or a
  protoc-c header, found by reading the sources, so that a new includer is
  checked too) compiles as the only target.
Why here and not in test_image.py: it needs no root and no podman, takes
seconds, and so runs in every `make check`.

Needs $RATELIMITD (its directory is the build directory) and $RL_SRCDIR.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRCDIR = os.path.abspath(os.environ.get("RL_SRCDIR", "."))
BUILDDIR = os.path.dirname(os.path.abspath(os.environ.get("RATELIMITD", "./ratelimitd")))
GENERATED_INCLUDE = re.compile(r'(?m)^\s*#\s*include\s+"(build_info\.h|[^"]+\.pb-c\.h)"')
# The make running `make check` passes its jobserver and flags down; the
# builds here are makes of their own, two jobs at most.
MAKE_ENV = {k: v for k, v in os.environ.items()
            if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}


def run(argv, cwd):
    return subprocess.run(argv, cwd=cwd, env=MAKE_ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def includers(tree):
    """The objects (subdir-objects: the source's path, .o) of the C files
    under src/ and tests/ that include a generated header."""
    found = []
    for top in ("src", "tests"):
        for d, _, files in os.walk(os.path.join(tree, top)):
            for f in sorted(files):
                if f.endswith(".c"):
                    path = os.path.join(d, f)
                    with open(path, encoding="utf-8") as src:
                        if GENERATED_INCLUDE.search(src.read()):
                            found.append(os.path.relpath(path, tree)[:-2] + ".o")
    return sorted(found)


def build_alone(dist, work, target):
    """Configures a fresh copy of dist and makes target in it alone;
    returns the copy, or None after a failed point with make's words."""
    tree = os.path.join(work, re.sub(r"\W+", "_", target))
    shutil.copytree(dist, tree, symlinks=True)
    conf = run(["./configure", "-q"], tree)
    if not harness.ok(conf.returncode == 0, "%s: configure in a fresh copy" % target):
        harness.diag(conf.stdout[-3000:])
        return None
    made = run(["make", "-j2", target], tree)
    if not harness.ok(made.returncode == 0, "`make %s` alone builds in a fresh tree" % target):
        harness.diag(made.stdout[-3000:])
        return None
    return tree


def main():
    work = harness.make_tempdir("rl-fresh-")
    dist = os.path.join(work, "dist")
    made = run(["make", "distdir", "distdir=" + dist], BUILDDIR)
    if made.returncode != 0:
        harness.bail_out("make distdir in %s failed:\n%s" % (BUILDDIR, made.stdout[-3000:]))

    objects = includers(dist)
    # The known includers, so that a reader broken by a rename fails here
    # rather than checking nothing.
    for known in ("src/main.o", "src/worker.o", "src/front/grpc/grpc_call.o"):
        harness.ok(known in objects, "%s is found to include a generated header" % known)

    tree = build_alone(dist, work, "ratelimitd")
    if tree:
        version = run(["./ratelimitd", "--version"], tree)
        harness.ok(version.returncode == 0 and version.stdout.startswith("ratelimitd "),
                   "the daemon built alone answers --version: %r" % version.stdout.strip())
    for obj in objects:
        build_alone(dist, work, obj)


harness.run(main)
