/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen.h: listening sockets, TCP ("host:port", "[v6]:port") or unix
 * ("unix:/path"). Opens and closes them; which front owns which socket,
 * sharing them between workers and accepting are listener.c's.
 */
#ifndef RATELIMITD_LISTEN_H
#define RATELIMITD_LISTEN_H

#include <stddef.h>
#include <stdint.h>

#include "lib/util.h"

/* Who may connect to a unix socket file: applied right after bind, before
 * listen, so no client connects while the file has bind's mode. */
struct listen_perm {
    int64_t mode;      /* chmod to this; -1: leave bind's 0777 & ~umask */
    int64_t gid;       /* chown to this group; -1: leave the daemon's */
    const char *group; /* the group as the policy file names it, for messages */
};

/*
 * Binds and listens on addr; the socket is non-blocking and close-on-exec.
 * reuseport: SO_REUSEPORT (TCP), so that each worker may bind the same
 * address and the kernel spreads connections between them. A unix socket
 * file left by a previous run is replaced, but not one another process
 * still answers on; perm (NULL: none) sets a unix socket file's mode and
 * group, and is ignored for TCP. Returns the descriptor (the caller owns
 * it), or -1 with a message naming the address but not what it is for:
 * the caller knows the setting it came from and prefixes it. A socket file
 * it made is removed on failure.
 */
int listen_open(const char *addr, int reuseport, const struct listen_perm *perm, char *err,
                size_t errlen) RL_WUR;

/* True if fd is a socket bound to addr (the same forms as listen_open: a
 * TCP address as resolved by listen_open, or "unix:/path"). */
int listen_is_at(int fd, const char *addr);

/* Closes fd (-1: nothing). addr: a unix socket's file is unlinked (NULL: the
 * file is left, for a descriptor that shares it). */
void listen_close(int fd, const char *addr);

#endif
