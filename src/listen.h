/*
 * listen.h: listening sockets, TCP ("host:port", "[v6]:port") or unix
 * ("unix:/path"). Opens and closes them; accepting is the front's (http.c).
 */
#ifndef RATELIMITD_LISTEN_H
#define RATELIMITD_LISTEN_H

#include <stddef.h>

#include "util.h"

/*
 * Binds and listens on addr; the socket is non-blocking and close-on-exec.
 * reuseport: SO_REUSEPORT (TCP), so that each worker may bind the same
 * address and the kernel spreads connections between them. A unix socket
 * file left by a previous run is replaced, but not one another process
 * still answers on. Returns the descriptor (the caller owns it), or -1 with
 * a message.
 */
int listen_open(const char *addr, int reuseport, char *err, size_t errlen) RL_WUR;

/* Closes fd (-1: nothing). addr: a unix socket's file is unlinked (NULL: the
 * file is left, for a descriptor that shares it). */
void listen_close(int fd, const char *addr);

#endif
