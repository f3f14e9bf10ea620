"""test_docker.py: what can be checked of the container files without a
Docker engine: the image builds with the same steps as CI, runs as a
non-root user, carries a policy that the daemon accepts, and checks its
health on /readyz; compose wires it to Redis."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRC = os.environ.get("RL_SRCDIR", ".")
BINARY = harness.find_program("RATELIMITD", "./ratelimitd")


def read(*path):
    with open(os.path.join(SRC, *path)) as f:
        return f.read()


def main():
    df = read("docker", "Dockerfile")
    ci = read("tools", "test.sh")
    stages = re.findall(r"^FROM\s+(\S+)", df, re.M)
    harness.ok(len(stages) >= 2 and all(s.startswith("debian:bookworm") for s in stages),
               "multi-stage, Debian bookworm based: %r" % stages)
    for step in ("sh tools/deps.sh", "sh tools/build.sh"):
        harness.ok(step in df and step.split()[-1] in ci + read("tools", "build.sh"),
                   "the image builds with CI's step %r" % step)
    user = re.findall(r"^USER\s+(\S+)", df, re.M)
    harness.ok(user and user[-1] not in ("root", "0", "0:0"), "runs as a non-root user: %r" % user)
    harness.ok(re.search(r"^HEALTHCHECK .*?/readyz", df, re.M | re.S) is not None,
               "HEALTHCHECK asks /readyz")
    harness.ok("docker/ratelimitd.docker.yaml" in df, "the image carries docker/ratelimitd.docker.yaml")
    policy = read("docker", "ratelimitd.docker.yaml")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(policy)
        f.flush()
        res = subprocess.run([BINARY, "--config", f.name, "--check-config"], capture_output=True,
                             text=True)
    harness.eq(res.returncode, 0, "the image's policy passes --check-config: %s" % res.stdout.strip())
    m = re.search(r"^admin_listen:\s*\S+:(\d+)", policy, re.M)
    compose = read("docker", "compose.yaml")
    harness.ok(m and ":%s:%s" % (m.group(1), m.group(1)) in compose,
               "compose publishes the admin port %s" % (m.group(1) if m else "?"))
    harness.ok(re.search(r"^\s+redis:\s*$", compose, re.M) and "redis://redis:6379" in policy,
               "compose runs a redis service that the policy's redis.url names")
    harness.ok("service_healthy" in compose, "ratelimitd starts once Redis is healthy")


harness.run(main)
