# SPDX-License-Identifier: Apache-2.0
"""test_layers.py: tools/layers.py, the guard of src/'s layers, run against
tiny source trees written in a temporary directory (TAP): a clean tree
passes; an include up a layer, a core including any backend header, one
front including another, a project header in angle brackets that breaks a
rule, a layer cycle (even one the table were edited to allow) and a module
cycle each fail it, named by file:line and rule, or by the cycle's members;
generated files, protoc-c's and the system's headers are left out. The real
tree is checked by tools/test.sh, not here.

Needs only python3 and $RL_SRCDIR.
"""
import contextlib
import importlib.util
import io
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR", ".")
LAYERS = os.path.join(SRCDIR, "tools", "layers.py")

# A tree that keeps every rule: each layer including the ones below it, the
# backend interface in the core (core/backend.h) and the backends including
# it, the top including all; angle brackets for one of ours and for the
# system's.
CLEAN = {
    "lib/util.h": "",
    "lib/util.c": '#include "lib/util.h"\n',
    "config/config.h": '#include "lib/util.h"\n',
    "config/config.c": '#include "config/config.h"\n#include "lib/util.h"\n',
    "limiter/limiter_local.h": '#include "config/config.h"\n#include "core/decision.h"\n',
    "limiter/limiter_local.c": '#include "limiter/limiter_local.h"\n',
    "core/check.h": '#include "config/config.h"\n#include "core/backend.h"\n',
    "core/check.c": '#include "core/check.h"\n#include <event2/event.h>\n',
    "core/backend.h": '#include <lib/util.h>\n',
    "backend/registry.c": '#include "core/backend.h"\n#include "backend/redis/node.h"\n',
    "backend/redis/node.h": '#include "core/decision.h"\n',
    "backend/redis/node.c": '#include "backend/redis/node.h"\n#include "envoy/x.pb-c.h"\n',
    "core/decision.h": '#include "lib/util.h"\n',
    "backend/redis/scripts_lua.c": '#include "front/front.h"\n',  # generated: not read
    "front/front.h": '#include "core/check.h"\n',
    "front/http/http.h": '#include "front/front.h"\n',
    "front/http/http.c": '#include "front/http/http.h"\n#include "grpc/health/v1/health.pb-c.h"\n',
    "front/grpc/grpc.c": '#include "front/front.h"\n',
    "worker.h": '#include "front/front.h"\n#include "core/backend.h"\n',
    "worker.c": '#include "worker.h"\n#include "backend/redis/node.h"\n#include "front/http/http.h"\n'
                '#include "front/http/x.h"\n',
    "main.c": '#include "worker.h"\n#include "reload.h"\n',
    "reload.h": "",
}


def write_tree(files):
    """A fresh directory holding src/ with files (path -> text); its src/."""
    src = os.path.join(harness.make_tempdir(), "src")
    for rel, text in files.items():
        path = os.path.join(src, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return src


def layers(files):
    """(exit status, output lines) of tools/layers.py on a tree of files."""
    proc = subprocess.run([sys.executable, LAYERS, write_tree(files)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=30)
    return proc.returncode, proc.stdout.decode("utf-8", "replace").splitlines()


def with_changes(changes):
    files = dict(CLEAN)
    files.update(changes)
    return files


def expect_failure(what, changes, wanted):
    """The tree with changes fails with exactly one line naming a broken
    include, and that line holds every string of wanted (an include up a
    layer often closes a module cycle too: those lines are not counted)."""
    rc, out = layers(with_changes(changes))
    found = [line for line in out if line.startswith("src/")]
    if not harness.ok(rc == 1 and len(found) == 1 and all(w in found[0] for w in wanted),
                      "%s fails it, named: %s" % (what, found)):
        harness.diag("\n".join(out))


def load_layers():
    """tools/layers.py as a module, so that its table can be edited."""
    spec = importlib.util.spec_from_file_location("layers", LAYERS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def layer_cycle_checks():
    """The core including backend/ while backend/ includes the core: the
    include breaks the order, and the two layers form a cycle, named with
    an include per step. And the same tree under a table edited to allow
    it (as an allow-list once did): no include is against the table, yet
    the layer cycle alone fails it."""
    tree = with_changes({"core/check.c": '#include "core/check.h"\n#include <backend/registry.h>\n',
                         "backend/registry.h": '#include "core/backend.h"\n'})
    cycle = ("layer cycle of 2: backend, core (for example backend -> core -> backend, "
             "by src/backend/redis/node.h:1, src/core/check.c:2)")
    rc, out = layers(tree)
    harness.ok(rc == 1 and cycle in out, "core <-> backend is a layer cycle: %s" % out)
    mod = load_layers()
    mod.ALLOWED["core"] = mod.ALLOWED["core"] | {"backend"}
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        rc = mod.main(["layers.py", write_tree(tree)])
    out = captured.getvalue().splitlines()
    harness.ok(rc == 1 and out == [cycle, "layers: 22 files, 29 includes, 0 violations, "
                                          "1 layer cycles, 0 module cycles"],
               "with a table allowing core -> backend, the layer cycle alone fails it: %s" % out)


def main():
    rc, out = layers(CLEAN)
    if not harness.eq(rc, 0, "a tree that keeps the rules passes"):
        harness.diag("\n".join(out))
    # 21 files (scripts_lua.c left out); 27 includes name a file of the
    # tree (the proto headers, front/http/x.h and event2/event.h do not).
    harness.eq(out, ["layers: 21 files, 27 includes, 0 violations, 0 layer cycles, "
                     "0 module cycles"], "it says only the summary")

    expect_failure("lib including core/ (up a layer)", {"lib/util.c": '#include "core/check.h"\n'},
                   ['src/lib/util.c:1: #include "core/check.h"', "lib may include only lib"])
    expect_failure("config including limiter/ on its third line",
                   {"config/config.c": '#include "config/config.h"\n\n#include '
                                       '"limiter/limiter_local.h"\n'},
                   ['src/config/config.c:3: #include "limiter/limiter_local.h"',
                    "config may include only lib, config"])
    expect_failure("the core including a Redis file",
                   {"core/check.c": '#include "core/check.h"\n#include "backend/redis/node.h"\n'},
                   ['src/core/check.c:2: #include "backend/redis/node.h"',
                    "core may include only lib, config, core"])
    # No file of backend/ is the core's any more, not even the one an
    # allow-list let through when the interface lived there.
    expect_failure("the core including backend/backend.h",
                   {"core/check.c": '#include "core/check.h"\n#include "backend/backend.h"\n',
                    "backend/backend.h": '#include "core/decision.h"\n'},
                   ['src/core/check.c:2: #include "backend/backend.h"',
                    "core may include only lib, config, core"])
    expect_failure("a project header in angle brackets against the order",
                   {"lib/util.c": '#include <config/config.h>\n'},
                   ["src/lib/util.c:1: #include <config/config.h>", "lib may include only lib"])
    expect_failure("the core including a backend in angle brackets",
                   {"core/check.c": '#include "core/check.h"\n#include <backend/redis/node.h>\n'},
                   ["src/core/check.c:2: #include <backend/redis/node.h>",
                    "core may include only lib, config, core"])
    # <name> is looked up on the include path (src/) alone, never in the
    # including file's folder: <util.h> in lib/ is no file of ours.
    rc, out = layers(with_changes({"config/config.c": '#include <config.h>\n#include <util.h>\n'}))
    harness.ok(rc == 0 and out[-1].startswith("layers: 21 files, 25 includes, 0 violations"),
               "<config.h> in config/ is not config/config.h: %s" % out)
    expect_failure("the core including the limiter (only a backend runs it)",
                   {"core/check.c": '#include "core/check.h"\n#include "limiter/limiter_local.h"\n'},
                   ['src/core/check.c:2: #include "limiter/limiter_local.h"',
                    "core may include only lib, config, core"])
    expect_failure("the core including the worker (top level)",
                   {"core/check.c": '#include "core/check.h"\n#include "worker.h"\n'},
                   ['src/core/check.c:2: #include "worker.h"', "process glue"])
    expect_failure("a front including a backend",
                   {"front/grpc/grpc.c": '#include "front/front.h"\n#include "backend/redis/node.h"\n'},
                   ['src/front/grpc/grpc.c:2: #include "backend/redis/node.h"',
                    "front may include only lib, config, core, front"])
    expect_failure("the HTTP front including the gRPC front",
                   {"front/grpc/grpc.c": '#include "front/front.h"\n#include "front/http/http.h"\n'},
                   ['src/front/grpc/grpc.c:2: #include "front/http/http.h"',
                    "front/grpc/ never includes front/http/"])
    expect_failure("a backend including a front",
                   {"backend/redis/node.h": '#include "core/decision.h"\n#include "front/front.h"\n'},
                   ['src/backend/redis/node.h:2: #include "front/front.h"', "backend may include only"])
    expect_failure("a bare include resolved in the file's own folder",
                   {"lib/util.c": '#include "util.h"\n',
                    "config/config.c": '#include "config.h"\n#include "worker.h"\n'},
                   ['src/config/config.c:2: #include "worker.h"', "process glue"])
    expect_failure("a folder outside the layers", {"misc/x.c": '#include "lib/util.h"\n'},
                   ['src/misc/x.c:1: #include "lib/util.h"', "in no layer folder"])

    # A cycle of three modules within the core: a.h -> b.h, b.c -> c.h,
    # c.c -> a.h. Allowed includes one by one, so only the cycle is wrong.
    rc, out = layers(with_changes({
        "core/a.h": '#include "core/b.h"\n', "core/a.c": '#include "core/a.h"\n',
        "core/b.h": "", "core/b.c": '#include "core/c.h"\n',
        "core/c.h": "", "core/c.c": '#include "core/a.h"\n'}))
    harness.eq([line for line in out if not line.startswith("layers:")],
               ["module cycle of 3: core/a, core/b, core/c (for example core/a -> core/b -> "
                "core/c -> core/a)"], "a module cycle of three is named once, with its members")
    harness.ok(rc == 1 and out[-1].endswith(" 0 violations, 0 layer cycles, 1 module cycles"),
               "and fails it: %s" % out[-1])
    # Through the layers: the worker and a front that includes it, reported
    # once, beside the include that breaks the order.
    rc, out = layers(with_changes({"front/http/http.c": '#include "worker.h"\n'}))
    cycles = [line for line in out if line.startswith("module cycle")]
    harness.ok(rc == 1 and cycles == ["module cycle of 2: front/http/http, worker (for example "
                                      "front/http/http -> worker -> front/http/http)"],
               "a front including the worker that includes it: one cycle: %s" % cycles)
    harness.ok(any(line.startswith('src/front/http/http.c:1: #include "worker.h"') for line in out),
               "and the include up to the top level")
    harness.ok("layer cycle of 2: front, top (for example front -> top -> front, by "
               "src/front/http/http.c:1, src/worker.c:3)" in out,
               "and the cycle between the layers front and top, by the includes making it: %s"
               % [line for line in out if line.startswith("layer")])
    harness.eq(out[-1] if out else None,
               "layers: 21 files, 27 includes, 1 violations, 1 layer cycles, 1 module cycles",
               "the summary counts all three")
    layer_cycle_checks()
    # A .c including its own .h is no cycle.
    rc, out = layers({"lib/x.h": '#include "lib/y.h"\n', "lib/x.c": '#include "lib/x.h"\n',
                      "lib/y.h": "", "lib/y.c": '#include "lib/y.h"\n'})
    harness.eq(rc, 0, "x.c including x.h is one module, no cycle")


harness.run(main)
