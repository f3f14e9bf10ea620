/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.h: a front connection's bytes, plain or TLS, behind the calls the
 * fronts made on the socket: front_io_recv and front_io_send behave as
 * recv and send do (a count, 0 at the end, -1 with errno: EAGAIN when
 * nothing can move now), so a front reads and writes the same way over
 * both.
 *
 * Over TLS, OpenSSL works on memory buffers, never on the socket: the
 * front's recv pulls the socket's bytes into OpenSSL and returns the
 * plaintext; what OpenSSL has to send (the handshake, the answers'
 * records, alerts) waits in its output buffer for front_io_flush, which a
 * front calls where it wrote before. So no call ever needs the opposite
 * direction of the socket (a read wanting a write), which plain events
 * could not express. A connection's handshake runs under the front's own
 * timers and limits: bytes that make no plaintext do not count as
 * activity, so a client that never finishes its handshake is closed at
 * idle_timeout like one that never sends a request.
 *
 * Owns the connection's SSL (and its reference to the context it was
 * accepted with: a reload's new context serves only later connections),
 * the handshake's metrics and debug log line; not the socket (the front
 * closes it), not the contexts (lib/tls_server.c, made with the config).
 */
#ifndef RATELIMITD_FRONT_TLS_H
#define RATELIMITD_FRONT_TLS_H

#include <stddef.h>
#include <sys/types.h>

#include "lib/buf.h"
#include "lib/tls_server.h"
#include "lib/util.h"

struct core;
struct event;
struct ssl_st;

struct front_io {
    int fd;
    struct ssl_st *ssl;      /* NULL: plain text */
    struct event *rd;        /* the front's read event: re-run when plaintext is left */
    const struct core *core; /* its metrics and log */
    struct buf early;        /* sent by the front before the handshake ended */
    unsigned char listener;  /* enum tls_listener */
    unsigned char state;     /* handshaking, open, failed (tls.c) */
    unsigned char more;      /* front_io_recv stopped with bytes left inside OpenSSL */
};

/* A connection accepted on fd: plain if server is NULL, else TLS with
 * server's context (its own reference). listener labels its metrics; rd
 * is the front's read event on fd. Cannot fail (OpenSSL out of memory
 * aborts, like any allocation). */
void front_io_init(struct front_io *io, int fd, const struct tls_server *server,
                   enum tls_listener listener, struct event *rd, const struct core *core);

/* As recv: plaintext read, 0 at the end of the stream (or the peer's
 * close_notify), -1 with errno (EAGAIN: nothing yet; EPROTO: the
 * handshake or a record failed, counted and logged at debug). Whatever
 * OpenSSL answered during the call is flushed, what the socket would not
 * take left for front_io_flush. */
ssize_t front_io_recv(struct front_io *io, void *buf, size_t len) RL_WUR;

/* As send (MSG_NOSIGNAL): the count taken (all of it before the
 * handshake ends: kept until it does), -1 with errno (EAGAIN: the socket
 * and the output buffer are full). */
ssize_t front_io_send(struct front_io *io, const void *data, size_t len) RL_WUR;

/* The front has (re)added its read event: if OpenSSL still holds bytes
 * the socket will not announce, the read event runs now. A no-op on plain
 * text. */
void front_io_kick(struct front_io *io);

/* Writes what TLS holds for the socket. Returns 0 (all of it, or the
 * socket is full: front_io_pending says which), -1 if the connection
 * broke. A no-op on plain text. */
int front_io_flush(struct front_io *io) RL_WUR;

/* Bytes wait for the socket (the front keeps its write event added). */
int front_io_pending(const struct front_io *io);

/* The front is about to shut its side: a close_notify is queued and
 * flushed as far as the socket takes it (the shutdown follows anyway). */
void front_io_shutdown(struct front_io *io);

/* Frees the SSL (counting a handshake the connection never finished);
 * the front closes fd. */
void front_io_fini(struct front_io *io);

#endif
