#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""promtext.py: a strict parser of the Prometheus text exposition format
0.0.4, for tests that read GET /metrics. Standard library only.

    import promtext
    families = promtext.parse(text)
    promtext.value(families, "ratelimitd_checks_total", policy="login", decision="allowed")

parse(text) returns {family: {"type": ..., "help": ... or None,
"samples": [(name, {label: value}, float), ...]}}, families and samples in
the order of the text. Anything the format forbids, and a few things it
merely tolerates, raise ValueError("line N: ..."):

- a line that is not a HELP, a TYPE, a comment, blank, or a well-formed
  sample; text not ending with a newline;
- a metric name outside [a-zA-Z_:][a-zA-Z0-9_:]*, a label name outside
  [a-zA-Z_][a-zA-Z0-9_]* or starting with "__", a label twice in a sample;
- an escape other than \\\\, \\" and \\n in a label value (\\\\ and \\n in
  HELP text); a value that is not a decimal float, NaN, +Inf or -Inf (Go's
  ParseFloat, which the format cites, also takes inf, Infinity or nan in
  any case: no client library writes them, so they are refused here); a
  timestamp that is not an integer; HELP or TYPE without a name;
- a sample whose family has no TYPE before it (stricter than Prometheus,
  which would call it untyped); HELP or TYPE twice for a family, or after
  its first sample; a family that resumes after another began;
- a series (name and label set) twice;
- a counter below zero or NaN;
- a histogram series without le on _bucket, with le elsewhere, without a
  +Inf bucket, _sum or _count, whose buckets decrease as le grows, with
  two buckets at the same le, or whose _count differs from its +Inf
  bucket; a summary sample without a quantile in [0, 1].

Run as a program, it tests itself (TAP, through harness.py).
"""

import math
import re

TYPES = ("counter", "gauge", "histogram", "summary", "untyped")

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|NaN|[+-]?Inf")
_TIMESTAMP = re.compile(r"-?[0-9]+")
_BLANKS = re.compile(r"[ \t]*")

# The sample names of a family, by type: (suffix, ...).
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "untyped": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}


def _float(text, what):
    if not _FLOAT.fullmatch(text):
        raise ValueError("%s %r is not a float" % (what, text))
    return float(text)


def _unescape(text, allowed):
    """Undoes the escapes in text; allowed maps the character after a
    backslash to what it stands for."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text) or text[i + 1] not in allowed:
                raise ValueError("bad escape %r" % text[i : i + 2])
            out.append(allowed[text[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


_HELP_ESCAPES = {"\\": "\\", "n": "\n"}
_LABEL_ESCAPES = {"\\": "\\", "n": "\n", '"': '"'}


def _parse_labels(line, pos):
    """Reads {name="value",...} starting at line[pos] == "{"; returns
    (labels, position after "}")."""
    labels = {}
    pos += 1
    while True:
        pos = _BLANKS.match(line, pos).end()
        if line.startswith("}", pos):
            return labels, pos + 1
        m = _LABEL_NAME.match(line, pos)
        if not m:
            raise ValueError("bad label name at %r" % line[pos:])
        name = m.group()
        if name.startswith("__"):
            raise ValueError("label name %r is reserved" % name)
        if name in labels:
            raise ValueError("label %r twice" % name)
        m = re.compile(r'[ \t]*=[ \t]*"').match(line, m.end())
        if not m:
            raise ValueError('expected =" after label %r' % name)
        pos = m.end()
        end = pos
        while True:  # the closing quote: the first one not escaped
            if end >= len(line):
                raise ValueError("unterminated value of label %r" % name)
            if line[end] == "\\":
                end += 2
            elif line[end] == '"':
                break
            else:
                end += 1
        labels[name] = _unescape(line[pos:end], _LABEL_ESCAPES)
        pos = _BLANKS.match(line, end + 1).end()
        if line.startswith(",", pos):
            pos += 1
        elif not line.startswith("}", pos):
            raise ValueError("expected , or } after label %r" % name)


def _parse_sample(line):
    """One sample line -> (name, labels, value)."""
    pos = _BLANKS.match(line).end()
    m = _METRIC_NAME.match(line, pos)
    if not m:
        raise ValueError("bad metric name at %r" % line[pos:])
    name = m.group()
    pos = m.end()
    labels = {}
    if line.startswith("{", pos):
        labels, pos = _parse_labels(line, pos)
    rest = line[pos:]
    if rest[:1] not in (" ", "\t"):
        raise ValueError("expected a blank and a value after %r, got %r" % (name, rest))
    fields = re.split(r"[ \t]+", rest.strip(" \t"))  # not split(): a CR is an error
    if not fields or len(fields) > 2:
        raise ValueError("expected a value and an optional timestamp, got %r" % rest)
    value = _float(fields[0], "value")
    if len(fields) == 2 and not _TIMESTAMP.fullmatch(fields[1]):
        raise ValueError("timestamp %r is not an integer" % fields[1])
    return name, labels, value


def _family_of(name, families):
    """The family a sample name would belong to, among those declared."""
    for fam in families:
        if name in (fam + s for s in _SUFFIXES.get(families[fam]["type"] or "untyped")):
            return fam
    return None


def _check_sample(fam, ftype, name, labels, value):
    if ftype == "counter" and not value >= 0:  # NaN fails too
        raise ValueError("counter %s is %r" % (name, value))
    if ftype == "histogram":
        if name == fam + "_bucket":
            if "le" not in labels:
                raise ValueError("%s without le" % name)
            _float(labels["le"], "le")
        elif "le" in labels:
            raise ValueError("%s with le" % name)
        if name != fam + "_sum" and not value >= 0:
            raise ValueError("%s is %r" % (name, value))
    if ftype == "summary":
        if name == fam:
            q = _float(labels.get("quantile", ""), "quantile")
            if not 0 <= q <= 1:
                raise ValueError("quantile %r outside [0, 1]" % q)
        elif "quantile" in labels:
            raise ValueError("%s with quantile" % name)


def _check_histogram(fam, samples):
    """Per series (the labels other than le): buckets cumulative, +Inf
    present and equal to _count, _sum present."""
    series = {}
    for name, labels, value in samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        s = series.setdefault(key, {"buckets": {}, "sum": None, "count": None})
        if name == fam + "_bucket":
            le = float(labels["le"])
            if le in s["buckets"]:
                raise ValueError("%s%s: two buckets at le=%r" % (fam, dict(key), le))
            s["buckets"][le] = value
        else:
            s[name[len(fam) + 1 :]] = value
    for key, s in series.items():
        where = "%s%s" % (fam, "{%s}" % ",".join("%s=%r" % kv for kv in key) if key else "")
        if math.inf not in s["buckets"]:
            raise ValueError("%s: no +Inf bucket" % where)
        if s["count"] is None or s["sum"] is None:
            raise ValueError("%s: no _count or no _sum" % where)
        prev = 0.0
        for le in sorted(s["buckets"]):
            if s["buckets"][le] < prev:
                raise ValueError(
                    "%s: bucket le=%r holds %r, less than below it" % (where, le, s["buckets"][le])
                )
            prev = s["buckets"][le]
        if s["count"] != s["buckets"][math.inf]:
            raise ValueError(
                "%s: _count %r differs from the +Inf bucket %r"
                % (where, s["count"], s["buckets"][math.inf])
            )


def parse(text):
    """Parses a whole exposition; see the module's comment. Raises
    ValueError naming the line of the first problem."""
    if text and not text.endswith("\n"):
        raise ValueError("the text does not end with a newline")
    families = {}
    seen_series = set()
    current = None  # the family of the last HELP, TYPE or sample
    lineno = 0
    try:
        for lineno, line in enumerate(text.split("\n")[:-1], 1):
            if not line.strip(" \t"):
                continue
            if line.startswith("#"):
                words = line[1:].lstrip(" \t").split(None, 2) if line[1:2] in (" ", "\t") else []
                if not words or words[0] not in ("HELP", "TYPE"):
                    continue  # a comment
                if len(words) < 2:
                    raise ValueError("%s without a metric name" % words[0])
                kind, fam = words[0], words[1]
                if not _METRIC_NAME.fullmatch(fam):
                    raise ValueError("bad metric name %r" % fam)
                if fam in families and fam != current:
                    raise ValueError("family %s resumes after another family" % fam)
                f = families.setdefault(fam, {"type": None, "help": None, "samples": []})
                current = fam
                if f["samples"]:
                    raise ValueError("%s for %s after its samples" % (kind, fam))
                if kind == "HELP":
                    if f["help"] is not None:
                        raise ValueError("second HELP for %s" % fam)
                    # The text is everything after one blank past the name.
                    m = re.match(r"#[ \t]+HELP[ \t]+\S+(?:[ \t](.*))?\Z", line)
                    f["help"] = _unescape(m.group(1) or "", _HELP_ESCAPES)
                else:
                    if f["type"] is not None:
                        raise ValueError("second TYPE for %s" % fam)
                    if len(words) < 3 or words[2].strip(" \t") not in TYPES:
                        raise ValueError("bad TYPE line %r" % line)
                    f["type"] = words[2].strip(" \t")
                continue

            name, labels, value = _parse_sample(line)
            fam = _family_of(name, {current: families[current]} if current else {})
            if fam is None:
                earlier = _family_of(name, {k: v for k, v in families.items() if v["type"]})
                if earlier is not None:
                    raise ValueError("family %s resumes after another family" % earlier)
                raise ValueError("sample %s without a TYPE line for its family" % name)
            f = families[fam]
            if f["type"] is None:
                raise ValueError("sample %s without a TYPE line for its family" % name)
            _check_sample(fam, f["type"], name, labels, value)
            key = (name, frozenset(labels.items()))
            if key in seen_series:
                raise ValueError("series %s%r twice" % (name, labels))
            seen_series.add(key)
            f["samples"].append((name, labels, value))
    except ValueError as e:
        raise ValueError("line %d: %s" % (lineno, e)) from None
    for fam, f in families.items():
        if f["type"] == "histogram":
            _check_histogram(fam, f["samples"])
    return families


def value(families, name, **labels):
    """The value of the one sample called name with exactly these labels
    (given as strings or anything str() makes right); KeyError if none."""
    want = {k: str(v) for k, v in labels.items()}
    for f in families.values():
        for sname, slabels, v in f["samples"]:
            if sname == name and slabels == want:
                return v
    raise KeyError("no sample %s%r" % (name, want))


# -------------------------------------------------------------- self-test

GOOD = """\
# A comment, then an empty line.

# HELP ratelimitd_build_info Always 1; the version label names the build.
# TYPE ratelimitd_build_info gauge
ratelimitd_build_info{version="a\\"b\\\\c\\nd"} 1
# TYPE ratelimitd_checks_total counter
# HELP ratelimitd_checks_total Checks, by policy\\nand decision \\\\ more.
ratelimitd_checks_total{policy="login",decision="allowed"} 2
ratelimitd_checks_total{decision="denied",policy="login"} 1
ratelimitd_checks_total{policy="api" , decision="allowed",} 0 1700000000000
# HELP ratelimitd_redis_request_duration_seconds Round-trip time.
# TYPE ratelimitd_redis_request_duration_seconds histogram
ratelimitd_redis_request_duration_seconds_bucket{le="0.0001"} 2
ratelimitd_redis_request_duration_seconds_bucket{le="0.001"} 2
ratelimitd_redis_request_duration_seconds_bucket{le="1"} 4
ratelimitd_redis_request_duration_seconds_bucket{le="+Inf"} 5
ratelimitd_redis_request_duration_seconds_sum 2.002251
ratelimitd_redis_request_duration_seconds_count 5
# TYPE rpc_duration_seconds summary
rpc_duration_seconds{quantile="0.5"} 4773
rpc_duration_seconds{quantile="0.99"} NaN
rpc_duration_seconds_sum -1.7560473e+07
rpc_duration_seconds_count 2693
# TYPE weird_gauge gauge
weird_gauge{a="+Inf"} +Inf
weird_gauge{a="-Inf"}\t-Inf\t-5
weird_gauge{a=".5"} .5e-3
# TYPE empty_family counter
# HELP no_type_no_samples A family with HELP only and nothing else.
# TYPE ratelimitd_policies gauge
ratelimitd_policies 2
"""

GOOD_EXPECTED = {
    "ratelimitd_build_info": {
        "type": "gauge",
        "help": "Always 1; the version label names the build.",
        "samples": [("ratelimitd_build_info", {"version": 'a"b\\c\nd'}, 1.0)],
    },
    "ratelimitd_checks_total": {
        "type": "counter",
        "help": "Checks, by policy\nand decision \\ more.",
        "samples": [
            ("ratelimitd_checks_total", {"policy": "login", "decision": "allowed"}, 2.0),
            ("ratelimitd_checks_total", {"policy": "login", "decision": "denied"}, 1.0),
            ("ratelimitd_checks_total", {"policy": "api", "decision": "allowed"}, 0.0),
        ],
    },
    "ratelimitd_redis_request_duration_seconds": {
        "type": "histogram",
        "help": "Round-trip time.",
        "samples": [
            ("ratelimitd_redis_request_duration_seconds_bucket", {"le": "0.0001"}, 2.0),
            ("ratelimitd_redis_request_duration_seconds_bucket", {"le": "0.001"}, 2.0),
            ("ratelimitd_redis_request_duration_seconds_bucket", {"le": "1"}, 4.0),
            ("ratelimitd_redis_request_duration_seconds_bucket", {"le": "+Inf"}, 5.0),
            ("ratelimitd_redis_request_duration_seconds_sum", {}, 2.002251),
            ("ratelimitd_redis_request_duration_seconds_count", {}, 5.0),
        ],
    },
}

# A valid histogram family, to break one rule at a time.
_H = "# TYPE h histogram\n"
_HOK = 'h_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n'

# (what is broken, text, a substring of the message)
BAD = [
    ("no newline at the end", "# TYPE a gauge\na 1", "newline"),
    ("sample with no TYPE at all", "a 1\n", "without a TYPE"),
    ("sample after HELP only", "# HELP a x\na 1\n", "without a TYPE"),
    ("sample of another family than the TYPE", "# TYPE a gauge\nb 1\n", "without a TYPE"),
    ("counter sample with a histogram suffix", "# TYPE a counter\na_count 1\n", "without a TYPE"),
    ("HELP twice", "# HELP a x\n# HELP a y\n# TYPE a gauge\na 1\n", "second HELP"),
    ("TYPE twice", "# TYPE a gauge\n# TYPE a gauge\na 1\n", "second TYPE"),
    ("TYPE after the samples", "# HELP a x\na 1\n# TYPE a gauge\n", "without a TYPE"),
    ("TYPE after a typed sample", "# TYPE a gauge\na 1\n# TYPE a gauge\n", "after its samples"),
    ("HELP after the samples", "# TYPE a gauge\na 1\n# HELP a x\n", "after its samples"),
    ("interleaved samples", "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"1\"} 2\n", "resumes"),
    (
        "family declared again later",
        "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# HELP a x\n",
        "resumes",
    ),
    ("unknown TYPE", "# TYPE a counters\na 1\n", "bad TYPE"),
    ("TYPE without a type", "# TYPE a\na 1\n", "bad TYPE"),
    ("HELP without a name", "# HELP\n", "without a metric name"),
    ("bad metric name in TYPE", "# TYPE 1a gauge\n", "bad metric name"),
    ("bad metric name in a sample", "# TYPE a gauge\na-b 1\n", "expected a blank"),
    ("sample name starting with a digit", "# TYPE a gauge\n9a 1\n", "bad metric name"),
    ("bad label name", '# TYPE a gauge\na{1x="v"} 1\n', "bad label name"),
    ("label name with a dash", '# TYPE a gauge\na{x-y="v"} 1\n', "expected ="),
    ("reserved label name", '# TYPE a gauge\na{__name__="v"} 1\n', "reserved"),
    ("label twice", '# TYPE a gauge\na{x="1",x="2"} 1\n', "twice"),
    ("unquoted label value", "# TYPE a gauge\na{x=v} 1\n", 'expected ="'),
    ("unterminated label value", '# TYPE a gauge\na{x="v} 1\n', "unterminated"),
    ("missing comma between labels", '# TYPE a gauge\na{x="1" y="2"} 1\n', "expected , or }"),
    ("bad escape in a label value", '# TYPE a gauge\na{x="\\t"} 1\n', "bad escape"),
    ("escaped quote in HELP", '# HELP a say \\"hi\\"\n# TYPE a gauge\na 1\n', "bad escape"),
    ("backslash at the end of HELP", "# HELP a x\\\n# TYPE a gauge\na 1\n", "bad escape"),
    ("value not a number", "# TYPE a gauge\na abc\n", "not a float"),
    ("value with underscores", "# TYPE a gauge\na 1_000\n", "not a float"),
    ("hexadecimal value", "# TYPE a gauge\na 0x10\n", "not a float"),
    ("inf, not canonical", "# TYPE a gauge\na inf\n", "not a float"),
    ("Infinity, not canonical", "# TYPE a gauge\na +Infinity\n", "not a float"),
    ("two dots", "# TYPE a gauge\na 1.0.0\n", "not a float"),
    ("no value", "# TYPE a gauge\na\n", "expected a blank"),
    ("no value after labels", '# TYPE a gauge\na{x="1"}\n', "expected a blank"),
    ("text after the label block", '# TYPE a gauge\na{x="1"}z 1\n', "expected a blank"),
    ("fractional timestamp", "# TYPE a gauge\na 1 12.5\n", "timestamp"),
    ("three fields", "# TYPE a gauge\na 1 2 3\n", "optional timestamp"),
    ("a CRLF line end", "# TYPE a gauge\na 1\r\n", "not a float"),
    ("no value, trailing blanks", "# TYPE a gauge\na  \t\n", "not a float"),
    ("duplicate series", '# TYPE a gauge\na{x="1",y="2"} 1\na{y="2",x="1"} 2\n', "twice"),
    ("duplicate unlabelled series", "# TYPE a gauge\na 1\na 1\n", "twice"),
    ("negative counter", "# TYPE a_total counter\na_total -1\n", "counter"),
    ("NaN counter", "# TYPE a_total counter\na_total NaN\n", "counter"),
    (
        "buckets not cumulative",
        _H + 'h_bucket{le="1"} 2\nh_bucket{le="2"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n',
        "less than",
    ),
    (
        "buckets not cumulative, written out of order",
        _H + 'h_bucket{le="2"} 1\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n',
        "less than",
    ),
    ("no +Inf bucket", _H + 'h_bucket{le="1"} 1\nh_sum 3\nh_count 1\n', "no +Inf"),
    ("_count differs from +Inf", _H + _HOK.replace("h_count 2", "h_count 3"), "differs"),
    ("no _count", _H + _HOK.replace("h_count 2\n", ""), "no _count"),
    ("no _sum", _H + _HOK.replace("h_sum 3\n", ""), "no _sum"),
    ("bucket without le", _H + _HOK + 'h_bucket{x="1"} 1\n', "without le"),
    ("le not a float", _H + 'h_bucket{le="one"} 1\n' + _HOK, "not a float"),
    ("two buckets at one le", _H + 'h_bucket{le="1.0"} 1\n' + _HOK, "two buckets"),
    ("_sum with le", _H + 'h_bucket{le="+Inf"} 2\nh_sum{le="1"} 3\nh_count 2\n', "with le"),
    ("bare histogram name", _H + _HOK + "h 1\n", "without a TYPE"),
    (
        "negative bucket",
        _H + 'h_bucket{le="1"} -1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n',
        "is -1",
    ),
    (
        "a second histogram series missing +Inf",
        _H + _HOK + 'h_bucket{x="a",le="1"} 1\nh_sum{x="a"} 1\nh_count{x="a"} 1\n',
        "no +Inf",
    ),
    ("summary without quantile", "# TYPE s summary\ns 1\ns_sum 1\ns_count 1\n", "quantile"),
    ("summary quantile above 1", '# TYPE s summary\ns{quantile="2"} 1\n', "outside"),
]


def _self_test():
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness

    def main():
        fams = parse(GOOD)
        for fam, want in GOOD_EXPECTED.items():
            harness.eq(fams.get(fam), want, "good text: family %s parsed exactly" % fam)
        harness.eq(
            list(fams),
            [
                "ratelimitd_build_info",
                "ratelimitd_checks_total",
                "ratelimitd_redis_request_duration_seconds",
                "rpc_duration_seconds",
                "weird_gauge",
                "empty_family",
                "no_type_no_samples",
                "ratelimitd_policies",
            ],
            "good text: every family, in order",
        )
        harness.eq(
            fams["empty_family"],
            {"type": "counter", "help": None, "samples": []},
            "good text: a TYPE with no samples",
        )
        harness.eq(fams["no_type_no_samples"]["type"], None, "good text: a HELP alone has no type")
        harness.eq(
            value(fams, "ratelimitd_checks_total", decision="denied", policy="login"),
            1.0,
            "value(): labels in any order",
        )
        harness.eq(value(fams, "ratelimitd_policies"), 2.0, "value(): no labels")
        harness.eq(
            value(fams, "ratelimitd_redis_request_duration_seconds_bucket", le="+Inf"),
            5.0,
            "value(): a bucket",
        )
        harness.ok(math.isnan(value(fams, "rpc_duration_seconds", quantile="0.99")), "value(): NaN")
        harness.eq(
            value(fams, "weird_gauge", a="-Inf"), -math.inf, "value(): -Inf, with a timestamp"
        )
        harness.eq(value(fams, "weird_gauge", a=".5"), 0.0005, "value(): .5e-3")
        try:
            value(fams, "ratelimitd_checks_total", policy="login")
            harness.ok(False, "value(): a partial label set is not a match")
        except KeyError:
            harness.ok(True, "value(): a partial label set is not a match")
        harness.eq(parse(""), {}, "the empty text is valid and empty")
        harness.eq(list(parse("# just a comment\n\n")), [], "comments and blank lines only")
        harness.eq(parse(_H + _HOK)["h"]["type"], "histogram", "the reference histogram is valid")

        for what, text, message in BAD:
            try:
                parse(text)
                harness.ok(False, "bad text rejected: %s" % what)
            except ValueError as e:
                if not harness.ok(message in str(e), "bad text rejected: %s" % what):
                    harness.diag("message %r does not contain %r" % (str(e), message))
        try:
            parse("# TYPE a gauge\na 1\n\n# TYPE b gauge\nb x\n")
            harness.ok(False, "a message names its line")
        except ValueError as e:
            harness.ok(str(e).startswith("line 5: "), "a message names its line (%s)" % e)

    harness.run(main)


if __name__ == "__main__":
    _self_test()
