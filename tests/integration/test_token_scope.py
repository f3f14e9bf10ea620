# SPDX-License-Identifier: Apache-2.0
"""test_token_scope.py: what `auth_token_file` guards is said once, the same
way, in every page that says it, and the daemon does what it says.

- docs/configuration.md, docs/operations.md and docs/http-api.md each hold
  the statement "`auth_token_file` guards <paths> (401 without
  `Authorization: Bearer <token>` ...) ...; <paths> never need it.", and
  their two lists are the same in all three.
- The lists are the route table's (src/front/http/http_routes.c, read by
  route_table.py): the guarded rows are the first list, the others the
  second, so a route added to the table must be added to the statement.
- A daemon with the token, asked each path with and without it, on listen
  alone and with admin_listen (each path on the listener that serves it):
  a guarded path answers 401 with `WWW-Authenticate: Bearer` without the
  token and something else with it; the others answer 200 either way.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import route_table  # noqa: E402
from daemon import Daemon  # noqa: E402

TOP = os.environ.get("RL_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                               "..", ".."))
PAGES = ("docs/configuration.md", "docs/operations.md", "docs/http-api.md")
STATEMENT = re.compile(r"`auth_token_file` guards (.*?) \(401 without `Authorization: Bearer "
                       r"<token>`.*?; ([^;]*?) never need it\.")
TOKEN = "token-scope-test-token"
POLICY = """\
policies:
  login:
    tiers:
      - {name: burst, algorithm: token_bucket, limit: 100, window: 1h}
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: hour, requests_per_unit: 100}
"""
BODIES = {
    "/check": {"policy": "login", "key": "a"},
    "/report": {"policy": "login", "key": "a"},
    "/json": {"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address",
                                                              "value": "192.0.2.1"}]}]},
    "/release": {"leases": ["b.x.y.z.1.AAAAAAAAAAAAAAAAAAAAAA"]},
    "/renew": {"leases": ["b.x.y.z.1.AAAAAAAAAAAAAAAAAAAAAA"]},
}


def paths(text):
    return re.findall(r"`(/[^`]*)`", text)


def statements():
    """(guarded, open) as every page says it; None if a page does not."""
    said = {}
    for page in PAGES:
        with open(os.path.join(TOP, page)) as f:
            text = " ".join(f.read().split())
        found = STATEMENT.findall(text)
        if harness.eq(len(found), 1, "%s says once what auth_token_file guards" % page):
            said[page] = (paths(found[0][0]), paths(found[0][1]))
            harness.diag("%s: guarded %s; open %s" % ((page,) + said[page]))
    lists = set(tuple(map(tuple, s)) for s in said.values())
    harness.eq(len(lists), 1 if said else 0, "every page gives the same two lists")
    return next(iter(said.values()), None)


def asks(d, route, token):
    path = route_table.example(route)
    method = route.methods[0] if route.methods else "GET"
    body = json.dumps(BODIES[path]) if path in BODIES else None
    headers = {"Authorization": "Bearer " + TOKEN} if token else {}
    port = d.admin_port if d.admin_port and route.role != "CHECKS" else d.port
    return d.request(method, path, body, headers=headers, port=port)


def main():
    said = statements()
    table = route_table.routes()
    guarded = [r.path for r in table if r.guarded]
    unguarded = [r.path for r in table if not r.guarded]
    if said:
        harness.eq(sorted(said[0]), sorted(guarded),
                   "the guarded paths the pages name are the route table's guarded rows")
        harness.eq(sorted(said[1]), sorted(unguarded),
                   "the paths the pages say never need the token are the table's other rows")
    tokfile = os.path.join(harness.make_tempdir(), "token")
    with open(tokfile, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(tokfile, 0o600)
    extra = "backend: memory\nauth_token_file: %s\n" % tokfile
    for admin in (False, True):
        d = Daemon(None, POLICY, extra=extra, admin=admin).start()
        where = "with admin_listen" if admin else "on listen alone"
        for route in table:
            path = route_table.example(route)
            without, with_token = asks(d, route, False), asks(d, route, True)
            if route.guarded:
                harness.eq((without.status, without.headers.get("www-authenticate")),
                           (401, "Bearer"), "%s %s without the token: 401" % (where, path))
                harness.ok(with_token.status != 401, "%s %s with the token: %d, not 401"
                           % (where, path, with_token.status))
            else:
                harness.eq((without.status, with_token.status), (200, 200),
                           "%s %s: 200 with or without the token" % (where, path))
        harness.eq(d.stop(), 0, "the daemon %s exits cleanly" % where)
    harness.done()


if __name__ == "__main__":
    harness.run(main)
