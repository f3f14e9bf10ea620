# SPDX-License-Identifier: Apache-2.0
"""supervisor.py: what holds a daemon's listening socket across its
restarts, as systemd does for ratelimitd.socket (test_socket_activation,
test_handover, bench/soak.py): the socket bound here, the daemon started
with it as socket activation passes it (LISTEN_FDS, LISTEN_PID,
LISTEN_FDNAMES), and the daemon's open descriptors counted from /proc.

Owns none of the processes it starts: the caller waits for and stops
them."""
import os
import socket

import harness
from daemon import BINARY, WRAPPER


def bound(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(1024)
    return s


def spawn_with(socks, names, config, log, listen_pid="$$", binary=BINARY):
    """The daemon with socks at descriptors 3.. and LISTEN_PID set to its
    own pid (by the shell that execs it, as systemd sets it in the child),
    or to listen_pid."""
    fds = [s.fileno() for s in socks]

    def place():
        # Above every source first, then into place: a source may be 3.
        high = [os.dup2(fd, 100 + i) for i, fd in enumerate(fds)]
        for i, fd in enumerate(high):
            os.dup2(fd, 3 + i)

    env = dict(os.environ, LISTEN_FDS=str(len(socks)), LISTEN_FDNAMES=":".join(names))
    script = 'LISTEN_PID=%s; export LISTEN_PID; exec "$@"' % listen_pid
    return harness.spawn(["sh", "-c", script, "sh"] + WRAPPER + [binary, "--config", config],
                         log, env=env, preexec_fn=place,
                         pass_fds=tuple(range(3, 3 + len(socks))))


def descriptors(pid):
    """pid's open descriptors but its TCP connections (clients come and go;
    listening sockets, pipes and the rest stay)."""
    connections = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] != "0A":  # not LISTEN
                    connections.add("socket:[%s]" % cols[9])
    fds = "/proc/%d/fd" % pid
    return sum(1 for fd in os.listdir(fds) if os.readlink(os.path.join(fds, fd)) not in connections)
