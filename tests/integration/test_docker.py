# SPDX-License-Identifier: Apache-2.0
"""test_docker.py: what can be checked of the container files without
building (tests/integration/test_image.py builds and runs the image): the
build stage installs the build packages only, the image runs as a non-root
user, carries policies that the daemon accepts (the second with backend:
memory), with conf/ratelimitd.yaml's example figures, and checks its health
on /readyz; compose.yaml is valid YAML that wires it to Redis."""
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
    harness.ok("sh tools/deps.sh --build" in df and "tools/deps.sh" in read("tools", "build.sh"),
               "the build stage installs tools/deps.sh's build list, as tools/build.sh does")
    harness.ok("tools/image.sh" in df and "test_image.py" in ci,
               "the Dockerfile names tools/image.sh, and CI builds and runs the image")
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
    harness.ok("/etc/ratelimitd.memory.yaml" in df and "backend: redis\n" in policy,
               "the image makes its backend: memory policy from this one")
    try:
        import yaml
    except ImportError:
        harness.skip("python3-yaml is not installed: compose.yaml and the policies not parsed")
        return
    doc = yaml.safe_load(compose)
    svc = doc["services"]
    rl = svc["ratelimitd"]
    harness.ok(rl["build"]["dockerfile"] == "docker/Dockerfile" and rl["build"]["context"] == "..",
               "compose builds docker/Dockerfile from the top of the tree")
    harness.eq(rl["depends_on"], {"redis": {"condition": "service_healthy"}},
               "compose: ratelimitd depends on a healthy redis")
    harness.ok("redis" in svc and "healthcheck" in svc["redis"], "compose: a redis service with a health check")
    harness.ok("8080:8080" in rl["ports"] and "127.0.0.1:9090:9090" in rl["ports"],
               "compose publishes /check and the admin port on loopback: %s" % rl["ports"])
    ours = yaml.safe_load(policy)["policies"]["login"]["tiers"]
    example = yaml.safe_load(read("conf", "ratelimitd.yaml"))["policies"]["login"]["tiers"]
    harness.eq(ours, example, "the image's login policy has conf/ratelimitd.yaml's figures")


harness.run(main)
