# SPDX-License-Identifier: Apache-2.0
"""openapi_check.py: hold an HTTP answer of ratelimitd against the contract
docs/openapi.yaml, and raise ContractError when the contract does not
describe it.

    openapi_check.validate("POST", "/check", 200, headers, body)

What is checked, after the $refs are resolved:
- the path and method name an operation (a path template's parameters
  match one segment, or the rest of the path when the parameter says
  `x-greedy: true`), and the status is one of the operation's own
  responses (exact, then `4XX`): nothing falls back, so each operation
  must list every status its path can send;
- a path the contract names, asked with a method none of its operations
  names (GET /check, BREW /check), may only be answered 405 or with a
  status of the top-level `x-unrouted-responses` (what does not depend on
  the path), as the path's operations describe it;
- a path no template matches may only be answered with a status of
  `x-unrouted-responses`;
- every header the response marks required is there, every header sent is
  described (but HTTP's framing: Content-Type, Content-Length, Connection,
  Transfer-Encoding, Date), and each value fits its schema;
- the Content-Type is one of the response's media types, and a JSON body
  fits its schema (JSON Schema draft 2020-12, as OpenAPI 3.1 says); an
  answer to HEAD has no body.

Used by daemon.py's Daemon.request on every answer; test_openapi.py proves
it refuses what it should.
"""

import json
import os
import re
import sys

CONTRACT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                        "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# Fields of the message's framing, which OpenAPI leaves to HTTP (it says a
# described Content-Type header is ignored: the media type says it).
FRAMING = {"content-type", "content-length", "connection", "transfer-encoding", "date"}


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class ContractError(harness.Fatal, AssertionError):
    """An answer docs/openapi.yaml does not describe."""


_spec = None


def _resolve(node, root, seen=()):
    """node with every {"$ref": "#/..."} replaced by what it points at."""
    if isinstance(node, dict):
        if "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/") or ref in seen:
                raise ContractError("unsupported or circular $ref %r" % ref)
            target = root
            for part in ref[2:].split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            return _resolve(target, root, seen + (ref,))
        return {k: _resolve(v, root, seen) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, root, seen) for v in node]
    return node


def _template_regex(template, params):
    """A compiled regex for a path template; params: its parameters."""
    greedy = {p["name"] for p in params if p.get("in") == "path" and p.get("x-greedy")}
    out = ""
    for piece in re.split(r"(\{[^}]+\})", template):
        if piece.startswith("{") and piece.endswith("}"):
            out += "(.+)" if piece[1:-1] in greedy else "([^/]+)"
        else:
            out += re.escape(piece)
    return re.compile(out + r"\Z")


def load(path=CONTRACT):
    """The contract, resolved (cached after the first call)."""
    global _spec
    if _spec is not None and path == CONTRACT:
        return _spec
    try:
        import yaml
        import jsonschema
    except ImportError as e:
        raise ContractError("validating answers against docs/openapi.yaml needs "
                            "python3-yaml and python3-jsonschema (tools/deps.sh --test): %s" % e)
    with open(path) as f:
        raw = yaml.safe_load(f)
    spec = _resolve(raw, raw)
    routes = []
    for template, item in spec["paths"].items():
        routes.append((_template_regex(template, item.get("parameters", [])), template, item))
    # Templates without parameters first: a literal path wins.
    routes.sort(key=lambda r: "{" in r[1])
    spec["_routes"] = routes
    spec["_validator"] = jsonschema.Draft202012Validator
    if path == CONTRACT:
        _spec = spec
    return spec


def _where(method, path, status):
    return "%s %s -> %s" % (method, path, status)


def _lookup(responses, code):
    """responses' entry for the status code (exact, then its class), or None."""
    return next((responses[k] for k in (code, code[0] + "XX") if k in responses), None)


def _find_response(spec, method, path, status):
    """The response object the contract gives this answer, or raises."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    code = str(status)
    unrouted = spec.get("x-unrouted-responses", {})
    item = next((item for rx, _t, item in spec["_routes"] if rx.match(path)), None)
    op = item.get(method.lower()) if item is not None and method.lower() in METHODS else None
    found, why = None, ""
    if op is not None:
        found = _lookup(op.get("responses", {}), code)
    elif item is not None:
        why = " (no operation for this method: only 405 or %s)" % "/".join(sorted(unrouted))
        if code == "405" or code in unrouted:
            found = next((r for m in METHODS if isinstance(item.get(m), dict)
                          for r in [_lookup(item[m].get("responses", {}), code)] if r), None)
    else:
        why = " (no path of the contract matches)"
        found = _lookup(unrouted, code)
    if found is None:
        raise ContractError("%s: the contract describes no such answer%s" % (
            _where(method, path, status), why))
    return found


def validate(method, path, status, headers, body, spec=None):
    """Raises ContractError unless docs/openapi.yaml describes this answer.
    headers: a mapping of field names (any case) to values; body: bytes."""
    spec = spec or load()
    _check_response(spec, _find_response(spec, method, path, status),
                    _where(method, path, status), method, headers, body)


def validate_any(status, headers, body, head=False, spec=None):
    """For an answer whose request is not known (a raw socket's pipelined
    or malformed bytes): raises ContractError unless some response of the
    contract with this status (of any operation, or before routing)
    describes it, headers and body included."""
    spec = spec or load()
    code = str(status)
    found = []
    for _rx, template, item in spec["_routes"]:
        for method in METHODS:
            op = item.get(method)
            if isinstance(op, dict):
                found += [("%s %s" % (method.upper(), template), r)
                          for k, r in op.get("responses", {}).items() if k in (code, code[0] + "XX")]
    found += [("(before routing)", r) for k, r in spec.get("x-unrouted-responses", {}).items()
              if k in (code, code[0] + "XX")]
    if not found:
        raise ContractError("-> %s: the contract describes no answer with this status" % code)
    errors = []
    for where, resp in found:
        try:
            _check_response(spec, resp, "%s -> %s" % (where, code), "HEAD" if head else "GET",
                            headers, body)
            return
        except ContractError as e:
            errors.append(str(e))
    raise ContractError("-> %s: no response of the contract describes it:\n  %s"
                        % (code, "\n  ".join(errors)))


def _check_response(spec, resp, where, method, headers, body):
    """Raises ContractError unless resp (a response object) describes the answer."""
    got = {k.lower(): v for k, v in headers.items()}
    described = {k.lower(): h for k, h in resp.get("headers", {}).items()}
    for name, h in described.items():
        if h.get("required") and name not in got and name not in FRAMING:
            raise ContractError("%s: lacks the required header %s" % (where, name))
    for name, value in got.items():
        if name in FRAMING:
            continue
        if name not in described:
            raise ContractError("%s: sends %s: %s, which the contract does not describe" %
                                (where, name, value))
        schema = described[name].get("schema")
        if schema is not None:
            _check_schema(spec, schema, value, "%s: header %s" % (where, name), value)
    content = resp.get("content") or {}
    ctype = got.get("content-type")
    if not content:
        if body:
            raise ContractError("%s: has a body, the contract none" % where)
        return
    media = content.get(ctype) if ctype else None
    if media is None and ctype:
        base = ctype.split(";", 1)[0].strip()
        media = next((m for k, m in content.items() if k.split(";", 1)[0].strip() == base), None)
    if media is None:
        raise ContractError("%s: Content-Type %r is none of %s" % (where, ctype, sorted(content)))
    if method.upper() == "HEAD":
        if body:
            raise ContractError("%s: an answer to HEAD has a body" % where)
        return
    schema = media.get("schema")
    if schema is None:
        return
    if ctype and ctype.split(";", 1)[0].strip() == "application/json":
        try:
            doc = json.loads(body)
        except ValueError as e:
            raise ContractError("%s: the body is not JSON (%s): %r" % (where, e, body[:200]))
    else:
        doc = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    _check_schema(spec, schema, doc, "%s: the body" % where, body)


def _describe(e):
    """One error as text; for anyOf, the deepest error of each branch (the
    branch meant is usually the one that got furthest)."""
    where = "/".join(str(p) for p in e.absolute_path) or "top"
    if not e.context:
        return "%s at %s" % (e.message, where)
    branches = {}
    for c in e.context:
        b = c.relative_schema_path[0]
        if b not in branches or len(c.absolute_path) > len(branches[b].absolute_path):
            branches[b] = c
    return "at %s, no schema of %s fits: %s" % (where, e.validator, "; ".join(
        "[%s] %s" % (b, _describe(c)) for b, c in sorted(branches.items())))


def _check_schema(spec, schema, value, what, shown):
    v = spec["_validator"](schema)
    errors = sorted(v.iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        raise ContractError("%s does not fit the contract: %s; it was %r" % (
            what, _describe(errors[0]), shown[:300]))
