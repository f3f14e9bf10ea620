# SPDX-License-Identifier: Apache-2.0
"""sfv.py: a strict parser of RFC 9651 Structured Field Values, for the tests
that check every RateLimit / RateLimit-Policy field the daemon sends.

Strict: anything RFC 9651 section 4.2 fails parsing on raises SFVError
(a trailing comma, a bad parameter key, an integer of 16 digits, a decimal
with 4 fraction digits, a non-ASCII or unescaped byte in a string, leading
or trailing garbage...). Values come back as Python objects:

  Item:        (bare, params)      params: list of (key, bare) in order
  Inner List:  ([Item, ...], params)
  bare:        int, Decimal, str (sf-string), Token, bytes, bool,
               Date, DisplayString

Run as a script for its own self-test (TAP).
"""
import base64
import decimal
import string
import sys


class SFVError(ValueError):
    pass


class Token(str):
    pass


class Date(int):
    pass


class DisplayString(str):
    pass


_KEY_FIRST = string.ascii_lowercase + "*"
_KEY_CHARS = string.ascii_lowercase + string.digits + "_-.*"
_TCHAR = "!#$%&'*+-.^_`|~" + string.digits + string.ascii_letters
_TOKEN_CHARS = _TCHAR + ":/"
_B64 = string.ascii_letters + string.digits + "+/="


class _Parser:
    def __init__(self, text):
        if not isinstance(text, str):
            raise SFVError("input must be str")
        try:
            text.encode("ascii")
        except UnicodeEncodeError:
            raise SFVError("non-ASCII input")
        self.s = text
        self.i = 0

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else ""

    def take(self):
        c = self.peek()
        if c == "":
            raise SFVError("unexpected end of input")
        self.i += 1
        return c

    def eof(self):
        return self.i >= len(self.s)

    def skip_sp(self):
        while self.peek() == " ":
            self.i += 1

    def skip_ows(self):
        while self.peek() in (" ", "\t") and self.peek() != "":
            self.i += 1

    def fail(self, what):
        raise SFVError("%s at offset %d in %r" % (what, self.i, self.s))

    # 4.2: leading and trailing SP are discarded, then everything must parse
    def top(self, kind):
        self.skip_sp()
        if kind == "list":
            out = self.list_()
        elif kind == "dictionary":
            out = self.dictionary()
        elif kind == "item":
            out = self.item()
        else:
            raise ValueError(kind)
        self.skip_sp()
        if not self.eof():
            self.fail("trailing characters")
        return out

    def list_(self):
        members = []
        while not self.eof():
            members.append(self.item_or_inner_list())
            self.skip_ows()
            if self.eof():
                return members
            if self.take() != ",":
                self.fail("expected ',' between list members")
            self.skip_ows()
            if self.eof():
                self.fail("trailing comma")
        return members

    def dictionary(self):
        out = []
        while not self.eof():
            key = self.key()
            if self.peek() == "=":
                self.i += 1
                member = self.item_or_inner_list()
            else:
                member = (True, self.parameters())
            out = [(k, v) for (k, v) in out if k != key] + [(key, member)]
            self.skip_ows()
            if self.eof():
                return out
            if self.take() != ",":
                self.fail("expected ',' between dictionary members")
            self.skip_ows()
            if self.eof():
                self.fail("trailing comma")
        return out

    def item_or_inner_list(self):
        if self.peek() == "(":
            return self.inner_list()
        return self.item()

    def inner_list(self):
        if self.take() != "(":
            self.fail("expected '('")
        items = []
        while not self.eof():
            self.skip_sp()
            if self.peek() == ")":
                self.i += 1
                return (items, self.parameters())
            items.append(self.item())
            if self.peek() not in (" ", ")"):
                self.fail("expected SP or ')' in inner list")
        self.fail("unterminated inner list")

    def item(self):
        bare = self.bare_item()
        return (bare, self.parameters())

    def parameters(self):
        params = []
        while self.peek() == ";":
            self.i += 1
            self.skip_sp()
            key = self.key()
            value = True
            if self.peek() == "=":
                self.i += 1
                value = self.bare_item()
            params = [(k, v) for (k, v) in params if k != key] + [(key, value)]
        return params

    def key(self):
        c = self.peek()
        if c == "" or c not in _KEY_FIRST:
            self.fail("invalid key start")
        start = self.i
        while self.peek() != "" and self.peek() in _KEY_CHARS:
            self.i += 1
        return self.s[start:self.i]

    def bare_item(self):
        c = self.peek()
        if c == "-" or c.isdigit() and c != "":
            return self.number()
        if c == '"':
            return self.string()
        if c == ":":
            return self.bytes_()
        if c == "?":
            return self.boolean()
        if c == "@":
            self.i += 1
            n = self.number()
            if not isinstance(n, int) or isinstance(n, bool):
                self.fail("a date must be an integer")
            return Date(n)
        if c == "%":
            return self.display_string()
        if c != "" and (c.isalpha() or c == "*"):
            return self.token()
        self.fail("invalid bare item")

    def number(self):
        sign = 1
        if self.peek() == "-":
            self.i += 1
            sign = -1
        if not (self.peek() != "" and self.peek().isdigit()):
            self.fail("expected a digit")
        start = self.i
        is_decimal = False
        while self.peek() != "" and (self.peek().isdigit() or self.peek() == "."):
            if self.peek() == ".":
                if is_decimal:
                    self.fail("two decimal points")
                if self.i - start > 12:
                    self.fail("decimal with more than 12 integer digits")
                is_decimal = True
            self.i += 1
            n = self.i - start
            if not is_decimal and n > 15:
                self.fail("integer with more than 15 digits")
            if is_decimal and n > 16:
                self.fail("decimal longer than 16 characters")
        text = self.s[start:self.i]
        if not is_decimal:
            return sign * int(text)
        if text.endswith("."):
            self.fail("decimal ends with '.'")
        if len(text.split(".")[1]) > 3:
            self.fail("decimal with more than 3 fraction digits")
        return sign * decimal.Decimal(text)

    def string(self):
        self.take()
        out = []
        while True:
            c = self.take()
            if c == "\\":
                c = self.take()
                if c not in ('"', "\\"):
                    self.fail("invalid escape in string")
                out.append(c)
            elif c == '"':
                return "".join(out)
            elif ord(c) < 0x20 or ord(c) > 0x7E:
                self.fail("invalid character in string")
            else:
                out.append(c)

    def token(self):
        start = self.i
        self.i += 1
        while self.peek() != "" and self.peek() in _TOKEN_CHARS:
            self.i += 1
        return Token(self.s[start:self.i])

    def bytes_(self):
        self.take()
        start = self.i
        while self.peek() != ":":
            c = self.take()
            if c not in _B64:
                self.fail("invalid character in byte sequence")
        text = self.s[start:self.i]
        self.i += 1
        try:
            return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except ValueError:
            self.fail("invalid base64")

    def boolean(self):
        self.take()
        c = self.take()
        if c == "1":
            return True
        if c == "0":
            return False
        self.fail("a boolean is ?0 or ?1")

    def display_string(self):
        self.take()
        if self.take() != '"':
            self.fail("expected '\"' after '%'")
        raw = bytearray()
        while True:
            c = self.take()
            if c == "%":
                h = self.take() + self.take()
                if any(x not in "0123456789abcdef" for x in h):
                    self.fail("invalid percent escape (lower-case hex)")
                raw.append(int(h, 16))
            elif c == '"':
                try:
                    return DisplayString(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    self.fail("invalid UTF-8 in display string")
            elif ord(c) < 0x20 or ord(c) > 0x7E:
                self.fail("invalid character in display string")
            else:
                raw.append(ord(c))


def parse_list(text):
    return _Parser(text).top("list")


def parse_item(text):
    return _Parser(text).top("item")


def parse_dictionary(text):
    return _Parser(text).top("dictionary")


def _selftest():
    n = 0
    bad = 0

    def check(cond, what):
        nonlocal n, bad
        n += 1
        print("%sok %d - %s" % ("" if cond else "not ", n, what))
        bad += 0 if cond else 1

    def fails(fn, text):
        try:
            fn(text)
        except SFVError:
            return True
        return False

    check(parse_list('"a";q=100;w=60, "b/c";q=5;w=1') ==
          [("a", [("q", 100), ("w", 60)]), ("b/c", [("q", 5), ("w", 1)])],
          "a RateLimit-Policy list")
    check(parse_item('"x";r=0;t=37') == ("x", [("r", 0), ("t", 37)]), "a RateLimit item")
    check(parse_list("  a, (b c);p=?1 , :aGk=:") ==
          [(Token("a"), []), ([(Token("b"), []), (Token("c"), [])], [("p", True)]),
           (b"hi", [])], "tokens, an inner list with a parameter, a byte sequence")
    check(parse_item("-999999999999999") == (-999999999999999, []), "the smallest integer")
    check(parse_item("1.125") == (decimal.Decimal("1.125"), []), "a decimal")
    check(parse_item('"a\\"b\\\\"') == ('a"b\\', []), "string escapes")
    check(parse_item("?0;a;b=?1") == (False, [("a", True), ("b", True)]), "booleans")
    check(parse_list("") == [], "an empty list")
    check(parse_dictionary("a=1, b;x, c=(1 2)")[1] == ("b", (True, [("x", True)])),
          "a dictionary with a bare key")
    check(parse_item('%"caf%c3%a9"') == (DisplayString("caf\u00e9"), []), "a display string")
    for text, what in [
        ("1000000000000000", "16-digit integer"),
        ("1.2345", "4 fraction digits"),
        ("1.", "decimal ending in '.'"),
        ('"a', "unterminated string"),
        ('"a\\n"', "bad escape"),
        ('"\u00e9"', "non-ASCII"),
        ('"a\tb"', "control character in a string"),
        ('"a";Q=1', "upper-case parameter key"),
        ('"a";q=', "parameter without value"),
        ('"a" "b"', "two items"),
        ('"a",', "trailing comma"),
        ("?2", "bad boolean"),
        (":a*b:", "bad base64 character"),
        ("(a b", "unterminated inner list"),
        ("1a", "garbage after an integer"),
        ('"a"\t', "trailing tab"),
        ("", "empty item"),
    ]:
        check(fails(parse_item if "," not in text else parse_list, text), "rejects " + what)
    check(fails(parse_list, '"a", '), "list: rejects a trailing comma")
    check(fails(parse_list, '"a";;q=1'), "list: rejects an empty parameter")
    print("1..%d" % n)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_selftest())
