# SPDX-License-Identifier: Apache-2.0
"""rls_client.py: the gRPC client every gRPC test uses, with the message
classes built at test time from the daemon's own proto/ files.

grpc_tools.protoc (Debian's python3-grpc-tools) compiles proto/ into a
FileDescriptorSet; the classes come from that set through a private
descriptor pool. Generated _pb2 modules are avoided on purpose: Debian's
grpc_tools bundles protoc 3.5, whose generated code does not load under the
protobuf 4.21 runtime, while a descriptor set loads under any runtime. The
private pool keeps the trimmed google/protobuf copies of proto/ apart from
the runtime's own well-known types.

A test calls require() first: without grpcio, protobuf or grpc_tools it
prints a TAP plan that skips everything, with the reason, and exits 0.

    import rls_client as rc
    rc.require()
    ch = rc.channel("127.0.0.1:%d" % port)
    resp = rc.should_rate_limit(ch, "edge", [[("path", "/login")]])
    resp.overall_code == rc.CODE_OK
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRCDIR = os.environ.get("RL_SRCDIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PROTO_DIR = os.path.join(SRCDIR, "proto")
PROTOS = [
    "envoy/service/ratelimit/v3/rls.proto",
    "grpc/health/v1/health.proto",
]

RLS_PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH_PATH = "/grpc.health.v1.Health/Check"

# RateLimitResponse.Code and RateLimit.Unit, Envoy's numbering.
CODE_UNKNOWN, CODE_OK, CODE_OVER_LIMIT = 0, 1, 2
UNITS = {1: "SECOND", 2: "MINUTE", 3: "HOUR", 4: "DAY", 5: "MONTH", 6: "YEAR", 7: "WEEK"}
# HealthCheckResponse.ServingStatus
SERVING, NOT_SERVING = 1, 2

grpc = None
_classes = {}


def _missing():
    """Why the client cannot run here, or None."""
    global grpc
    # grpcio's fork handlers (pthread_atfork) stop and restart its threads
    # around every fork, and abort the process when a thread is caught
    # mid-state ("assertion failed: state_ == FAILED" in thd.h): the tests
    # fork for every daemon they start. They never use grpc in a child, so
    # the handlers are off; read once, when grpcio is first imported.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    try:
        import grpc as g  # noqa: F401
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: F401
        import grpc_tools  # noqa: F401
    except ImportError as e:
        return "no Python gRPC (python3-grpcio, python3-protobuf, python3-grpc-tools): %s" % e
    grpc = g
    return None


def require():
    """Skips the whole test (TAP) unless the client can run; else loads the
    message classes."""
    why = _missing()
    if why:
        harness.skip_all(why)
    _load()


def _load():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    out = os.path.join(tempfile.mkdtemp(prefix="rl-proto-"), "set.pb")
    harness.at_exit(lambda: os.path.exists(out) and os.unlink(out))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", PROTO_DIR,
                    "--include_imports", "--descriptor_set_out=" + out] + PROTOS,
                   check=True)
    fds = descriptor_pb2.FileDescriptorSet()
    with open(out, "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:  # --include_imports lists dependencies first
        pool.Add(fdp)
    factory = message_factory.MessageFactory(pool)
    for name in ("envoy.service.ratelimit.v3.RateLimitRequest",
                 "envoy.service.ratelimit.v3.RateLimitResponse",
                 "grpc.health.v1.HealthCheckRequest",
                 "grpc.health.v1.HealthCheckResponse"):
        desc = pool.FindMessageTypeByName(name)
        if hasattr(message_factory, "GetMessageClass"):
            _classes[name.split(".")[-1]] = message_factory.GetMessageClass(desc)
        else:
            _classes[name.split(".")[-1]] = factory.GetPrototype(desc)


def message(name):
    """A message class: RateLimitRequest, RateLimitResponse,
    HealthCheckRequest, HealthCheckResponse."""
    return _classes[name]


def channel(target):
    """An insecure (h2c) channel to target ("127.0.0.1:8081", "unix:/path")."""
    opts = [("grpc.enable_retries", 0)]
    return grpc.insecure_channel(target, options=opts)


def build_request(domain, descriptors, hits_addend=0):
    """descriptors: a list whose items are a list of (key, value) pairs, or a
    dict {"entries": [(k, v)...], "hits_addend": n, "limit": (requests_per_unit,
    unit number)}."""
    req = message("RateLimitRequest")()
    req.domain = domain
    if hits_addend:
        req.hits_addend = hits_addend
    for d in descriptors:
        entries = d["entries"] if isinstance(d, dict) else d
        pd = req.descriptors.add()
        for k, v in entries:
            e = pd.entries.add()
            e.key = k
            e.value = v
        if isinstance(d, dict) and d.get("hits_addend") is not None:
            pd.hits_addend.value = d["hits_addend"]
        if isinstance(d, dict) and d.get("limit") is not None:
            pd.limit.requests_per_unit, pd.limit.unit = d["limit"]
    return req


def should_rate_limit(ch, domain, descriptors, hits_addend=0, timeout=10, metadata=None):
    """One ShouldRateLimit call; returns the RateLimitResponse or raises
    grpc.RpcError (e.code(), e.details())."""
    call = ch.unary_unary(RLS_PATH, request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=message("RateLimitResponse").FromString)
    return call(build_request(domain, descriptors, hits_addend), timeout=timeout,
                metadata=metadata)


def should_rate_limit_future(ch, domain, descriptors, hits_addend=0, timeout=10, metadata=None):
    """The same call, started and not waited for (a grpc.Future)."""
    call = ch.unary_unary(RLS_PATH, request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=message("RateLimitResponse").FromString)
    return call.future(build_request(domain, descriptors, hits_addend), timeout=timeout,
                       metadata=metadata)


def raw_call(ch, path, payload, timeout=10, metadata=None):
    """Sends payload (bytes, any content) as the message of a unary call to
    path; returns the answer's bytes or raises grpc.RpcError."""
    call = ch.unary_unary(path, request_serializer=None, response_deserializer=None)
    return call(payload, timeout=timeout, metadata=metadata)


def health_check(ch, service="", timeout=10):
    """grpc.health.v1.Health/Check; returns the ServingStatus number or
    raises grpc.RpcError."""
    call = ch.unary_unary(HEALTH_PATH, request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=message("HealthCheckResponse").FromString)
    req = message("HealthCheckRequest")()
    req.service = service
    return call(req, timeout=timeout).status


def rpc_error(fn, *args, **kwargs):
    """Runs fn; returns (status code name, details) of the grpc.RpcError it
    raises, or (None, result) if it succeeds."""
    try:
        return None, fn(*args, **kwargs)
    except grpc.RpcError as e:
        return e.code().name, e.details()
