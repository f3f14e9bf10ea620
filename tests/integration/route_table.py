# SPDX-License-Identifier: Apache-2.0
"""route_table.py: the HTTP front's route table, read from its one source,
src/front/http/http_routes.c, so that the tests which hold the docs against
the daemon (test_openapi.py) ask every route the daemon has, and notice a
new one the docs do not cover.

    for r in route_table.routes(): r.path, r.prefix, r.role, r.methods, ...

Raises harness.Fatal when the table cannot be read: a test that silently
found no rows could not fail.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRC = os.path.join(os.environ.get("RL_SRCDIR", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")), "src", "front", "http")

ROW = re.compile(r'\{\s*("[^"]*"|\w+),\s*([01]),\s*(HTTP_ROLE_\w+),\s*(HTTP_ROUTE_ANY_METHOD|'
                 r'M\(\w+\)(?:\s*\|\s*M\(\w+\))*),\s*(NULL|"[^"]*"),\s*(NULL|"[^"]*"),\s*([01]),'
                 r'\s*(\w+)\s*\}')


class Route:
    def __init__(self, path, prefix, role, methods, allow, guarded):
        self.path = path          # the path, or its prefix
        self.prefix = prefix      # True: /auth/<policy>..., /v1/keys/<policy>/<key>
        self.role = role          # "CHECKS", "ADMIN" or "KEYS"
        self.methods = methods    # the methods it takes; None: every method
        self.allow = allow        # the 405's Allow header; None: never 405
        self.guarded = guarded    # the drain (503) and the bearer token (401) guard it

    def __repr__(self):
        return "Route(%s)" % self.path


def _define(name):
    """The string a #define of src/front/http/*.h gives name."""
    for h in sorted(os.listdir(SRC)):
        if h.endswith(".h"):
            with open(os.path.join(SRC, h)) as f:
                m = re.search(r'^#define %s "([^"]*)"' % name, f.read(), re.M)
            if m:
                return m.group(1)
    raise harness.Fatal("route_table: no #define %s in %s" % (name, SRC))


def routes():
    """Every row of http_routes.c's routes[], in its order."""
    with open(os.path.join(SRC, "http_routes.c")) as f:
        text = f.read()
    m = re.search(r"static const struct http_route routes\[\] = \{(.*?)\n\};", text, re.S)
    if not m:
        raise harness.Fatal("route_table: no routes[] in http_routes.c")
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    rows = ROW.findall(body)
    if not rows or len(rows) != body.count("start_"):
        raise harness.Fatal("route_table: read %d rows of routes[], which names %d starts"
                            % (len(rows), body.count("start_")))
    out = []
    for path, prefix, role, methods, _use, allow, guarded, _start in rows:
        path = path.strip('"') if path.startswith('"') else _define(path)
        out.append(Route(path, prefix == "1", role[len("HTTP_ROLE_"):],
                         None if methods == "HTTP_ROUTE_ANY_METHOD"
                         else re.findall(r"M\((\w+)\)", methods),
                         None if allow == "NULL" else allow.strip('"'), guarded == "1"))
    return out


def example(route):
    """A path route serves (a prefix's filled with a policy and a key)."""
    if route.path == "/auth/":
        return "/auth/login"
    if route.path == "/v1/keys/":
        return "/v1/keys/login/a"
    if route.path == "/v1/overrides/":
        return "/v1/overrides/login/a"
    if route.path == "/v1/top/":
        return "/v1/top/login"
    return route.path
