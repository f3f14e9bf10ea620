# SPDX-License-Identifier: Apache-2.0
"""test_readme.py: the README's "Examples" run as written. Every command
block of that section is pasted into sh, as a reader would paste it, against
the real daemon on the example policy (conf/ratelimitd.yaml with only its
listen address and redis.url changed, for a free port and the test's Redis);
the output must be the one the README shows.

What cannot repeat exactly is compared loosely: times (reset_ms,
retry_after_ms, X-RateLimit-Reset, Retry-After) within a tolerance, keeping
zero as zero, and not at all for a window aligned to the clock (fixed_window,
sliding_window_counter); Content-Length must match the body it came with.
Everything else (status lines, header names and order, every other field and
number) must be identical."""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR", ".")
README_ADDR = "localhost:8080"
TIME_FIELDS = ("reset_ms", "retry_after_ms")
TIME_HEADERS = ("x-ratelimit-reset", "retry-after")
TOLERANCE_MS = 5000  # a slow machine: eleven curl processes, the daemon's start
ALIGNED = ("fixed_window", "sliding_window_counter")  # reset depends on the clock


def section(text, title):
    start = text.index("\n## %s\n" % title)
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def examples(text):
    """[(commands, expected output)] of every indented block whose first
    line starts with "$ "; the commands are its leading "$ " lines."""
    blocks, cur = [], None
    for line in text.split("\n"):
        if line.startswith("    ") or (line == "" and cur is not None):
            body = line[4:]
            if cur is None:
                if not body.startswith("$ "):
                    continue
                cur = ([], [])
                blocks.append(cur)
            if body.startswith("$ ") and not cur[1]:
                cur[0].append(body[2:])
            else:
                cur[1].append(body)
        else:
            cur = None
    return [(cmds, "\n".join(out).strip("\n")) for cmds, out in blocks]


def split_http(text):
    """(status line, [(name, value)], body) of curl -si output, or of a
    README block (None when the text is not an HTTP answer)."""
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


def same_json(got, want, path=""):
    """The first difference between two answers, or None."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or list(got) != list(want):
            return "%s: fields %r, README %r" % (path or "body", got, list(want))
        aligned = want.get("algorithm") in ALIGNED
        for k in want:
            if k in TIME_FIELDS:
                ok = (isinstance(got[k], int) and (got[k] == 0) == (want[k] == 0)) if aligned \
                    else near(got[k], want[k], TOLERANCE_MS)
                if not ok:
                    return "%s.%s: %r, README %r" % (path, k, got[k], want[k])
                continue
            diff = same_json(got[k], want[k], "%s.%s" % (path, k))
            if diff:
                return diff
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return "%s: %r, README %r" % (path, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            diff = same_json(g, w, "%s[%d]" % (path, i))
            if diff:
                return diff
        return None
    return None if got == want and type(got) is type(want) else \
        "%s: %r, README %r" % (path, got, want)


def compare(got, want):
    """The first way got differs from the README's want, or None."""
    g, w = split_http(got), split_http(want)
    if w is None:
        return None if got.strip("\n") == want else "output %r, README %r" % (got, want)
    if g is None:
        return "not an HTTP answer: %r" % got[:300]
    if g[0] != w[0]:
        return "status %r, README %r" % (g[0], w[0])
    if [n for n, _ in g[1]] != [n for n, _ in w[1]]:
        return "headers %r, README %r" % (g[1], w[1])
    for (name, gv), (_, wv) in zip(g[1], w[1]):
        if name == "content-length":
            if gv != str(len(g[2].encode())):
                return "Content-Length %s for a body of %d bytes" % (gv, len(g[2].encode()))
        elif name in TIME_HEADERS:
            if not (gv.isdigit() and near(int(gv), int(wv), TOLERANCE_MS // 1000 + 1)):
                return "%s: %s, README %s" % (name, gv, wv)
        elif gv != wv:
            return "%s: %s, README %s" % (name, gv, wv)
    try:
        return same_json(json.loads(g[2]), json.loads(w[2]))
    except ValueError:
        return "body %r, README %r" % (g[2], w[2])


def main():
    if not shutil.which("curl"):
        harness.skip_all("curl is not installed")
    with open(os.path.join(SRCDIR, "README.md")) as f:
        blocks = examples(section(f.read(), "Examples"))
    harness.ok(len(blocks) >= 5, "the Examples section has its command blocks (%d)" % len(blocks))
    redis = harness.RedisServer().start()
    d = Daemon("unix:" + redis.socket_path, "")
    with open(os.path.join(SRCDIR, "conf", "ratelimitd.yaml")) as f:
        conf = f.read()
    conf, n1 = re.subn(r"(?m)^listen: 127\.0\.0\.1:8080$", "listen: 127.0.0.1:%d" % d.port, conf)
    conf, n2 = re.subn(r"(?m)^  url: redis://127\.0\.0\.1:6379/0$",
                       "  url: unix:" + redis.socket_path, conf)
    harness.eq((n1, n2), (1, 1), "the example policy listens on 8080 and uses the local Redis")
    with open(d.config, "w") as f:
        f.write(conf)
    d.start()
    for cmds, want in blocks:
        script = "\n".join(cmds).replace(README_ADDR, "localhost:%d" % d.port)
        run = subprocess.run(["sh", "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=60)
        # Not stripped: Content-Length counts the body's final newline.
        got = run.stdout.decode("utf-8", "replace").replace("\r\n", "\n")
        diff = compare(got, want)
        harness.ok(run.returncode == 0 and diff is None,
                   "as the README shows: %s" % cmds[-1][:100])
        if diff:
            harness.diag(diff)
    harness.eq(d.stop(), 0, "exits 0")


harness.run(main)
