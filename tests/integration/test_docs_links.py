# SPDX-License-Identifier: Apache-2.0
"""test_docs_links.py: the Markdown of README.md, docs/*.md and CHANGELOG.md
(when there is one) holds together, without a daemon.

- Every heading is well formed: `#` to `######`, one space, text, and no
  leftovers of a broken conversion (`&lt;`, `lt;`, a `#` run inside it); no
  heading jumps a level; no two headings of one page share an anchor.
- Every relative link (`[text](path)`, `[text](path#anchor)`,
  `[text](#anchor)`) names a file or directory of the tree, and every
  anchor is a heading of the page it points into (GitHub's slugs), outside
  code blocks.
- Every page of docs/ and the README have a table of contents between
  `<!-- toc -->` and `<!-- /toc -->` that lists exactly the page's `##` and
  `###` headings, in order. DOCS_TOC_WRITE=1 rewrites them (for a writer).

Links to other sites are not fetched: CI has no network but Debian's."""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR", ".")
WRITE = os.environ.get("DOCS_TOC_WRITE") == "1"
LINK = re.compile(r"(?<!\!)\[([^\]]*)\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
TOC_START, TOC_END = "<!-- toc -->", "<!-- /toc -->"


def pages():
    out = [os.path.join(SRCDIR, "README.md")] + sorted(glob.glob(os.path.join(SRCDIR, "docs",
                                                                                "*.md")))
    changelog = os.path.join(SRCDIR, "CHANGELOG.md")
    return out + ([changelog] if os.path.exists(changelog) else [])


def prose(text):
    """[(line number, line)] outside fenced and indented code blocks."""
    out, fence, prev_blank = [], None, True
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            prev_blank = False
            continue
        if stripped.startswith("```") or stripped.startswith("~~~"):
            fence = stripped[:3]
            continue
        if line.startswith("    ") and prev_blank:
            continue  # an indented code block (stays one while lines are indented)
        prev_blank = line.strip() == "" or (line.startswith("    ") and prev_blank)
        out.append((n, line))
    return out


def slug(title):
    """GitHub's anchor of a heading."""
    s = re.sub(r"`|\*\*|\*|_(?=\W)|(?<=\W)_", "", title)  # markup, not text
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)
    s = s.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def headings(text):
    """[(line, level, title, anchor)] with GitHub's -1, -2 for repeats."""
    out, seen = [], {}
    for n, line in prose(text):
        m = re.match(r"^(#{1,6}) (.*)$", line)
        if not m:
            continue
        base = slug(m.group(2))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append((n, len(m.group(1)), m.group(2), base if k == 0 else "%s-%d" % (base, k)))
    return out


def toc(heads):
    lines = []
    for _, level, title, anchor in heads:
        if level in (2, 3):
            lines.append("%s- [%s](#%s)" % ("  " * (level - 2), title.replace("`", ""), anchor))
    return "\n".join(lines)


def check_headings(name, text):
    bad = []
    for n, line in prose(text):
        if line.startswith("#") and not re.match(r"^#{1,6} \S", line):
            bad.append("%d: %r" % (n, line))
        elif re.match(r"^#{1,6} ", line) and re.search(r"&lt;|&gt;|\blt;|\bgt;|#{2,}", line[7:]):
            bad.append("%d: %r" % (n, line))
        elif re.search(r"\S ?#{2,} \S", line) and not line.startswith("#") and "`" not in line:
            bad.append("%d: a heading inside a line: %r" % (n, line))
    harness.ok(not bad, "%s: every heading is well formed" % name)
    for b in bad:
        harness.diag(b)
    heads = headings(text)
    jumps = ["%d: %s" % (n, t) for (n, lv, t, _), (_, plv, _, _) in zip(heads[1:], heads)
             if lv > plv + 1]
    harness.ok(not jumps, "%s: no heading skips a level" % name)
    for j in jumps:
        harness.diag(j)
    h1 = [h for h in heads if h[1] == 1]
    harness.eq(len(h1), 1, "%s: one title" % name)
    return heads


def check_toc(path, name, text, heads):
    if TOC_START not in text:
        harness.ok(False, "%s: has a table of contents (%s ... %s)" % (name, TOC_START, TOC_END))
        return text
    want = toc(heads)
    start = text.index(TOC_START) + len(TOC_START)
    end = text.find(TOC_END, start)
    got = text[start:end].strip("\n") if end >= 0 else None
    if WRITE and got != want:
        tail = text[end + len(TOC_END):] if end >= 0 else text[start:]
        text = text[:start] + "\n" + want + "\n" + TOC_END + tail
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        got = want
    harness.ok(got == want, "%s: the table of contents lists every heading" % name)
    if got != want:
        harness.diag("run with DOCS_TOC_WRITE=1; it should be:\n" + want)
    return text


def main():
    anchors, texts = {}, {}
    for path in pages():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        name = os.path.relpath(path, SRCDIR)
        heads = check_headings(name, text)
        if name != "CHANGELOG.md":
            text = check_toc(path, name, text, heads)
        anchors[os.path.abspath(path)] = {h[3] for h in heads}
        texts[path] = text
    links = 0
    for path, text in texts.items():
        name = os.path.relpath(path, SRCDIR)
        bad = []
        for n, line in prose(text):
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                target = m.group(2) or m.group(3)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # https:, mailto:
                file, _, anchor = target.partition("#")
                dest = os.path.abspath(os.path.join(os.path.dirname(path), file)) if file \
                    else os.path.abspath(path)
                links += 1
                if not os.path.exists(dest):
                    bad.append("%d: %s: no such file" % (n, target))
                elif anchor and dest.endswith(".md"):
                    if dest not in anchors:
                        with open(dest, encoding="utf-8") as f:
                            anchors[dest] = {h[3] for h in headings(f.read())}
                    if anchor not in anchors[dest]:
                        bad.append("%d: %s: no such heading" % (n, target))
        harness.ok(not bad, "%s: every relative link and anchor resolves" % name)
        for b in bad:
            harness.diag(b)
    harness.ok(links >= 50, "the pages have relative links (%d)" % links)


harness.run(main)
