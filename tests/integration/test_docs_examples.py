# SPDX-License-Identifier: Apache-2.0
"""test_docs_examples.py: the shell examples of README.md and docs/*.md run
as written, against the real daemon, and print what the page shows.

How a page marks what it shows (HTML comments, which Markdown hides):

- `<!-- test: policy -->` before a ```yaml block: the daemon is (re)started
  with that policy file, Redis emptied; `<!-- test: policy conf/X.yaml -->`
  (no block) uses that file of the tree. Only addresses change: `listen:`
  (added when absent) and `admin_listen:` get free ports, `redis.url` (added
  when absent, unless `backend: memory`) the test's Redis, `redis.timeout`
  2s (a loaded machine must not answer by the failure mode).
- `<!-- test: file NAME -->` before a code block: the block is written to
  NAME in the directory the commands run in (a client program). A `.go`
  file is compiled with `go build` where Go is installed.
- every ```console block is a session: each run of `$ ` lines (with `> `
  continuation lines) is pasted into sh, and what follows it up to the
  next `$ ` is the output it must print. `localhost:8080` and
  `localhost:9090` (the pages' check and admin ports) become the daemon's,
  `redis-cli` reaches the test's Redis.
- `<!-- test: no, REASON -->` before a ```console block: shown, not run
  (the reason is printed), e.g. a session that needs Docker.

What cannot repeat exactly is compared loosely: times (reset_ms,
retry_after_ms, X-RateLimit-Reset, Retry-After, RateLimit's t=) within a
tolerance, keeping zero as zero, and not at all for a window aligned to the
clock (fixed_window, sliding_window_counter, Envoy's durationUntilReset);
a lease id (in a body or X-RateLimit-Lease) but for its random part, and a
lease's expires_ms (a Unix time) only as a positive integer;
Content-Length must match the body it came with. Everything else (status
lines, header names and order, every other field and number, plain text
lines) must be identical. Every HTTP answer a session prints (`curl -si`)
must also be one docs/openapi.yaml describes (openapi_check.py).

DOCS_EXAMPLES_SHOW=1 prints what each session really printed (to paste);
DOCS_EXAMPLES_PAGES="docs/x.md ..." runs only those pages;
DOCS_EXAMPLES_WRITE=1 writes what was printed into the pages' sessions (for
a writer: read the diff before committing it)."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import openapi_check  # noqa: E402
from daemon import Daemon  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR", ".")
CHECK_ADDR, ADMIN_ADDR = "localhost:8080", "localhost:9090"
TIME_FIELDS = ("reset_ms", "retry_after_ms", "delay_ms")
TIME_HEADERS = ("x-ratelimit-reset", "retry-after")
TOLERANCE_MS = 5000  # a slow machine: eleven curl processes, the daemon's start
ALIGNED = ("fixed_window", "sliding_window_counter")  # reset depends on the clock
# A lease id: everything but its last part (the random nonce) must match.
LEASE_ID = re.compile(r"^([bl]\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[0-9]+\.)"
                      r"[A-Za-z0-9_-]{22}$")
SHOW = os.environ.get("DOCS_EXAMPLES_SHOW") == "1"
WRITE = os.environ.get("DOCS_EXAMPLES_WRITE") == "1"
MARK = re.compile(r"^<!-- test: (policy|file|no)\b,? ?(.*?) ?-->$")


def pages():
    only = os.environ.get("DOCS_EXAMPLES_PAGES")  # e.g. "docs/http-api.md", to write a page
    if only:
        return [os.path.join(SRCDIR, p) for p in only.split()]
    return [os.path.join(SRCDIR, "README.md")] + sorted(glob.glob(os.path.join(SRCDIR, "docs",
                                                                                 "*.md")))


def items(text):
    """The page's test items in order: ("policy", yaml or None, path),
    ("file", name, text), ("console", [(commands, output)], skip reason or
    None), each with its line number."""
    out, mark, lines, i = [], None, text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        m = MARK.match(line)
        if m:
            mark = (m.group(1), m.group(2), i + 1)
            if m.group(1) == "policy" and m.group(2):
                out.append(("policy", None, m.group(2), i + 1))
                mark = None
        elif line.startswith("```"):
            lang, start = line[3:].strip(), i + 1
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            block = "\n".join(body) + "\n"
            if mark and mark[0] == "policy":
                out.append(("policy", block, None, start))
            elif mark and mark[0] == "file":
                out.append(("file", mark[1], block, start))
            elif lang == "console":
                out.append(("console", sessions(body), mark[1] if mark and mark[0] == "no"
                            else None, start))
            mark = None
        elif line.strip():
            mark = mark if line.startswith("<!--") else None
        i += 1
    return out


def sessions(body):
    """[(commands, expected output)] of a console block."""
    out = []
    for line in body:
        if line.startswith("$ "):
            if not out or out[-1][1]:
                out.append(([], []))
            out[-1][0].append(line[2:])
        elif line.startswith("> ") and out and not out[-1][1]:
            out[-1][0].append(line[2:])
        elif out:
            out[-1][1].append(line)
    return [(cmds, "\n".join(o).strip("\n")) for cmds, o in out]


def split_http(text):
    """(status line, [(name, value)], body) of curl -si output, or of a
    page's block (None when the text is not an HTTP answer)."""
    text = text.replace("\r\n", "\n")
    if not text.startswith("HTTP/"):
        return None
    head, _, body = text.partition("\n\n")
    lines = head.split("\n")
    headers = [tuple(x.strip() for x in l.split(":", 1)) for l in lines[1:]]
    return lines[0], [(n.lower(), v) for n, v in headers], body


def near(got, want, tolerance):
    return (isinstance(got, int) and isinstance(want, int) and (got == 0) == (want == 0)
            and abs(got - want) <= tolerance)


def seconds(s):
    """Envoy's protojson duration ("43.719027s") in seconds, or None."""
    m = re.match(r"^([0-9]+)(\.[0-9]+)?s$", s) if isinstance(s, str) else None
    return float(m.group(0)[:-1]) if m else None


def binding_aligned(want):
    """Whether an answer's top-level figures (its binding tier's) are those
    of a window aligned to the clock."""
    return isinstance(want, dict) and any(
        isinstance(t, dict) and t.get("algorithm") in ALIGNED and t.get("limit") == want.get("limit")
        for c in want.get("checks", []) if isinstance(c, dict) for t in c.get("tiers", []))


def same_json(got, want, path=""):
    """The first difference between two answers, or None."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or list(got) != list(want):
            return "%s: fields %r, page %r" % (path or "body", got, list(want))
        if list(want) == ["key", "value"] and str(want["key"]).lower() in TIME_HEADERS:
            # Envoy's responseHeadersToAdd: its windows are aligned to the clock.
            ok = got["key"] == want["key"] and str(got["value"]).isdigit()
            return None if ok else "%s: %r, page %r" % (path, got, want)
        aligned = want.get("algorithm") in ALIGNED or (path == "" and binding_aligned(want))
        for k in want:
            if k == "expires_ms":  # a lease's expiry: a Unix time
                if not (isinstance(got[k], int) and got[k] > 0):
                    return "%s.%s: %r" % (path, k, got[k])
                continue
            if k in TIME_FIELDS:
                ok = (isinstance(got[k], int) and (got[k] == 0) == (want[k] == 0)) if aligned \
                    else near(got[k], want[k], TOLERANCE_MS)
                if not ok:
                    return "%s.%s: %r, page %r" % (path, k, got[k], want[k])
                continue
            if k == "durationUntilReset":  # Envoy's windows are fixed, aligned to the clock
                if seconds(got[k]) is None or seconds(want[k]) is None:
                    return "%s.%s: %r, page %r" % (path, k, got[k], want[k])
                continue
            diff = same_json(got[k], want[k], "%s.%s" % (path, k))
            if diff:
                return diff
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return "%s: %r, page %r" % (path, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            diff = same_json(g, w, "%s[%d]" % (path, i))
            if diff:
                return diff
        return None
    if same_lease_ids(got, want):
        return None
    return None if got == want and type(got) is type(want) else \
        "%s: %r, page %r" % (path, got, want)


def same_lease_ids(got, want):
    """Whether two strings are the same lease ids (", "-separated) but for
    their random parts."""
    if not isinstance(got, str) or not isinstance(want, str):
        return False
    g, w = got.split(", "), want.split(", ")
    ms = [(LEASE_ID.match(a), LEASE_ID.match(b)) for a, b in zip(g, w)]
    return len(g) == len(w) and all(a and b and a.group(1) == b.group(1) for a, b in ms)


def same_header(name, got, want, aligned):
    """None if a header's value matches the page's."""
    if name in TIME_HEADERS:
        if aligned:
            return None if got.isdigit() and (got == "0") == (want == "0") else "%s: %s" % (name, got)
        if got.isdigit() and near(int(got), int(want), TOLERANCE_MS // 1000 + 1):
            return None
        return "%s: %s, page %s" % (name, got, want)
    if name == "x-ratelimit-lease" and same_lease_ids(got, want):
        return None
    if name == "ratelimit":  # "<name>";r=<remaining>;t=<seconds>: t is a time
        g, w = re.match(r'^(.*;t=)([0-9]+)$', got), re.match(r'^(.*;t=)([0-9]+)$', want)
        if g and w and g.group(1) == w.group(1) and \
                (aligned or near(int(g.group(2)), int(w.group(2)), TOLERANCE_MS // 1000 + 1)):
            return None
    return None if got == want else "%s: %s, page %s" % (name, got, want)


def compare_text(got, want):
    """Line by line: a line of JSON loosely (times), any other exactly."""
    g, w = got.strip("\n").split("\n"), want.split("\n")
    if len(g) != len(w):
        return "output %r, page %r" % (got, want)
    for gl, wl in zip(g, w):
        if gl == wl:
            continue
        try:
            diff = same_json(json.loads(gl), json.loads(wl))
        except ValueError:
            diff = "line %r, page %r" % (gl, wl)
        if diff:
            return diff
    return None


def contract(cmd, got):
    """Why docs/openapi.yaml does not describe the answer a `curl -si` run
    printed, or None (also for commands that print no HTTP answer)."""
    ans = split_http(got)
    m = re.search(r"\bcurl\b.*?\blocalhost:\d+(/[^\s'\"]*)", cmd)
    if ans is None or m is None:
        return None
    method = re.search(r"-X\s*([A-Z]+)", cmd)
    method = method.group(1) if method else "POST" if re.search(r"\s-d\s", cmd) else "GET"
    status = int(ans[0].split()[1])
    try:
        openapi_check.validate(method, m.group(1), status, dict(ans[1]), ans[2].encode())
    except openapi_check.ContractError as e:
        return str(e)
    return None


def compare(got, want):
    """The first way got differs from the page's want, or None."""
    g, w = split_http(got), split_http(want)
    if w is None:
        return compare_text(got, want)
    if g is None:
        return "not an HTTP answer: %r" % got[:300]
    if g[0] != w[0]:
        return "status %r, page %r" % (g[0], w[0])
    if [n for n, _ in g[1]] != [n for n, _ in w[1]]:
        return "headers %r, page %r" % (g[1], w[1])
    try:
        gbody, wbody = json.loads(g[2]), json.loads(w[2])
    except ValueError:
        return "body %r, page %r" % (g[2], w[2])
    # The headers follow the binding tier; when that is an aligned window
    # its times are the clock's.
    aligned = binding_aligned(wbody)
    for (name, gv), (_, wv) in zip(g[1], w[1]):
        if name == "content-length":
            if gv != str(len(g[2].encode())):
                return "Content-Length %s for a body of %d bytes" % (gv, len(g[2].encode()))
            continue
        diff = same_header(name, gv, wv, aligned)
        if diff:
            return diff
    return same_json(gbody, wbody)


def localize(policy, d, redis):
    """The page's policy with the test's addresses."""
    text, n = re.subn(r"(?m)^listen: .*$", "listen: 127.0.0.1:%d" % d.port, policy)
    if n == 0:
        text = "listen: 127.0.0.1:%d\n" % d.port + text
    if d.admin_port:
        text = re.sub(r"(?m)^admin_listen: .*$", "admin_listen: 127.0.0.1:%d" % d.admin_port, text)
    if re.search(r"(?m)^backend: memory$", text) is None:
        # A loaded test machine must not turn a slow reply into the
        # failure_mode's answer: the Redis deadline is 2 s here.
        url = "unix:" + redis.socket_path
        text = re.sub(r"(?m)^  timeout: .*$", "  timeout: 2s", text)
        text, n = re.subn(r"(?m)^  url: .*$", "  url: " + url, text)
        if n == 0 and re.search(r"(?m)^redis:$", text):
            text = re.sub(r"(?m)^redis:$", "redis:\n  url: " + url, text)
        elif n == 0:
            text = "redis:\n  url: %s\n  timeout: 2s\n" % url + text
    return text


class Page:
    """One page's run: its daemon, its working directory."""

    def __init__(self, path, redis):
        self.name = os.path.relpath(path, SRCDIR)
        self.redis = redis
        self.daemon = None
        self.cwd = harness.make_tempdir("rl-docs-")
        self.printed = {}  # block line -> [output of each session]

    def write(self, path):
        """Puts what each session printed into the page, as its output."""
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for start in sorted(self.printed, reverse=True):
            end = start
            while not lines[end].startswith("```"):
                end += 1
            body, new, n, in_cmd = lines[start:end], [], -1, False
            for l in body:
                if l.startswith("$ ") or (l.startswith("> ") and in_cmd):
                    if not in_cmd:
                        n += 1
                    in_cmd = True
                    new.append(l)
                    continue
                if in_cmd and n < len(self.printed[start]) and self.printed[start][n]:
                    new += self.printed[start][n].split("\n")
                in_cmd = False
            if in_cmd and n < len(self.printed[start]) and self.printed[start][n]:
                new += self.printed[start][n].split("\n")
            lines[start:end] = new
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))

    def stop(self):
        if self.daemon:
            harness.eq(self.daemon.stop(), 0, "%s: the daemon exits 0" % self.name)
            self.daemon = None

    def policy(self, text, path, line):
        self.stop()
        if text is None:
            with open(os.path.join(SRCDIR, path)) as f:
                text = f.read()
        self.redis.client().command("FLUSHALL")
        admin = re.search(r"(?m)^admin_listen: ", text) is not None
        d = Daemon("unix:" + self.redis.socket_path, "", admin=admin)
        with open(d.config, "w") as f:
            f.write(localize(text, d, self.redis))
        try:
            self.daemon = d.start()
            harness.ok(True, "%s:%d: the daemon runs the policy" % (self.name, line))
        except RuntimeError as e:
            harness.ok(False, "%s:%d: the daemon runs the policy" % (self.name, line))
            harness.diag(str(e)[-2000:])

    def file(self, name, text, line):
        text = self.addresses(text)
        with open(os.path.join(self.cwd, name), "w") as f:
            f.write(text)
        if not name.endswith(".go"):
            return
        if not shutil.which("go"):
            harness.skip("%s:%d: %s compiles (go is not installed)" % (self.name, line, name))
            return
        run = subprocess.run(["go", "build", "-o", os.devnull, name], cwd=self.cwd,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                             env=dict(os.environ, GOCACHE=os.path.join(self.cwd, ".gocache"),
                                      GO111MODULE="off", GOFLAGS=""))
        harness.ok(run.returncode == 0, "%s:%d: %s compiles" % (self.name, line, name))
        if run.returncode:
            harness.diag(run.stdout.decode("utf-8", "replace")[-2000:])

    def addresses(self, text):
        d = self.daemon
        if d:
            text = text.replace(CHECK_ADDR, "localhost:%d" % d.port)
            if d.admin_port:
                text = text.replace(ADMIN_ADDR, "localhost:%d" % d.admin_port)
        return text

    def console(self, groups, line):
        self.printed[line] = []
        for cmds, want in groups:
            what = "%s:%d: %s" % (self.name, line, cmds[-1][:90])
            if self.daemon is None:
                harness.ok(False, what + " (no policy before it: mark one)")
                continue
            script = self.addresses("\n".join(cmds))
            script = re.sub(r"\bredis-cli\b", "redis-cli -s " + self.redis.socket_path, script)
            run = subprocess.run(["sh", "-c", script], stdout=subprocess.PIPE, cwd=self.cwd,
                                 stderr=subprocess.STDOUT, timeout=120)
            # Not stripped: Content-Length counts the body's final newline.
            got = run.stdout.decode("utf-8", "replace").replace("\r\n", "\n")
            got = got.replace("localhost:%d" % self.daemon.port, CHECK_ADDR)
            self.printed[line].append(got.rstrip("\n"))
            diff = compare(got, want) or contract(cmds[-1], got)
            harness.ok(run.returncode == 0 and diff is None, what)
            if diff or run.returncode:
                harness.diag("exit status %d; %s" % (run.returncode, diff))
            if SHOW:
                harness.diag("printed:\n" + got)


def main():
    for tool in ("curl", "redis-cli"):
        if not shutil.which(tool):
            harness.skip_all("%s is not installed" % tool)
    redis = harness.RedisServer().start()
    total = 0
    for path in pages():
        with open(path, encoding="utf-8") as f:
            todo = items(f.read())
        page = Page(path, redis)
        for kind, a, b, line in todo:
            if kind == "policy":
                page.policy(a, b, line)
            elif kind == "file":
                page.file(a, b, line)
            elif b is not None:
                harness.skip("%s:%d: not run: %s" % (page.name, line, b))
            else:
                page.console(a, line)
                total += len(a)
        page.stop()
        if WRITE:
            page.write(path)
    harness.ok(total >= (1 if os.environ.get("DOCS_EXAMPLES_PAGES") else 25), "the pages have sessions to run (%d)" % total)


harness.run(main)
