# SPDX-License-Identifier: Apache-2.0
"""restart_load.py: the load the restart tests hold a daemon under while
it restarts or hands over (test_socket_activation, test_handover): client
threads sending POST /check, each on a fresh connection per request or on
one kept-alive connection, counting outcomes, never latencies:

- ok: an answer with status 200;
- refused: connect() refused (nobody held the socket);
- failed: anything else (a reset, an empty reply, a non-200 status, a
  timeout), each kept with its reason;
- reconnected: a kept-alive connection the daemon closed while it was idle
  (the drain of an old process), the request sent again on a fresh
  connection as HTTP clients do when a reused connection closes before any
  byte of an answer (RFC 9112 9.3.1). Counted, and a failure if the fresh
  connection fails too.

Nothing here knows how the daemon restarts."""
import http.client
import json
import threading

BODY = json.dumps({"policy": "p", "key": "k"}).encode()
HEADERS = {"Content-Type": "application/json"}


class Load:
    def __init__(self, port, fresh=4, kept=0, timeout=10):
        self.port, self.timeout = port, timeout
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.ok = self.refused = self.reconnected = 0
        self.failures = []
        self.answer = threading.local()  # each thread's last answer's body
        self.threads = [threading.Thread(target=self._run, args=(False,), daemon=True)
                        for _ in range(fresh)]
        self.threads += [threading.Thread(target=self._run, args=(True,), daemon=True)
                         for _ in range(kept)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        """Stops the clients; returns (ok, refused, failed, reconnected)."""
        self.stopping.set()
        for t in self.threads:
            t.join(self.timeout * 3)
        return self.ok, self.refused, len(self.failures), self.reconnected

    def _count(self, what, reason=None):
        with self.lock:
            if what == "failed":
                self.failures.append(reason)
            else:
                setattr(self, what, getattr(self, what) + 1)

    def _one(self, conn):
        conn.request("POST", "/check", body=BODY, headers=HEADERS)
        r = conn.getresponse()
        self.answer.body = r.read()
        return r.status

    def _fresh(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            return self._one(conn)
        finally:
            conn.close()

    def _outcome(self, call):
        try:
            status = call()
        except ConnectionRefusedError:
            self._count("refused")
            return
        except (OSError, http.client.HTTPException) as e:
            self._count("failed", "%s: %s" % (type(e).__name__, e))
            return
        if status == 200:
            self._count("ok")
        else:
            # The body says which 503 it was (failure_mode, a drain, ...).
            self._count("failed", "status %d %s" % (status,
                                                    getattr(self.answer, "body", b"")[:160]))

    def _run(self, keep):
        conn = [None]  # the kept-alive connection, while open

        def kept():
            if conn[0] is None:
                conn[0] = http.client.HTTPConnection("127.0.0.1", self.port,
                                                     timeout=self.timeout)
            try:
                return self._one(conn[0])
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # Closed before any answer byte: sent again, fresh.
                conn[0].close()
                conn[0] = None
                self._count("reconnected")
                return self._fresh()
            except BaseException:
                conn[0].close()
                conn[0] = None
                raise

        while not self.stopping.is_set():
            self._outcome(kept if keep else self._fresh)
        if conn[0] is not None:
            conn[0].close()


class GrpcLoad(Load):
    """The same counts for Envoy's ShouldRateLimit over gRPC, each client on
    its own channel (one HTTP/2 connection, which a drain ends with a
    GOAWAY; the channel then connects again): ok is an answer with code OK;
    anything else (a status other than OK, UNAVAILABLE among them) failed,
    but for one case, counted in reconnected and sent again once: a call
    the client had queued on a connection when its GOAWAY came, which
    grpc-core cancels itself ("GOAWAY received") without sending it. gRPC's
    transparent retry (on by default; off in rls_client's channel, which
    these use so that nothing else is retried) and Envoy send such a call
    on the next connection. rls_client must have been required."""

    def __init__(self, port, domain, descriptors, clients=4, timeout=10):
        import rls_client
        self.rc = rls_client
        self.target = "127.0.0.1:%d" % port
        self.domain, self.descriptors = domain, descriptors
        super().__init__(port, fresh=0, kept=0, timeout=timeout)
        self.threads = [threading.Thread(target=self._grpc, daemon=True) for _ in range(clients)]

    def _call(self, ch, again):
        try:
            r = self.rc.should_rate_limit(ch, self.domain, self.descriptors, timeout=self.timeout)
        except self.rc.grpc.RpcError as e:
            if not again and e.details() == "GOAWAY received":
                self._count("reconnected")
                return self._call(ch, True)
            self._count("failed", "%s: %s" % (e.code(), e.details()))
            return
        if r.overall_code == self.rc.CODE_OK:
            self._count("ok")
        else:
            self._count("failed", "overall_code %d" % r.overall_code)

    def _grpc(self):
        ch = self.rc.channel(self.target)
        while not self.stopping.is_set():
            self._call(ch, False)
        ch.close()
