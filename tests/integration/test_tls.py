# SPDX-License-Identifier: Apache-2.0
"""test_tls.py: ratelimitd to Redis over TLS (rediss:// and redis.tls),
against real redis-server processes with --tls-port (TAP).

The test makes its own PKI with `openssl` in a temp dir: a CA, a server
certificate for 127.0.0.1 (subjectAltName IP:127.0.0.1, DNS:localhost), a
client certificate signed by the same CA, and a second, unrelated CA.

Two servers listen on 127.0.0.1 with TLS only (their unix sockets serve the
test's own plain client): A with --tls-auth-clients optional and a password
(requirepass), B with --tls-auth-clients yes.

- A with ca_file: checks work (and land on A), /readyz 200; the limit holds
  over TLS; the reset listener works over TLS (DELETE answers notified >= 1,
  then the key starts afresh); server_name: localhost works too.
- server_name that the certificate does not carry: refused, a log line
  naming the certificate, /readyz 503, failure_mode answers (open: 200,
  closed: 503).
- ca_file of the other CA: the same.
- verify: false with the other CA: connects and decides.
- B without cert_file: refused (/readyz 503, failure_mode answers); with
  cert_file and key_file: works.
- A reload that changes redis.tls is refused, naming the field.
- An encrypted client key_file: the daemon, started on a terminal, exits 1
  at once naming the key, with no passphrase prompt (OpenSSL's default
  would prompt and wait).

Skipped when redis-server or openssl is missing, or redis-server was built
without TLS.
"""
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

PASSWORD = "tls-s3cret"
POLICY = (
    "policies:\n"
    "  open:\n"
    "    failure_mode: open\n"
    "    tiers: [{name: t, algorithm: fixed_window, limit: 3, window: 1h}]\n"
    "  closed:\n"
    "    failure_mode: closed\n"
    "    tiers: [{name: t, algorithm: fixed_window, limit: 3, window: 1h}]\n")


def openssl(*args, cwd):
    proc = subprocess.run(["openssl"] + list(args), cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), proc.stdout.decode()))


def make_pki(d):
    """ca.crt, server.{crt,key}, client.{crt,key} and other-ca.crt in d."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", *ec, "-keyout", ca + ".key", "-out", ca + ".crt",
                "-subj", "/CN=ratelimitd test " + ca, "-days", "2", cwd=d)
    exts = {
        "server": "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        "client": "extendedKeyUsage=clientAuth\n",
    }
    for name, ext in exts.items():
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext)
        openssl("req", *ec, "-keyout", name + ".key", "-out", name + ".csr",
                "-subj", "/CN=ratelimitd test " + name, cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", name + ".ext",
                cwd=d)
    return {n: os.path.join(d, n) for n in ("ca.crt", "other-ca.crt", "server.crt",
                                             "server.key", "client.crt", "client.key")}


def tls_server(pki, auth_clients, password=None):
    """A redis-server with TLS on a free port of 127.0.0.1; (server, port)."""
    port = harness.free_port()
    args = ["--tls-port", str(port), "--tls-cert-file", pki["server.crt"],
            "--tls-key-file", pki["server.key"], "--tls-ca-cert-file", pki["ca.crt"],
            "--tls-auth-clients", auth_clients, "--bind", "127.0.0.1"]
    if password:
        args += ["--requirepass", password]
    return harness.RedisServer(extra_args=args).start(), port


class TlsDaemon(Daemon):
    """A Daemon whose redis: section also holds `tls` (YAML lines, indented
    for inside redis:)."""

    def __init__(self, url, tls, **kwargs):
        self.tls = tls
        super().__init__(url, POLICY, admin=True, **kwargs)

    def write_config(self, policy, **kwargs):
        super().write_config(policy, **kwargs)
        with open(self.config) as f:
            text = f.read()
        text = re.sub(r"(  key_prefix: .*\n)", lambda m: m.group(1) + self.tls, text, count=1)
        with open(self.config + ".tmp", "w") as f:
            f.write(text)
        os.rename(self.config + ".tmp", self.config)


def tls_lines(**fields):
    return "  tls:\n" + "".join("    %s: %s\n" % kv for kv in fields.items())


def statuses(d, key):
    """Statuses of 4 checks of key by the open policy."""
    return [d.check("open", key).status for _ in range(4)]


def works(what, url, tls, client=None, key="k"):
    """A daemon on url with tls decides: 3 allowed, then 429; with client
    (a plain connection to the same server) the counter is there. Returns
    the daemon, running."""
    d = TlsDaemon(url, tls)
    try:
        d.start()
    except RuntimeError as e:
        harness.ok(False, "%s: the daemon gets ready" % what)
        harness.diag(str(e))
        return None
    harness.eq(d.admin("/readyz").status, 200, "%s: /readyz 200" % what)
    harness.eq(statuses(d, key), [200, 200, 200, 429], "%s: the limit holds over TLS" % what)
    if client is not None:
        harness.eq(harness.fixed_window_count(client, "rl:{open:%s}:t" % key), "3",
                   "%s: the counter is on the TLS server" % what)
    return d


def refused(what, url, tls, log_word="certificate"):
    """A daemon on url with tls must refuse the server: a log line with
    log_word, /readyz 503, failure_mode answers."""
    d = TlsDaemon(url, tls)
    d.start(wait_ready=False)
    try:
        harness.wait_until(lambda: re.search(r"(?i)" + log_word, d.logs()) is not None, 10,
                           what="a log line about the %s" % log_word)
        seen = True
    except TimeoutError:
        seen = False
    line = next((l for l in d.logs().splitlines() if re.search(r"(?i)" + log_word, l)), "")
    if not harness.ok(seen, "%s: refused with a log line naming the %s: %s" % (what, log_word,
                                                                               line)):
        harness.diag(d.logs()[-2000:])
    harness.eq(d.admin("/readyz").status, 503, "%s: /readyz 503" % what)
    r = d.check("open", "x")
    harness.ok(r.status == 200 and r.json and r.json.get("allowed") is True,
               "%s: failure_mode open answers allowed (%r)" % (what, r))
    harness.eq(d.check("closed", "x").status, 503, "%s: failure_mode closed answers 503" % what)
    harness.eq(d.stop(), 0, "%s: exits 0" % what)


def check_reset(d, client, key):
    """DELETE through the admin API over a TLS daemon: the reset listener
    (its own TLS connection) hears it, and the key starts afresh."""
    def notified():
        r = d.request("DELETE", "/v1/keys/open/" + key, port=d.admin_port)
        return r.status == 200 and r.json.get("notified", 0) >= 1

    try:
        harness.wait_until(notified, 10, what="the reset listener to hear a DELETE")
        ok = True
    except TimeoutError:
        ok = False
    harness.ok(ok, "reset over TLS: DELETE answers notified >= 1 (the listener is subscribed)")
    harness.eq(harness.fixed_window_count(client, "rl:{open:%s}:t" % key), None,
               "reset over TLS: the key is gone from the server")
    harness.eq(statuses(d, key), [200, 200, 200, 429], "reset over TLS: the key starts afresh")


def check_reload_refused(d):
    d.tls = d.tls.replace("    ca_file:", "    server_name: localhost\n    ca_file:", 1)
    d.write_config(POLICY)
    d.send_signal(signal.SIGHUP)
    try:
        harness.wait_until(lambda: "reload refused" in d.logs(), 5, what="the refused reload")
    except TimeoutError:
        pass
    harness.ok("field=redis.tls.server_name" in d.logs(),
               "a reload changing redis.tls.server_name is refused, naming it")
    harness.eq(d.check("open", "after-reload").status, 200, "and the daemon keeps deciding")


def encrypted_key(pki, tmp, url):
    """A passphrase-protected client key: refused at start, never prompted
    for, even on a terminal."""
    enc = os.path.join(tmp, "client-enc.key")
    openssl("pkey", "-in", pki["client.key"], "-aes256", "-passout", "pass:secret", "-out", enc,
            cwd=tmp)
    d = TlsDaemon(url, tls_lines(ca_file=pki["ca.crt"], cert_file=pki["client.crt"],
                                 key_file=enc))
    d.write_config(POLICY)
    binary = harness.find_program("RATELIMITD", "./ratelimitd")
    rc, out = harness.run_on_tty([binary, "--config", d.config])
    harness.ok(rc == 1 and "redis.tls: key_file %s: the key is encrypted" % enc in out
               and "pass phrase" not in out.lower(),
               "an encrypted redis.tls key_file: exit 1 at once, no passphrase prompt (%s)" % rc)
    if rc != 1:
        harness.diag(out[-1000:])


def main():
    if not harness.find_program("REDIS_SERVER", "redis-server"):
        harness.skip_all("redis-server not found")
    if not shutil.which("openssl"):
        harness.skip_all("openssl not installed (tools/deps.sh installs it)")
    tmp = harness.make_tempdir("rl-tls-")
    pki = make_pki(tmp)
    try:
        a, port_a = tls_server(pki, "optional", PASSWORD)
    except RuntimeError as e:
        if "tls" in str(e).lower():
            harness.skip_all("redis-server built without TLS: %s" % str(e).splitlines()[0])
        raise
    b, port_b = tls_server(pki, "yes")
    ca = tls_lines(ca_file=pki["ca.crt"])
    url_a = "rediss://:%s@127.0.0.1:%d/0" % (PASSWORD, port_a)
    url_b = "rediss://127.0.0.1:%d/0" % port_b

    with a.client() as ca_client:
        ca_client.command("AUTH", PASSWORD)
        d = works("ca_file, password", url_a, ca, client=ca_client, key="k1")
        if d:
            check_reset(d, ca_client, "k1")
            check_reload_refused(d)
            harness.eq(d.stop(), 0, "exits 0")
        d = works("server_name: localhost", url_a,
                  tls_lines(ca_file=pki["ca.crt"], server_name="localhost"), client=ca_client,
                  key="k2")
        if d:
            harness.eq(d.stop(), 0, "server_name: localhost: exits 0")
        d = works("verify: false with another CA", url_a,
                  tls_lines(ca_file=pki["other-ca.crt"], verify="false"), client=ca_client,
                  key="k3")
        if d:
            harness.eq(d.stop(), 0, "verify: false: exits 0")

    refused("server_name not in the certificate", url_a,
            tls_lines(ca_file=pki["ca.crt"], server_name="redis.example"))
    refused("another CA", url_a, tls_lines(ca_file=pki["other-ca.crt"]))
    # TLS 1.3: the server's alert "certificate required" comes after the
    # client's handshake, on the first read.
    refused("no client certificate where one is required", url_b, ca)

    with b.client() as cb:
        d = works("client certificate", url_b,
                  tls_lines(ca_file=pki["ca.crt"], cert_file=pki["client.crt"],
                            key_file=pki["client.key"]), client=cb, key="k4")
        if d:
            harness.eq(d.stop(), 0, "client certificate: exits 0")
    encrypted_key(pki, tmp, url_b)


harness.run(main)
