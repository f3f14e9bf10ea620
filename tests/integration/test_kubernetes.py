# SPDX-License-Identifier: Apache-2.0
"""test_kubernetes.py: the manifests of deploy/kubernetes/ are valid
Kubernetes objects and agree with the daemon.

- Every object passes the API's schemas (kubernetes-models, pinned in
  deploy/test/package.json, installed by `npm ci` from tools/test.sh;
  deploy/test/validate.mjs also refuses unknown fields, as `kubectl apply`
  does), and a deliberately broken copy fails them.
- Each ratelimitd container's ConfigMap holds a policy file that
  `ratelimitd -t --strict-permissions` accepts, laid out as the kubelet
  mounts it (a ..data symlink, files mode 0644); the container's --config
  names it; `watch: true`; no subPath (which never sees updates).
- Ports: the container ports are the policy's listen, admin_listen and
  grpc_listen ports; the probes ask the admin port, which listens beyond
  loopback (the kubelet comes from outside the Pod); the Service targets
  named container ports; the sidecar's check port is on loopback and is
  the one its application is given.
- Paths: the daemon started with each ConfigMap's policy (backend: memory,
  on loopback ports) answers 200 on every probe path, and its resident
  memory stays below the container's memory request.
- Redis: the URL names no password, RATELIMITD_REDIS_PASSWORD (the
  variable src/config/redis_url.h reads) comes from a Secret.
- Hardening: runAsNonRoot, readOnlyRootFilesystem, no privilege
  escalation, every capability dropped, seccompProfile RuntimeDefault,
  CPU and memory requests and limits, the image ratelimitd:0.9.0.

- Commands: README.md's Install and docs/install.md create the Secret the
  Deployments read (`kubectl create secret generic <name>`) and apply
  directories that hold the manifests checked here (`-f`, or `-k` only
  where a kustomization.yaml is), the shared one among them.

The grace period against the longest drain is checked by tests/unit/test_docs.c.
"""
import copy
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SRC = os.environ.get("RL_SRCDIR", ".")
BINARY = harness.find_program("RATELIMITD", "./ratelimitd")
KUBE = os.path.join(SRC, "deploy", "kubernetes")
VALIDATOR = os.path.join(SRC, "deploy", "test")
IMAGE = "ratelimitd:0.9.0"


def load_docs():
    """{file: [objects]} for every manifest."""
    out = {}
    for path in sorted(glob.glob(os.path.join(KUBE, "*", "*.yaml"))):
        with open(path) as f:
            out[os.path.relpath(path, SRC)] = [d for d in yaml.safe_load_all(f) if d]
    return out


def validate(docs, tmp, name):
    """Runs validate.mjs over docs: (exit status, output)."""
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(docs, f)
    res = subprocess.run(["node", os.path.join(VALIDATOR, "validate.mjs"), path],
                         capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout + res.stderr


def test_schemas(docs, tmp):
    if not shutil.which("node"):
        harness.skip("node not installed: the schema validation")
        return
    if not os.path.isdir(os.path.join(VALIDATOR, "node_modules", "kubernetes-models")):
        harness.skip("kubernetes-models not installed (npm ci in deploy/test, as tools/test.sh does)")
        return
    rc, out = validate(docs, tmp, "all.json")
    harness.diag(out.strip())
    harness.eq(rc, 0, "every object of deploy/kubernetes/ passes the Kubernetes schemas")
    # The validator must be able to say no: a wrong type, an unknown field
    # (a misspelt hardening setting would silently be no setting at all) and
    # an unknown field in the metadata.
    dep = next(d for d in docs if d["kind"] == "Deployment")
    broken = []
    for mutate in (
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
            containerPort="8080"),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
            readOnlyRootFileSystem=True),
        lambda d: d["metadata"].update(label={"a": "b"}),
    ):
        d = copy.deepcopy(dep)
        mutate(d)
        broken.append(d)
    rc, out = validate(broken, tmp, "broken.json")
    harness.ok(rc == 1 and out.count("not ok") == 3,
               "a wrong type and unknown fields fail the validation: %s" % out.strip())


def host_port(address):
    m = re.fullmatch(r"(\[[^]]+\]|[^:]+):(\d+)", str(address))
    return (m.group(1), int(m.group(2))) if m else (None, None)


def ratelimitd_containers(docs):
    """(deployment, pod spec, container) of every ratelimitd container."""
    for d in docs:
        if d["kind"] != "Deployment":
            continue
        spec = d["spec"]["template"]["spec"]
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            if c.get("image", "").startswith("ratelimitd"):
                yield d, spec, c


def config_of(docs, spec, c):
    """The container's policy file: (its path, its text, the mount)."""
    args = c.get("args", [])
    path = args[args.index("--config") + 1] if "--config" in args else None
    for m in c.get("volumeMounts", []):
        if path and path.startswith(m["mountPath"].rstrip("/") + "/"):
            vol = next(v for v in spec["volumes"] if v["name"] == m["name"])
            cm = next(o for o in docs if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"] == vol["configMap"]["name"])
            key = path[len(m["mountPath"].rstrip("/")) + 1:]
            return path, cm["data"].get(key), m
    return path, None, None


def check_config(text, tmp, name):
    """ratelimitd -t --strict-permissions on text, laid out as the kubelet
    mounts a ConfigMap: FILE -> ..data/FILE, ..data -> a timestamped
    directory, files 0644. Returns (status, output)."""
    base = os.path.join(tmp, name)
    stamp = os.path.join(base, "..2024_01_01_00_00_00.000000000")
    os.makedirs(stamp)
    with open(os.path.join(stamp, "ratelimitd.yaml"), "w") as f:
        f.write(text)
    os.chmod(os.path.join(stamp, "ratelimitd.yaml"), 0o644)
    os.symlink(os.path.basename(stamp), os.path.join(base, "..data"))
    os.symlink("..data/ratelimitd.yaml", os.path.join(base, "ratelimitd.yaml"))
    res = subprocess.run([BINARY, "-t", "--strict-permissions", "--config",
                          os.path.join(base, "ratelimitd.yaml")],
                         capture_output=True, text=True, timeout=30)
    return res.returncode, (res.stdout + res.stderr).strip()


def port_of(c, ref):
    """A probe's or Service's port (a number or a container port's name)."""
    if isinstance(ref, int):
        return ref
    return next((p["containerPort"] for p in c.get("ports", []) if p.get("name") == ref), None)


MIB = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}


def mebibytes(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", str(q))
    return int(m.group(1)) * MIB[m.group(2)] if m else None


def run_daemon(policy, tmp, name):
    """Starts the daemon with the policy's fields but backend: memory and
    loopback ports; returns (process, {field: port}, log path)."""
    cfg = yaml.safe_load(policy)
    ports = {}
    text = policy
    for field in ("listen", "admin_listen", "grpc_listen"):
        if field in cfg:
            ports[field] = harness.free_port()
            text = re.sub(r"(?m)^%s:.*$" % field, "%s: 127.0.0.1:%d" % (field, ports[field]),
                          text)
    text = "backend: memory\n" + text
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    log = os.path.join(tmp, name + ".log")
    proc = harness.spawn([BINARY, "--config", path], log)
    return proc, ports, log


def get(port, path):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def test_deployment(docs, d, spec, c, tmp):
    name = d["metadata"]["name"]
    path, policy, mount = config_of(docs, spec, c)
    if not harness.ok(policy is not None, "%s: --config %s is a key of a mounted ConfigMap"
                      % (name, path)):
        return
    harness.ok("subPath" not in mount, "%s: the ConfigMap is mounted whole (no subPath)" % name)
    rc, out = check_config(policy, tmp, name)
    harness.eq(rc, 0, "%s: ratelimitd -t --strict-permissions accepts its policy: %s"
               % (name, out))
    cfg = yaml.safe_load(policy)
    harness.ok(cfg.get("watch") is True, "%s: the policy has watch: true" % name)

    # Ports: every listener has its container port (the check port of a
    # sidecar is on loopback, for the application only, and needs none).
    declared = sorted(p["containerPort"] for p in c.get("ports", []))
    wanted = []
    for field in ("listen", "admin_listen", "grpc_listen"):
        if field in cfg:
            host, port = host_port(cfg[field])
            if host != "127.0.0.1":
                wanted.append(port)
    harness.eq(declared, sorted(wanted),
               "%s: container ports are the policy's non-loopback listeners" % name)
    admin_host, admin_port = host_port(cfg.get("admin_listen"))
    harness.ok(admin_host not in (None, "127.0.0.1", "[::1]"),
               "%s: admin_listen %s is reachable by the kubelet" % (name, cfg.get("admin_listen")))
    probes = {}
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        if kind in c:
            probes[kind] = c[kind]["httpGet"]
            harness.eq(port_of(c, probes[kind]["port"]), admin_port,
                       "%s: the %s asks the admin port" % (name, kind))
    harness.eq(probes.get("livenessProbe", {}).get("path"), "/healthz",
               "%s: liveness on /healthz" % name)
    harness.eq(probes.get("readinessProbe", {}).get("path"), "/readyz",
               "%s: readiness on /readyz" % name)
    if c in spec.get("initContainers", []):
        harness.eq(c.get("restartPolicy"), "Always", "%s: a native sidecar" % name)
        host, port = host_port(cfg["listen"])
        harness.eq(host, "127.0.0.1", "%s: the sidecar's check port is on loopback" % name)
        urls = [e.get("value", "") for a in spec["containers"] for e in a.get("env", [])]
        harness.ok("http://127.0.0.1:%d" % port in urls,
                   "%s: the application is given the check port %d: %r" % (name, port, urls))

    # Redis: the password from a Secret, none in the URL.
    with open(os.path.join(SRC, "src", "config", "redis_url.h")) as f:
        env_name = re.search(r'REDIS_URL_PASSWORD_ENV "(\w+)"', f.read()).group(1)
    env = {e["name"]: e for e in c.get("env", [])}
    harness.ok(env_name in env and "secretKeyRef" in env[env_name].get("valueFrom", {}),
               "%s: %s comes from a Secret" % (name, env_name))
    url = cfg.get("redis", {}).get("url", "")
    harness.ok(url.startswith("redis") and "@" not in url,
               "%s: redis.url %s carries no credentials" % (name, url))

    # Hardening.
    sc, psc = c.get("securityContext", {}), spec.get("securityContext", {})
    harness.eq(c.get("image"), IMAGE, "%s: image %s" % (name, IMAGE))
    harness.ok(sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, "%s: runAsNonRoot" % name)
    harness.ok(sc.get("readOnlyRootFilesystem") is True, "%s: readOnlyRootFilesystem" % name)
    harness.ok(sc.get("allowPrivilegeEscalation") is False, "%s: no privilege escalation" % name)
    harness.eq(sc.get("capabilities", {}).get("drop"), ["ALL"], "%s: every capability dropped"
               % name)
    seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {}))
    harness.eq(seccomp.get("type"), "RuntimeDefault", "%s: seccompProfile RuntimeDefault" % name)
    res = c.get("resources", {})
    harness.ok(all(k in res.get(s, {}) for s in ("requests", "limits") for k in ("cpu", "memory")),
               "%s: CPU and memory requests and limits: %r" % (name, res))

    # The daemon with this policy answers the probes' paths.
    proc, ports, log = run_daemon(policy, tmp, name)
    admin = ports["admin_listen"]
    try:
        harness.wait_until(lambda: get(admin, "/healthz") == 200, 10, what="/healthz")
    except TimeoutError as e:
        harness.diag("%s\n%s" % (e, harness.tail(log)))
    for kind, probe in sorted(probes.items()):
        harness.eq(get(admin, probe["path"]), 200, "%s: the daemon answers the %s's %s with 200"
                   % (name, kind, probe["path"]))
    # Some checks, so that the figure is that of a daemon at work.
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", ports["listen"], timeout=5)
    statuses = set()
    for i in range(200):
        conn.request("POST", "/check", body=json.dumps({"policy": "login", "key": "k%d" % i}))
        r = conn.getresponse()
        r.read()
        statuses.add(r.status)
    conn.close()
    harness.eq(statuses, {200}, "%s: the policy's login policy decides /check" % name)
    rss = harness.rss_kib(proc.pid) / 1024
    request = mebibytes(res.get("requests", {}).get("memory"))
    harness.ok(request is not None and rss < request,
               "%s: resident %.1f MiB is below the memory request %s" % (
                   name, rss, res.get("requests", {}).get("memory")))
    harness.eq(harness.stop_process(proc), 0, "%s: exits 0 on SIGTERM" % name)


def test_service(docs):
    for svc in (o for o in docs if o["kind"] == "Service"):
        sel = svc["spec"]["selector"]
        dep = next((d for d in docs if d["kind"] == "Deployment"
                    and d["spec"]["template"]["metadata"]["labels"].items() >= sel.items()), None)
        if not harness.ok(dep is not None, "Service %s selects a Deployment" % svc["metadata"]["name"]):
            continue
        c = next(c for _, _, c in ratelimitd_containers([dep]))
        names = {p.get("name") for p in c["ports"]}
        for p in svc["spec"]["ports"]:
            harness.ok(p["targetPort"] in names, "Service port %s targets the container port %s"
                       % (p["port"], p["targetPort"]))
            harness.eq(port_of(c, p["targetPort"]), p["port"],
                       "Service port %s is the container's own number" % p["port"])
    for pdb in (o for o in docs if o["kind"] == "PodDisruptionBudget"):
        sel = pdb["spec"]["selector"]["matchLabels"]
        harness.ok(any(d["kind"] == "Deployment" and d["spec"]["replicas"] > 1
                       and d["spec"]["template"]["metadata"]["labels"].items() >= sel.items()
                       for d in docs),
                   "PodDisruptionBudget %s selects a Deployment of several replicas"
                   % pdb["metadata"]["name"])


def test_commands(docs, dirs):
    """The kubectl commands of README.md and docs/install.md fit the manifests."""
    secrets = sorted({ref["secretKeyRef"]["name"] for d in docs if d["kind"] == "Deployment"
                      for _, _, c in ratelimitd_containers([d]) for e in c.get("env", [])
                      for ref in [e.get("valueFrom", {})] if "secretKeyRef" in ref})
    for page in ("README.md", "docs/install.md"):
        with open(os.path.join(SRC, page)) as f:
            text = f.read()
        made = re.findall(r"^kubectl create secret generic (\S+)", text, re.M)
        harness.eq(made, secrets, "%s creates the Secret the Deployments read: %s"
                   % (page, secrets))
        applied = re.findall(r"^kubectl apply (-[fk]) (\S+)", text, re.M)
        harness.ok(("-f", "deploy/kubernetes/shared/") in applied or
                   ("-k", "deploy/kubernetes/shared/") in applied,
                   "%s applies deploy/kubernetes/shared/: %r" % (page, applied))
        for flag, path in applied:
            where = os.path.join(SRC, path)
            harness.ok(path.rstrip("/") in dirs and (flag == "-f" or os.path.exists(
                os.path.join(where, "kustomization.yaml"))),
                "%s: kubectl apply %s %s names a directory of manifests%s" % (
                    page, flag, path, "" if flag == "-f" else " with a kustomization.yaml"))


def main():
    if not BINARY:
        harness.skip_all("ratelimitd not built (set RATELIMITD)")
    tmp = harness.make_tempdir()
    files = load_docs()
    harness.ok(set(files) >= {"deploy/kubernetes/shared/deployment.yaml",
                              "deploy/kubernetes/sidecar/deployment.yaml"},
               "deploy/kubernetes/ has the shared Deployment and the sidecar: %r" % sorted(files))
    docs = [d for objs in files.values() for d in objs]
    harness.eq(sorted({d["kind"] for d in docs}),
               ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"],
               "the kinds of objects")
    test_schemas(docs, tmp)
    # Each directory is applied as a whole (kubectl apply -f DIR).
    dirs = {}
    for path, objs in files.items():
        dirs.setdefault(os.path.dirname(path), []).extend(objs)
    for path, objs in sorted(dirs.items()):
        for d, spec, c in ratelimitd_containers(objs):
            test_deployment(objs, d, spec, c, tmp)
        test_service(objs)
    test_commands(docs, dirs)


harness.run(main)
