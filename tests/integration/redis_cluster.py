# SPDX-License-Identifier: Apache-2.0
"""redis_cluster.py: a real Redis Cluster on 127.0.0.1 for the tests.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness, redis_cluster

    if not redis_cluster.supported():
        harness.skip_all(redis_cluster.why_unsupported())
    c = redis_cluster.RedisCluster(nmasters=3, replicas=1)
    ports = c.start()               # every node's port, as created
                                    # (or c.launch(), then c.create())
    c.seeds()                       # ["redis://127.0.0.1:P", ...] for redis.cluster
    c.node_for_key("rl:{p:k}:0")    # the port of the master serving the key
    redis_cluster.keyslot("{p:k}")  # a key's slot, computed here (CRC16)
    c.migrate_slot(slot, src, dst)  # a manual slot move (keys included)
    c.kill_master(port); c.wait_failover(port)

Each node is `redis-server --cluster-enabled yes` in its own temporary
directory (no persistence, node timeout 1 s), joined with `redis-cli
--cluster create --cluster-yes`; start() returns once every node reports
cluster_state:ok and its CLUSTER SLOTS covers all 16384 slots. Processes
are stopped and directories removed when the test exits (harness.at_exit),
even if stop() is never called.

Everything here waits with a bound (harness.wait_until) and raises
TimeoutError or RuntimeError with the nodes' log tails when a bound passes.
"""

import os
import socket
import subprocess

import harness

SLOTS = 16384


def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
        table.append(crc)
    return table


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16/XMODEM of bytes, Redis Cluster's key hash."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc


def keyslot(key):
    """The slot of key, from its hash tag as Redis computes it, without
    asking a node (the tests that use it check it against CLUSTER KEYSLOT)."""
    b = key.encode()
    i = b.find(b"{")
    if i >= 0:
        j = b.find(b"}", i + 1)
        if j > i + 1:
            b = b[i + 1:j]
    return crc16(b) % SLOTS


def _binaries():
    return (
        harness.find_program("REDIS_SERVER", "redis-server"),
        harness.find_program("REDIS_CLI", "redis-cli"),
    )


def why_unsupported():
    """None when a cluster can be made here, else the reason (for a TAP
    skip): redis-server or redis-cli missing, or a server without cluster
    support (older than 3.0 or built without it)."""
    server, cli = _binaries()
    if not server:
        return "redis-server not installed"
    if not cli:
        return "redis-cli not installed"
    try:
        out = subprocess.run(
            [cli, "--cluster", "help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=10,
        ).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        return "redis-cli --cluster help failed: %s" % e
    if "create" not in out:
        return "redis-cli has no --cluster create (Redis < 5)"
    return None


def supported():
    return why_unsupported() is None


def _free_port_pair():
    """A port P free on 127.0.0.1 with P + 10000 (the cluster bus) free too."""
    for _ in range(200):
        p = harness.free_port()
        if p + 10000 >= 65536:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", p + 10000))
        except OSError:
            continue
        return p
    raise RuntimeError("no free port pair (P, P+10000) on 127.0.0.1")


class RedisCluster:
    """nmasters masters with `replicas` replicas each, on 127.0.0.1."""

    def __init__(self, nmasters=3, replicas=1, extra_args=(), node_timeout_ms=1000,
                 password=None):
        self.server, self.cli = _binaries()
        self.nmasters = nmasters
        self.replicas = replicas
        self.extra_args = list(extra_args)
        self.node_timeout_ms = node_timeout_ms
        self.password = password
        self.dir = None
        self.ports = []
        self.procs = {}  # port -> Popen

    # ------------------------------------------------------------ processes

    def _argv(self, port):
        argv = [
            self.server,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes-%d.conf" % port,
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--dir", os.path.join(self.dir, str(port)),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", "",
        ]
        if self.password is not None:
            argv += ["--requirepass", self.password, "--masterauth", self.password]
        return argv + harness.module_args() + self.extra_args

    def log_path(self, port):
        return os.path.join(self.dir, str(port), "redis.log")

    def _launch(self, port):
        os.makedirs(os.path.join(self.dir, str(port)), exist_ok=True)
        self.procs[port] = harness.spawn(self._argv(port), self.log_path(port))

    def _logs(self):
        return "\n".join(
            "--- node %d:\n%s" % (p, harness.tail(self.log_path(p), 800)) for p in self.ports
        )

    def start(self, timeout=60.0):
        """Starts and joins the nodes; returns every node's port."""
        self.launch(timeout)
        self.create(timeout)
        return list(self.ports)

    def launch(self, timeout=60.0):
        """Starts the nodes, not yet joined (each a master of no slot: a
        cluster that is down); returns their ports. create() joins them."""
        if not self.server or not self.cli:
            raise RuntimeError("redis-server or redis-cli not found")
        self.dir = harness.make_tempdir("rl-cluster-")
        n = self.nmasters * (1 + self.replicas)
        self.ports = []
        while len(self.ports) < n:
            self.ports.append(self._launch_new(timeout))
        return list(self.ports)

    def _launch_new(self, timeout):
        """A node on a fresh port pair; another test (tests run in
        parallel) may take a port between free_port() and the bind: then
        another pair, a bounded number of times."""
        for _ in range(10):
            p = _free_port_pair()
            if p in self.ports:
                continue
            self._launch(p)
            if self._wait_ping(p, timeout):
                return p
            del self.procs[p]
        raise RuntimeError("no node could bind a port after 10 tries")

    def create(self, timeout=60.0):
        """redis-cli --cluster create on the launched nodes; returns once
        the cluster is ok everywhere and every replica is in sync."""
        argv = [self.cli]
        if self.password is not None:
            argv += ["-a", self.password, "--no-auth-warning"]
        argv += ["--cluster", "create"] + ["127.0.0.1:%d" % p for p in self.ports]
        argv += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("redis-cli --cluster create failed:\n%s\n%s"
                               % (r.stdout.decode("utf-8", "replace"), self._logs()))
        self.wait_ok(timeout)
        self._wait_replicas(timeout)

    def _wait_ping(self, port, timeout):
        """True once node port answers PING; False if it exited because its
        port was taken; raises on any other exit or after timeout."""
        exited = []

        def answers():
            proc = self.procs[port]
            if proc.poll() is not None:
                exited.append(harness.tail(self.log_path(port)))
                return True
            return self.command(port, "PING") == "PONG"

        harness.wait_until(answers, timeout, what="node %d to answer PING" % port)
        if not exited:
            return True
        if "Address already in use" in exited[0]:
            return False
        raise RuntimeError("redis-server on %d exited: %s" % (port, exited[0]))

    def stop(self):
        """Stops every node (the directories go at exit)."""
        for proc in self.procs.values():
            harness.stop_process(proc)

    def live_ports(self):
        return [p for p in self.ports if self.procs[p].poll() is None]

    # ------------------------------------------------------------ talking

    def client(self, port, timeout=5.0):
        c = harness.RedisClient(host="127.0.0.1", port=port, timeout=timeout)
        if self.password is not None:
            c.command("AUTH", self.password)
        return c

    def command(self, port, *args):
        """One command on node port (a fresh connection)."""
        with self.client(port) as c:
            return c.command(*args)

    def seeds(self, scheme="redis"):
        """The URLs for redis.cluster: every node (a daemon needs one)."""
        auth = ":%s@" % self.password if self.password is not None else ""
        return ["%s://%s127.0.0.1:%d" % (scheme, auth, p) for p in self.ports]

    def info(self, port):
        text = self.command(port, "CLUSTER", "INFO")
        return dict(l.split(":", 1) for l in text.split("\r\n") if ":" in l)

    def nodes(self, port=None):
        """CLUSTER NODES as seen from port (default: any live node): a list
        of dicts {id, port, flags (set), master (id or None), slots (list of
        (first, last))}."""
        port = port or self.live_ports()[0]
        out = []
        for line in self.command(port, "CLUSTER", "NODES").splitlines():
            f = line.split()
            if len(f) < 8:
                continue
            addr = f[1].split("@")[0]
            slots = []
            for s in f[8:]:
                if s.startswith("["):  # a migrating/importing marker
                    continue
                a, _, b = s.partition("-")
                slots.append((int(a), int(b or a)))
            out.append({
                "id": f[0],
                "port": int(addr.rsplit(":", 1)[1]) if ":" in addr else 0,
                "flags": set(f[2].split(",")),
                "master": None if f[3] == "-" else f[3],
                "slots": slots,
            })
        return out

    def node_id(self, port):
        return self.command(port, "CLUSTER", "MYID")

    def masters(self):
        """Ports of the live masters that serve slots."""
        return sorted(
            n["port"] for n in self.nodes()
            if "master" in n["flags"] and "fail" not in n["flags"] and n["slots"]
        )

    def slots_of(self, port):
        """The slots node port serves, per CLUSTER SLOTS."""
        r = []
        for first, last, master, *_ in self.command(self.live_ports()[0], "CLUSTER", "SLOTS"):
            if master[1] == port:
                r.extend(range(first, last + 1))
        return r

    def slot_owner(self, slot, via=None):
        """The port of the master serving slot, per CLUSTER SLOTS of via."""
        for first, last, master, *_ in self.command(via or self.live_ports()[0],
                                                    "CLUSTER", "SLOTS"):
            if first <= slot <= last:
                return master[1]
        return None

    def keyslot(self, key):
        return self.command(self.live_ports()[0], "CLUSTER", "KEYSLOT", key)

    def node_for_key(self, key):
        """The port of the master serving key."""
        return self.slot_owner(self.keyslot(key))

    # ------------------------------------------------------------ waiting

    def _covered(self, port):
        slots = self.command(port, "CLUSTER", "SLOTS")
        return sum(last - first + 1 for first, last, *_ in slots) == SLOTS

    def wait_ok(self, timeout=30.0):
        """Every live node says cluster_state:ok and sees all slots served."""
        def ok():
            return all(
                self.info(p).get("cluster_state") == "ok" and self._covered(p)
                for p in self.live_ports()
            )

        try:
            harness.wait_until(ok, timeout, interval=0.1, what="cluster_state:ok everywhere")
        except TimeoutError as e:
            raise RuntimeError("%s\n%s" % (e, self._logs()))

    def _wait_replicas(self, timeout):
        def attached():
            ns = self.nodes()
            for m in ns:
                if "master" in m["flags"] and m["slots"]:
                    reps = [n for n in ns if n["master"] == m["id"]]
                    if len(reps) < self.replicas:
                        return False
            for p in self.live_ports():
                role = self.command(p, "ROLE")
                if role[0] == "slave" and role[3] != "connected":
                    return False
            return True

        harness.wait_until(attached, timeout, interval=0.1, what="replicas to sync")

    # ------------------------------------------------------------ faults

    def kill_master(self, port):
        """SIGKILLs node port (its slots stay with it until a replica takes
        over: wait_failover)."""
        proc = self.procs[port]
        proc.kill()
        proc.wait()

    def restart_node(self, port, timeout=20.0):
        """Starts a stopped node again with its nodes.conf (it rejoins,
        as a replica if it lost its slots)."""
        self._launch(port)
        if not self._wait_ping(port, timeout):
            raise RuntimeError("node %d cannot bind its port again" % port)

    def wait_failover(self, dead_port, timeout=30.0):
        """Waits until dead_port serves no slot in the view of every live
        node and the cluster is ok again; returns the ports of the new
        masters of its slots."""
        def moved():
            owners = set()
            for p in self.live_ports():
                for first, last, master, *_ in self.command(p, "CLUSTER", "SLOTS"):
                    if master[1] == dead_port:
                        return False
                    owners.add(master[1])
            return owners

        harness.wait_until(moved, timeout, interval=0.1, what="failover of %d" % dead_port)
        self.wait_ok(timeout)
        return sorted(self.masters())

    def failover(self, replica_port, timeout=30.0):
        """A manual CLUSTER FAILOVER on replica_port (its master steps
        down without data loss); waits until replica_port is a master."""
        self.command(replica_port, "CLUSTER", "FAILOVER")
        harness.wait_until(lambda: self.command(replica_port, "ROLE")[0] == "master",
                           timeout, interval=0.05, what="manual failover to %d" % replica_port)
        self.wait_ok(timeout)

    def replicas_of(self, master_port):
        mid = self.node_id(master_port)
        return [n["port"] for n in self.nodes() if n["master"] == mid]

    # ------------------------------------------------------------ resharding

    def begin_migration(self, slot, src, dst):
        """Marks slot IMPORTING on dst and MIGRATING on src: from now on src
        answers ASK for keys of slot it no longer holds."""
        self.command(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(src))
        self.command(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(dst))

    def move_keys(self, slot, src, dst, limit=None, batch=100):
        """MIGRATEs keys of slot from src to dst (all, or at most limit);
        returns how many moved."""
        moved = 0
        for _ in range(100000):  # bounded: 100000 batches
            want = batch if limit is None else min(batch, limit - moved)
            if want <= 0:
                break
            keys = self.command(src, "CLUSTER", "GETKEYSINSLOT", slot, want)
            if not keys:
                break
            auth = ["AUTH", self.password] if self.password is not None else []
            self.command(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, *auth, "KEYS", *keys)
            moved += len(keys)
        return moved

    def finish_migration(self, slot, dst):
        """Gives slot to dst in every master's view (SETSLOT NODE): the old
        owner now answers MOVED."""
        did = self.node_id(dst)
        self.command(dst, "CLUSTER", "SETSLOT", slot, "NODE", did)
        for p in self.live_ports():
            if p == dst:
                continue
            try:
                self.command(p, "CLUSTER", "SETSLOT", slot, "NODE", did)
            except harness.RedisError:
                pass  # a replica refuses; it learns through the bus
        def agreed():
            return all(self.slot_owner(slot, via=p) == dst for p in self.live_ports())

        harness.wait_until(agreed, 20.0, interval=0.05, what="slot %d to move to %d" % (slot, dst))

    def migrate_slot(self, slot, src, dst):
        """Moves slot and its keys from master src to master dst."""
        self.begin_migration(slot, src, dst)
        n = self.move_keys(slot, src, dst)
        self.finish_migration(slot, dst)
        return n

