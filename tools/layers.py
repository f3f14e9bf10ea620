#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""layers.py: the layer rules of src/, checked from the includes.

Reads every src/**/*.c and *.h (not the generated ones: *_lua.c, *.pb-c.*),
resolves each `#include "..."` as the compiler does (the including file's
folder first, then src/, which is on the include path) and each
`#include <...>` on the include path alone (src/), and keeps those that name
a file under src/: a project header in angle brackets obeys the same rules.
"envoy/...", "grpc/health/..." are protoc-c's headers in the build
directory, and <event2/...> and the like the system's: not ours to check.
Then it fails on:

- an include against the layer order, lib <- config <- core <- limiter <-
  backend, front (the limiter's algorithms answer the core's neutral
  requests; only a backend runs them); the top-level files (main,
  worker, server, reload, watch, notify) glue the process together and
  may include anything:

    src/lib/        lib
    src/config/     lib, config
    src/core/       lib, config, core (what the core asks of a backend,
                    core/backend.h, is the core's: never backend/ or front/)
    src/limiter/    lib, config, core, limiter
    src/backend/    lib, config, core, limiter, backend (never front/)
    src/front/      lib, config, core, front (never backend/)
    src/module/     lib, config, limiter, module (the Redis module: the
                    limiter's C inside Redis; never core/, backend/, front/)
    src/*.[ch]      anything

  and two sibling subfolders of front/ (http/, grpc/) or of backend/
  (redis/) never include each other: what they share sits in front/*.h or
  backend/*.h; there are no exceptions by file name;

- a layer cycle: layer A depends on B when a file of A includes one of B
  (the top-level files are the layer "top"). Each strongly connected set of
  layers is reported once, with one cycle through them and the include
  that makes each step. The order above forbids every cycle already; this
  check holds even if the table is edited to allow one, as an allow-list
  once let core and backend include each other;

- a module cycle, a module being x.c + x.h: module A depends on B when A's
  .c or .h includes B's .h. Each strongly connected component is reported
  once, with its members and one cycle through them.

Prints one line per violation (file:line: #include "x": the rule broken),
one per cycle, and a summary line; exits 1 if anything was found. Usage:
    python3 tools/layers.py [SRCDIR]      (default: src/ next to tools/)
"""

import os
import re
import sys
from collections import deque

# `#include "name"` (group 1) or `#include <name>` (group 2).
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')

# What each layer may include, by layer (the first folder under src/).
ALLOWED = {
    "lib": {"lib"},
    "config": {"lib", "config"},
    "core": {"lib", "config", "core"},
    "limiter": {"lib", "config", "core", "limiter"},
    "backend": {"lib", "config", "limiter", "core", "backend"},
    "front": {"lib", "config", "core", "front"},
    "module": {"lib", "config", "limiter", "module"},
}
# Layers whose subfolders are plug-ins that never include one another.
PLUGIN_LAYERS = {"front", "backend"}


def generated(rel):
    return rel.endswith("_lua.c") or ".pb-c." in rel


def source_files(src):
    """Every C file under src, as paths relative to it, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for name in filenames:
            if name.endswith((".c", ".h")):
                rel = os.path.relpath(os.path.join(dirpath, name), src).replace(os.sep, "/")
                if not generated(rel):
                    out.append(rel)
    return sorted(out)


def layer_of(rel):
    """'lib', 'config', ... for a file in a layer folder; 'top' for src/*;
    None for a folder no rule knows."""
    parts = rel.split("/")
    if len(parts) == 1:
        return "top"
    return parts[0] if parts[0] in ALLOWED else None


def plugin_of(rel):
    """The plug-in subfolder ('front/http') of a file in one, else None."""
    parts = rel.split("/")
    if parts[0] in PLUGIN_LAYERS and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return None


def resolve(src, including, name, quoted, known):
    """The file under src that `#include "name"` (quoted) or `<name>` in
    `including` reads, or None when it is not one of ours."""
    cands = [os.path.normpath(name).replace(os.sep, "/")]
    if quoted:
        here = os.path.dirname(including)
        cands.insert(0, os.path.normpath(os.path.join(here, name)).replace(os.sep, "/"))
    for cand in cands:
        if cand in known:
            return cand
    return None


def rule_broken(frm, to):
    """Why frm may not include to, or None when it may."""
    lf, lt = layer_of(frm), layer_of(to)
    if lf is None:
        return "src/%s is in no layer folder (lib, config, limiter, core, backend, front)" % (
            os.path.dirname(frm))
    if lf == "top":
        return None
    if lt == "top":
        return "%s may not include the process glue at the top of src/" % lf
    allowed = ALLOWED[lf]
    if lt not in allowed:
        return "%s may include only %s" % (lf, ", ".join(sorted(allowed, key=list(ALLOWED).index)))
    pf, pt = plugin_of(frm), plugin_of(to)
    if pf and pt and pf != pt:
        return "%s/ never includes %s/ (what both need goes in %s/*.h)" % (pf, pt, lf)
    return None


def module_of(rel):
    return rel[:-2]


def strongly_connected(graph):
    """Tarjan's components of graph (node -> set of nodes), iteratively."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                comps.append(sorted(comp))
    return comps


def one_cycle(graph, comp):
    """A shortest cycle through the first member of comp, inside comp."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node]):
            if nxt == start:
                path = [node]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if nxt in members and nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    return comp + [start]


def read_includes(src, files, known):
    """Every include of files that names one of ours, in order:
    (including file, line number, spelling as written, file included)."""
    out = []
    for rel in files:
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                quoted = m.group(1) is not None
                name = m.group(1) if quoted else m.group(2)
                to = resolve(src, rel, name, quoted, known)
                if to is not None:
                    spelled = '"%s"' % name if quoted else "<%s>" % name
                    out.append((rel, lineno, spelled, to))
    return out


def layer_cycles(includes):
    """Lines naming each cycle between layers: a layer depends on another
    when one of its files includes one of the other's, whatever the rules
    say of that include."""
    graph, where = {}, {}
    for rel, lineno, _, to in includes:
        lf, lt = layer_of(rel), layer_of(to)
        if lf is None or lt is None or lf == lt:
            continue
        graph.setdefault(lf, set()).add(lt)
        graph.setdefault(lt, set())
        where.setdefault((lf, lt), "src/%s:%d" % (rel, lineno))
    lines = []
    for comp in strongly_connected(graph):
        if len(comp) > 1:
            cycle = one_cycle(graph, comp)
            steps = ", ".join(where[(a, b)] for a, b in zip(cycle, cycle[1:]))
            lines.append("layer cycle of %d: %s (for example %s, by %s)" %
                         (len(comp), ", ".join(comp), " -> ".join(cycle), steps))
    return lines


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    src = argv[1] if len(argv) > 1 else os.path.join(here, "..", "src")
    if not os.path.isdir(src):
        sys.stderr.write("layers: %s is not a directory\n" % src)
        return 2
    files = source_files(src)
    includes = read_includes(src, files, set(files))
    violations = []
    graph = {module_of(f): set() for f in files}
    for rel, lineno, spelled, to in includes:
        why = rule_broken(rel, to)
        if why:
            violations.append("src/%s:%d: #include %s: %s" % (rel, lineno, spelled, why))
        if to.endswith(".h") and module_of(to) != module_of(rel):
            graph[module_of(rel)].add(module_of(to))
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    by_layer = layer_cycles(includes)
    for line in violations:
        print(line)
    for line in by_layer:
        print(line)
    for comp in cycles:
        print("module cycle of %d: %s (for example %s)" %
              (len(comp), ", ".join(comp), " -> ".join(one_cycle(graph, comp))))
    print("layers: %d files, %d includes, %d violations, %d layer cycles, %d module cycles" %
          (len(files), len(includes), len(violations), len(by_layer), len(cycles)))
    return 1 if violations or by_layer or cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
