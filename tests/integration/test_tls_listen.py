# SPDX-License-Identifier: Apache-2.0
"""test_tls_listen.py: TLS on ratelimitd's own listeners (tls, grpc_tls,
admin_tls), against the real daemon (backend: memory: no Redis needed), its
clients real too: curl, Python's ssl, a grpcio secure channel, nginx
auth_request to an https:// upstream (TAP).

The PKI is made with the openssl command in a temp dir: a CA, a second
unrelated CA, server certificates for localhost and 127.0.0.1 with their
serials (0x1001, 0x1002, ...), a client certificate from each CA, and an
expired server certificate (openssl ca with -startdate/-enddate in the
past).

- -t: a client_auth: require without client_ca_file is refused at its
  file:line:col; a key that is not the certificate's, a garbage
  certificate, grpc_tls without grpc_listen: refused, naming the file and
  OpenSSL's reason; an expired certificate passes with a warning; an
  encrypted key is refused at once, without a passphrase prompt on the
  terminal (-t run on a pty).
- HTTPS (client_auth: request, two workers): curl without and with a client
  certificate gets 200, ALPN http/1.1; curl trusting the other CA refuses
  the server; a client certificate of the other CA is refused. A reload
  to client_auth: require: a new connection without a certificate is
  refused, with one it works. Metrics: handshakes by result, the
  certificate's notAfter.
- gRPC with mTLS (grpc_tls, require): ShouldRateLimit answers OK over a
  secure channel (ALPN h2); without a client certificate, or with one of
  the other CA, the call fails UNAVAILABLE; a client offering ALPN without
  h2 is refused in the handshake (no_application_protocol), one offering
  no ALPN gets HTTP/2 all the same.
- Rotation under load: a thread keeps one keep-alive connection and opens
  new ones without pause while the certificate and key files are
  replaced and SIGHUP sent: no request fails, the keep-alive connection
  is never dropped, new connections present the new serial; a second
  rotation is noticed by watch: true alone; a garbage certificate then is
  refused with the file's name and OpenSSL's reason, and new connections
  keep the old serial.
- 300 pipelined requests in one TLS write (more than the pipeline holds):
  every one answered. A request and the client's close_notify in one
  segment: answered, then the connection closed at once.
- admin_tls added by a reload: the admin port answers over HTTPS and no
  longer in plain text; removed again, plain text again.
- Slowloris: a connection sending nothing, and one sending half a
  ClientHello, on listen and grpc_listen, are closed at idle_timeout;
  counted as aborted handshakes.
- max_connections: past it, a TLS connection gets 503 (after its
  handshake) and the ones below it keep working.
- An expired certificate is served (the daemon warns) and curl refuses it.
- nginx auth_request to https://ratelimitd/auth/... with proxy_ssl_verify
  and a client certificate: allowed, then 403 past the limit.

Skipped when openssl or curl is missing; the gRPC and nginx parts skip
when python3-grpcio or nginx is missing.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

IDLE = 1.0  # idle_timeout of the daemons, seconds
POLICY = """policies:
  p: {tiers: [{name: t, algorithm: fixed_window, limit: 1000000, window: 1h}]}
  three: {key: "${ip}", tiers: [{name: t, algorithm: fixed_window, limit: 3, window: 1h}]}
domains:
  - domain: edge
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1000}
"""


class Pki:
    """Certificates made with the openssl command in dir d."""

    def __init__(self, d):
        self.d = d
        for ca in ("ca", "otherca"):
            self.run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                     "-nodes", "-days", "30", "-subj", "/CN=" + ca, "-keyout", ca + ".key",
                     "-out", ca + ".pem")
        with open(self.path("san.ext"), "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")

    def path(self, name):
        return os.path.join(self.d, name)

    def run(self, *args):
        p = subprocess.run(["openssl"] + list(args), cwd=self.d, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        if p.returncode:
            raise RuntimeError("openssl %s: %s" % (" ".join(args), p.stdout.decode()))

    def issue(self, name, serial, ca="ca", server=True):
        """name.pem and name.key, signed by ca, with that serial."""
        self.run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", "/CN=" + name, "-keyout", name + ".key", "-out", name + ".csr")
        self.run("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                 "-set_serial", str(serial), "-days", "30", "-out", name + ".pem",
                 *(["-extfile", "san.ext"] if server else []))
        return self.path(name + ".pem"), self.path(name + ".key")

    def issue_expired(self, name):
        """A server certificate valid in 2020 only (openssl ca: x509 -req has
        no start date on OpenSSL 3.0)."""
        db = self.path("db")
        os.makedirs(db, exist_ok=True)
        open(os.path.join(db, "index.txt"), "w").close()
        with open(self.path("ca.cnf"), "w") as f:
            f.write("[ca]\ndefault_ca = d\n[d]\ndir = %s\ndatabase = $dir/index.txt\n"
                    "new_certs_dir = $dir\nserial = $dir/serial\ndefault_md = sha256\n"
                    "policy = any\ncopy_extensions = none\n[any]\ncommonName = supplied\n"
                    "[ext]\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n" % db)
        with open(os.path.join(db, "serial"), "w") as f:
            f.write("0E01\n")
        self.run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", "/CN=" + name, "-keyout", name + ".key", "-out", name + ".csr")
        self.run("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
                 "-in", name + ".csr", "-out", name + ".pem", "-extensions", "ext",
                 "-startdate", "20200101000000Z", "-enddate", "20200201000000Z", "-notext")
        return self.path(name + ".pem"), self.path(name + ".key")


def tls_block(name, cert, key, ca=None, auth=None):
    text = "%s:\n  cert_file: %s\n  key_file: %s\n" % (name, cert, key)
    if ca:
        text += "  client_ca_file: %s\n" % ca
    if auth:
        text += "  client_auth: %s\n" % auth
    return text


def curl(port, pki, path="/check", body='{"policy":"p","key":"k"}', ca="ca", cert=None,
         verbose=False):
    """(curl's exit code, HTTP status or 0, stderr)."""
    argv = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
            "--cacert", pki.path(ca + ".pem"), "-X", "POST", "-d", body,
            "https://localhost:%d%s" % (port, path)]
    if cert:
        argv += ["--cert", pki.path(cert + ".pem"), "--key", pki.path(cert + ".key")]
    if verbose:
        argv.insert(1, "-v")
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.decode().strip()
    return p.returncode, int(out) if out.isdigit() else 0, p.stderr.decode("utf-8", "replace")


def client_context(pki, ca="ca", cert=None):
    ctx = ssl.create_default_context(cafile=pki.path(ca + ".pem"))
    if cert:
        ctx.load_cert_chain(pki.path(cert + ".pem"), pki.path(cert + ".key"))
    return ctx


def metric(d, name, labels):
    text = d.admin("/metrics").body.decode()
    m = re.search(r"^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


def check_only(config_text, tmp, name):
    """ratelimitd -t on a file: (exit code, stderr + stdout)."""
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(config_text)
    p = subprocess.run([harness.find_program("RATELIMITD", "./ratelimitd"), "-t", "-c", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), path


def check_only_tty(config_text, tmp, name, timeout=10):
    """ratelimitd -t on a file, on a terminal of its own (a pty): (exit code
    or None if it was still running after timeout, what it wrote)."""
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(config_text)
    binary = harness.find_program("RATELIMITD", "./ratelimitd")
    return harness.run_on_tty([binary, "-t", "-c", path], timeout)


def check_validation(pki, tmp):
    cert, key = pki.path("srv1.pem"), pki.path("srv1.key")
    base = "listen: 127.0.0.1:1\nbackend: memory\n" + POLICY
    rc, out, path = check_only(base + "tls:\n  cert_file: %s\n  key_file: %s\n"
                               "  client_auth: require\n" % (cert, key), tmp, "noca")
    harness.ok(rc == 1 and re.search(re.escape(path) + r":\d+:\d+: tls.client_auth: require "
                                     r"needs client_ca_file", out),
               "-t: client_auth: require without client_ca_file is refused at file:line:col")
    if rc != 1:
        harness.diag(out)
    rc, out, _ = check_only(base + tls_block("tls", cert, pki.path("srv2.key")), tmp, "mismatch")
    harness.ok(rc == 1 and "key_file %s" % pki.path("srv2.key") in out
               and "key values mismatch" in out,
               "-t: a key that is not the certificate's is refused, naming it and the reason")
    if rc != 1:
        harness.diag(out)
    with open(pki.path("garbage.pem"), "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    rc, out, _ = check_only(base + tls_block("tls", pki.path("garbage.pem"), key), tmp, "garbage")
    harness.ok(rc == 1 and "cert_file %s" % pki.path("garbage.pem") in out and "error:" in out,
               "-t: a garbage certificate is refused, naming the file and OpenSSL's reason")
    harness.diag(out.strip())
    # An encrypted key: refused at once, even with a terminal OpenSSL would
    # otherwise prompt on for a passphrase (and wait there).
    pki.run("pkey", "-in", "srv1.key", "-aes256", "-passout", "pass:secret", "-out", "enc.key")
    rc, out = check_only_tty(base + tls_block("tls", cert, pki.path("enc.key")), tmp, "encrypted")
    harness.ok(rc == 1 and "key_file %s: the key is encrypted" % pki.path("enc.key") in out
               and "pass phrase" not in out,
               "-t on a terminal: an encrypted key is refused at once, no passphrase prompt")
    if rc != 1:
        harness.diag("rc %r: %r" % (rc, out))
    rc, out, _ = check_only(base + tls_block("grpc_tls", cert, key), tmp, "nogrpc")
    harness.ok(rc == 1 and "grpc_tls: applies only with grpc_listen" in out,
               "-t: grpc_tls without grpc_listen is refused")
    rc, out, _ = check_only(base + tls_block("tls", pki.path("expired.pem"),
                                             pki.path("expired.key")), tmp, "expired")
    harness.ok(rc == 0 and "certificate %s expired" % pki.path("expired.pem") in out,
               "-t: an expired certificate passes with a warning")
    if rc != 0:
        harness.diag(out)


class Rotation:
    """A client thread: one keep-alive connection and a new connection per
    round, without pause, recording failures and the serials new
    connections see."""

    def __init__(self, port, pki):
        self.port, self.ctx = port, client_context(pki)
        self.stop = threading.Event()
        self.failures, self.serials, self.requests, self.keepalive_conns = [], [], 0, 1
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run)

    def one(self, conn):
        conn.request("POST", "/check", body=json.dumps({"policy": "p", "key": "rot"}))
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError("status %d" % r.status)

    def run(self):
        keep = http.client.HTTPSConnection("localhost", self.port, context=self.ctx, timeout=10)
        while not self.stop.is_set():
            try:
                self.one(keep)
            except (OSError, RuntimeError, http.client.HTTPException) as e:
                self.failures.append("keep-alive: %r" % e)
                keep.close()
                keep = http.client.HTTPSConnection("localhost", self.port, context=self.ctx,
                                                   timeout=10)
                self.keepalive_conns += 1
            new = http.client.HTTPSConnection("localhost", self.port, context=self.ctx,
                                              timeout=10)
            try:
                self.one(new)
                serial = new.sock.getpeercert()["serialNumber"]
                with self.lock:
                    self.serials.append(int(serial, 16))
            except (OSError, RuntimeError, http.client.HTTPException, KeyError) as e:
                self.failures.append("new connection: %r" % e)
            new.close()
            self.requests += 2
        keep.close()

    def last_serial(self):
        with self.lock:
            return self.serials[-1] if self.serials else None


def replace(pki, name, target):
    """Puts name's certificate and key in place of target's as a rotation
    does: new files renamed over the old ones."""
    for ext in (".pem", ".key"):
        shutil.copy(pki.path(name + ext), pki.path(target + ext + ".new"))
        os.rename(pki.path(target + ext + ".new"), pki.path(target + ext))


def check_https(pki, tmp):
    for name, serial in (("live", 0x1001),):
        shutil.copy(pki.path("srv1.pem"), pki.path(name + ".pem"))
        shutil.copy(pki.path("srv1.key"), pki.path(name + ".key"))
    cert, key = pki.path("live.pem"), pki.path("live.key")
    # Two workers: each takes the new snapshot's context on a reload.
    extra = ("backend: memory\nworkers: 2\nwatch: true\nidle_timeout: %gs\n" % IDLE
             + tls_block("tls", cert, key, pki.path("ca.pem"), "request"))
    d = Daemon(None, POLICY, extra=extra, admin=True)
    d.start()
    failed = harness.failed_count()
    rc, status, err = curl(d.port, pki, verbose=True)
    harness.ok(rc == 0 and status == 200, "HTTPS /check without a client certificate: 200")
    harness.ok("ALPN: server accepted http/1.1" in err, "ALPN on listen: http/1.1")
    rc, status, _ = curl(d.port, pki, cert="client")
    harness.ok(rc == 0 and status == 200, "HTTPS /check with a client certificate: 200")
    rc, status, err = curl(d.port, pki, ca="otherca")
    harness.ok(rc == 60 and status == 0, "a client trusting another CA refuses the server")
    rc, status, _ = curl(d.port, pki, cert="otherclient")
    harness.ok(rc != 0 and status == 0,
               "client_auth: request: a client certificate of another CA is refused")
    ok = metric(d, "ratelimitd_tls_handshakes_total", 'listener="listen",result="ok"')
    bad = metric(d, "ratelimitd_tls_handshakes_total",
                 'listener="listen",result="client_certificate"')
    harness.ok(ok is not None and ok >= 2 and bad is not None and bad >= 1,
               "metrics: handshakes completed and refused for the client certificate")
    not_after = metric(d, "ratelimitd_tls_certificate_not_after_seconds", 'listener="listen"')
    harness.ok(not_after is not None and 29 * 86400 < not_after - time.time() < 31 * 86400,
               "metrics: the certificate's notAfter, 30 days ahead")

    # client_auth: require, by a reload.
    d.write_config(POLICY, extra=extra.replace("client_auth: request", "client_auth: require"))
    # The watch (on) and SIGHUP each reload: wait for the new rule itself, not
    # for a count of reload lines, which the other reload can satisfy early.
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: curl(d.port, pki)[0] != 0, what="the reload to require")
    rc, status, _ = curl(d.port, pki)
    harness.ok(rc != 0 and status == 0,
               "after a reload to client_auth: require, no client certificate: refused")
    rc, status, _ = curl(d.port, pki, cert="client")
    harness.ok(rc == 0 and status == 200, "client_auth: require with a client certificate: 200")
    d.write_config(POLICY, extra=extra)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: curl(d.port, pki)[1] != 0, what="the reload back to request")

    check_pipelined(d.port, pki)
    check_close_notify(d.port, pki)
    check_rotation(d, pki)
    check_slowloris(d.port, "listen", d)
    check_admin_tls(d, pki, extra)
    if harness.failed_count() > failed:
        harness.diag(harness.tail(d.logfile))
    d.stop()


def check_rotation(d, pki):
    rot = Rotation(d.port, pki)
    rot.thread.start()
    harness.wait_until(lambda: rot.last_serial() == 0x1001, what="a first request")
    time.sleep(0.3)
    n = d.logs().count("policies reloaded")
    replace(pki, "srv2", "live")
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: rot.last_serial() == 0x1002, timeout=10,
                       what="new connections with the new certificate")
    # (the watch may reload after SIGHUP did, with nothing left to change)
    lines = [x for x in d.logs().splitlines() if "policies reloaded" in x][n:]
    harness.ok(any("fields_changed=tls.cert_file" in x for x in lines),
               "the reload's line says the certificate changed (same path)")
    time.sleep(0.3)
    # watch: true notices the next one alone.
    replace(pki, "srv3", "live")
    harness.wait_until(lambda: rot.last_serial() == 0x1003, timeout=10,
                       what="the watch to load the third certificate")
    time.sleep(0.3)
    # A broken one is refused, and the third stays.
    reloads = d.logs().count("reload failed")
    with open(pki.path("live.pem.new"), "w") as f:
        f.write("garbage\n")
    os.rename(pki.path("live.pem.new"), pki.path("live.pem"))
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: d.logs().count("reload failed") > reloads, what="the refusal")
    time.sleep(0.3)
    n = len(rot.serials)
    time.sleep(0.3)
    rot.stop.set()
    rot.thread.join(30)
    harness.eq(rot.failures[:3], [], "rotation under load: no request failed (%d requests)"
               % rot.requests)
    harness.eq(rot.keepalive_conns, 1, "rotation under load: the keep-alive connection lived on")
    harness.ok(0x1002 in rot.serials and 0x1003 in rot.serials,
               "new connections presented the second (SIGHUP) and third (watch) serials")
    harness.ok(len(rot.serials) > n and set(rot.serials[n:]) == {0x1003},
               "after a garbage certificate, new connections keep the loaded one")
    line = [x for x in d.logs().splitlines() if "reload failed" in x][-1:]
    harness.ok(line and "cert_file %s" % pki.path("live.pem") in line[0]
               and "error:" in line[0],
               "the refused reload names the certificate file and OpenSSL's reason")
    harness.diag(line[0] if line else d.logs()[-2000:])
    replace(pki, "srv3", "live")  # something valid for the rest


def check_close_notify(port, pki):
    """A request and the client's close_notify in one segment: the answer,
    then the daemon closes at once (not at idle_timeout, as when the
    close_notify read with the request was forgotten)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(pki).wrap_bio(inc, out, server_hostname="localhost")
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            raw.sendall(out.read())
            data = raw.recv(65536)
            if not data:
                raise RuntimeError("the daemon closed during the handshake")
            inc.write(data)
    raw.sendall(out.read())
    body = json.dumps({"policy": "p", "key": "notify"})
    tls.write(("POST /check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    try:
        tls.unwrap()  # queues close_notify, then would wait for the daemon's
    except ssl.SSLWantReadError:
        pass
    raw.sendall(out.read())  # the request and the close_notify together
    t0, got, closed = time.monotonic(), b"", None
    while time.monotonic() - t0 < 5:
        data = raw.recv(65536)
        if not data:
            closed = time.monotonic() - t0
            break
        inc.write(data)
        try:
            got += tls.read(65536)
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            pass
    raw.close()
    harness.ok(b"HTTP/1.1 200" in got and closed is not None and closed < IDLE / 2,
               "a request with the client's close_notify in one segment: answered, then closed "
               "at once (%r s, idle_timeout %g s)" % (closed, IDLE))


def check_pipelined(port, pki, n=300):
    """n requests in one write over TLS: more than the pipeline holds, so
    the daemon stops reading with requests decrypted and waiting inside
    OpenSSL, and must take them up again when answers have gone."""
    body = json.dumps({"policy": "p", "key": "pipe"})
    one = ("POST /check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode()
    s = client_context(pki).wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                        server_hostname="localhost")
    got = b""
    try:
        s.sendall(one * n)
        deadline = time.monotonic() + 20
        while got.count(b"HTTP/1.1 200") < n and time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError as e:
        harness.diag("pipelined: %r" % e)
    finally:
        s.close()
    harness.eq(got.count(b"HTTP/1.1 200"), n,
               "%d pipelined requests in one TLS write: every one answered" % n)


def check_admin_tls(d, pki, extra):
    """admin_tls added by a reload: the admin port moves to HTTPS for new
    connections; removed again, back to plain text."""
    block = tls_block("admin_tls", pki.path("srv1.pem"), pki.path("srv1.key"))
    n = d.logs().count("policies reloaded")
    d.write_config(POLICY, extra=extra + block)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: d.logs().count("policies reloaded") > n, what="the reload")
    p = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time",
                        "10", "--cacert", pki.path("ca.pem"),
                        "https://localhost:%d/healthz" % d.admin_port], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    harness.eq(p.stdout, b"200", "admin_tls added by a reload: /healthz over HTTPS")
    lines = [x for x in d.logs().splitlines() if "policies reloaded" in x][n:]
    harness.ok(any("admin_tls.cert_file" in x for x in lines),
               "the reload's line names admin_tls's fields")
    try:
        d.admin("/healthz", timeout=5)
        plain = "answered"
    except (OSError, http.client.HTTPException):
        plain = "refused"
    harness.eq(plain, "refused", "admin_tls: plain HTTP on the admin port gets no answer")
    n = d.logs().count("policies reloaded")
    d.write_config(POLICY, extra=extra)
    d.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: d.logs().count("policies reloaded") > n, what="the reload")
    harness.eq(d.admin("/healthz").status, 200, "admin_tls removed by a reload: plain again")


def client_hello_half():
    """The first half of a real ClientHello, made with an ssl memory BIO."""
    ctx = ssl.create_default_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = out.read()
    return hello[:len(hello) // 2]


def closed_within(port, payload, limit):
    """Seconds until the daemon closes a connection that sent payload and
    then nothing, or None past limit."""
    s = socket.create_connection(("127.0.0.1", port), timeout=limit)
    start = time.monotonic()
    try:
        if payload:
            s.sendall(payload)
        while True:
            try:
                if not s.recv(4096):
                    return time.monotonic() - start
            except ConnectionResetError:
                return time.monotonic() - start
    except socket.timeout:
        return None
    finally:
        s.close()


def check_slowloris(port, listener, d):
    before = metric(d, "ratelimitd_tls_handshakes_total",
                    'listener="%s",result="aborted"' % listener) or 0
    for what, payload in (("nothing", b""), ("half a ClientHello", client_hello_half())):
        t = closed_within(port, payload, 10)
        harness.ok(t is not None and IDLE * 0.8 <= t <= IDLE + 4,
                   "%s: a connection sending %s is closed at idle_timeout (%s s)"
                   % (listener, what, "%.2f" % t if t is not None else "never"))
    after = metric(d, "ratelimitd_tls_handshakes_total",
                   'listener="%s",result="aborted"' % listener) or 0
    harness.ok(after - before >= 2, "%s: those count as aborted handshakes" % listener)


def check_max_connections(pki):
    cert, key = pki.path("srv1.pem"), pki.path("srv1.key")
    extra = "backend: memory\nmax_connections: 16\n" + tls_block("tls", cert, key)
    d = Daemon(None, POLICY, extra=extra, admin=True)
    d.start()
    ctx = client_context(pki)
    conns = []
    body = json.dumps({"policy": "p", "key": "m"})
    statuses = []
    for _ in range(17):
        c = http.client.HTTPSConnection("localhost", d.port, context=ctx, timeout=10)
        c.request("POST", "/check", body=body)
        r = c.getresponse()
        r.read()
        statuses.append(r.status)
        conns.append(c)
    harness.eq((statuses[:16].count(200), statuses[16]), (16, 503),
               "max_connections 16: 16 TLS connections answered, the 17th gets 503")
    conns[0].request("POST", "/check", body=body)
    r = conns[0].getresponse()
    r.read()
    harness.eq(r.status, 200, "the connections below max_connections keep working")
    for c in conns:
        c.close()
    d.stop()


def check_expired(pki):
    extra = "backend: memory\n" + tls_block("tls", pki.path("expired.pem"),
                                            pki.path("expired.key"))
    d = Daemon(None, POLICY, extra=extra, admin=True)
    d.start()
    harness.ok("TLS certificate is not valid now" in d.logs() and "expired" in d.logs(),
               "an expired certificate: the daemon warns at start")
    rc, status, err = curl(d.port, pki)
    harness.ok(rc == 60 and "expired" in err, "an expired certificate: curl refuses it")
    d.stop()


def check_grpc(pki):
    try:
        import rls_client as rc
        if rc._missing():
            raise ImportError(rc._missing())
        rc._load()
    except ImportError as e:
        harness.skip("gRPC over TLS: %s" % e)
        return
    grpc = rc.grpc
    cert, key = pki.path("srv1.pem"), pki.path("srv1.key")
    gport = harness.free_port()
    extra = ("backend: memory\ngrpc_listen: 127.0.0.1:%d\nidle_timeout: %gs\n" % (gport, IDLE)
             + tls_block("grpc_tls", cert, key, pki.path("ca.pem"), "require"))
    d = Daemon(None, POLICY, extra=extra, admin=True)
    d.start()

    def channel(cert_name):
        def read(n):
            with open(pki.path(n), "rb") as f:
                return f.read()
        creds = grpc.ssl_channel_credentials(
            root_certificates=read("ca.pem"),
            private_key=read(cert_name + ".key") if cert_name else None,
            certificate_chain=read(cert_name + ".pem") if cert_name else None)
        return grpc.secure_channel("localhost:%d" % gport, creds,
                                   options=[("grpc.enable_retries", 0)])

    ch = channel("client")
    resp = rc.should_rate_limit(ch, "edge", [[("path", "/x")]])
    harness.eq(resp.overall_code, rc.CODE_OK, "gRPC over TLS with a client certificate: OK")
    ch.close()
    for name, what in ((None, "no client certificate"), ("otherclient", "another CA's")):
        ch = channel(name)
        try:
            rc.should_rate_limit(ch, "edge", [[("path", "/x")]], timeout=5)
            code = None
        except grpc.RpcError as e:
            code = e.code()
        harness.eq(code, grpc.StatusCode.UNAVAILABLE, "gRPC, client_auth require, %s: refused"
                   % what)
        ch.close()
    rc_, status, err = curl(gport, pki, path="/", cert="client", verbose=True)
    harness.ok("ALPN: server accepted h2" in err, "ALPN on grpc_listen: h2")
    # A client offering ALPN without h2 (HTTP/1.1 sent to the gRPC port):
    # refused in the handshake (RFC 7301's no_application_protocol), where
    # it used to go on and be answered a GOAWAY it cannot read.
    ctx = client_context(pki, cert="client")
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        with socket.create_connection(("127.0.0.1", gport), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                tls.recv(100)
        refused = ""
    except (ssl.SSLError, OSError) as e:
        refused = str(e)
    harness.ok("NO APPLICATION PROTOCOL" in refused.upper().replace("_", " "),
               "grpc_listen: a client offering ALPN without h2 is refused "
               "(no_application_protocol): %r" % refused)
    ctx = client_context(pki, cert="client")  # no ALPN at all: h2 with prior knowledge
    with socket.create_connection(("127.0.0.1", gport), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            head = tls.recv(9)
    harness.ok(len(head) == 9 and head[3] == 4,
               "grpc_listen: a client offering no ALPN speaks h2 all the same (SETTINGS back)")
    check_slowloris(gport, "grpc_listen", d)
    d.stop()


def start_nginx(nginx, rl_port, pki):
    tmp = harness.make_tempdir("rl-nginx-")
    port = harness.free_port()
    temps = "".join("    %s_temp_path %s/%s;\n" % (t, tmp, t)
                    for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = (("user root root;\n" if os.geteuid() == 0 else "")
            + "worker_processes 1;\npid %s/nginx.pid;\nerror_log %s/error.log info;\n"
            "events { worker_connections 64; }\nhttp {\n    access_log off;\n%s"
            "    upstream ratelimitd { server 127.0.0.1:%d; keepalive 4; }\n"
            "    server {\n        listen 127.0.0.1:%d;\n"
            # return would answer before the access phase: a file instead.
            "        location / { auth_request /_rl; root %s; try_files /served.txt =404; }\n"
            "        location = /_rl {\n            internal;\n"
            "            proxy_pass https://ratelimitd/auth/three;\n"
            "            proxy_http_version 1.1;\n"
            "            proxy_set_header Connection \"\";\n"
            "            proxy_pass_request_body off;\n"
            "            proxy_set_header Content-Length \"\";\n"
            "            proxy_ssl_server_name on;\n            proxy_ssl_name localhost;\n"
            "            proxy_ssl_verify on;\n            proxy_ssl_trusted_certificate %s;\n"
            "            proxy_ssl_certificate %s;\n            proxy_ssl_certificate_key %s;\n"
            "            proxy_ssl_session_reuse on;\n        }\n    }\n}\n"
            % (tmp, tmp, temps, rl_port, port, tmp, pki.path("ca.pem"), pki.path("client.pem"),
               pki.path("client.key")))
    with open(os.path.join(tmp, "nginx.conf"), "w") as f:
        f.write(conf)
    with open(os.path.join(tmp, "served.txt"), "w") as f:
        f.write("served\n")
    log = os.path.join(tmp, "stderr.log")
    proc = harness.spawn([nginx, "-e", os.path.join(tmp, "error.log"), "-p", tmp, "-c",
                          os.path.join(tmp, "nginx.conf"), "-g", "daemon off;"], log)

    def up():
        if proc.poll() is not None:
            raise harness.Fatal("nginx exited:\n" + harness.tail(log))
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    harness.wait_until(up, timeout=15, what="nginx to listen")
    return port, os.path.join(tmp, "error.log")


def check_nginx(pki):
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK)
                                      else None)
    if not nginx:
        harness.skip("nginx is not installed (tools/deps.sh installs it)")
        return
    cert, key = pki.path("srv1.pem"), pki.path("srv1.key")
    extra = ("backend: memory\ndeny_status: 403\n"
             + tls_block("tls", cert, key, pki.path("ca.pem"), "require"))
    d = Daemon(None, POLICY, extra=extra, admin=True)
    d.start()
    port, errlog = start_nginx(nginx, d.port, pki)
    got = []
    for _ in range(5):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/")
        got.append(c.getresponse().status)
        c.close()
    harness.eq(got, [200, 200, 200, 403, 403],
               "nginx auth_request to https:// (mTLS, verified): 3 allowed, then 403")
    if got != [200, 200, 200, 403, 403]:
        harness.diag(harness.tail(errlog))
    d.stop()


def main():
    for prog in ("openssl", "curl"):
        if not shutil.which(prog):
            harness.skip_all("%s not installed (tools/deps.sh installs it)" % prog)
    pki = Pki(harness.make_tempdir("rl-pki-"))
    for i, name in enumerate(("srv1", "srv2", "srv3"), 1):
        pki.issue(name, 0x1000 + i)
    pki.issue("client", 0x2001, server=False)
    pki.issue("otherclient", 0x2002, ca="otherca", server=False)
    pki.issue_expired("expired")
    tmp = harness.make_tempdir()
    check_validation(pki, tmp)
    check_https(pki, tmp)
    check_max_connections(pki)
    check_expired(pki)
    check_grpc(pki)
    check_nginx(pki)


if __name__ == "__main__":
    harness.run(main)
