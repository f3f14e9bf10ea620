/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_conn.h: one connection to one Redis server that the daemon drives
 * itself: a libevent bufferevent (plain TCP, a unix socket, or TLS through
 * libevent_openssl), hiredis's reply reader (redisReaderCreate) and command
 * formatter (redisFormatCommandArgv), nothing else of hiredis. Debian's
 * hiredis 0.14 has no TLS and no timeouts, hence this module.
 *
 * What it owns: the socket, the TLS session, the connect deadline, AUTH and
 * SELECT from the endpoint (sent first on every connection), the FIFO of
 * calls waiting for their reply (pipelined: replies come in order), and
 * reconnection with capped, jittered exponential backoff after every loss
 * until redis_conn_free.
 *
 * Every call sent (redis_conn_send / redis_conn_command returned 0) is
 * completed exactly once: with its reply, or with NULL when the connection
 * is lost, dropped or freed before the reply. Callbacks may send more
 * calls on the same connection (they queue behind the ones in flight) and
 * may call redis_conn_drop, but never redis_conn_free.
 */
#ifndef RATELIMITD_REDIS_CONN_H
#define RATELIMITD_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "config/redis_url.h"
#include "lib/log.h"

struct event_base;
struct redis_tls;
struct redis_conn;

/* Where and how to connect; redis_conn copies the strings. */
struct redis_endpoint {
    const char *host; /* NULL when unix_path is set */
    int port;
    const char *unix_path;
    const char *user;      /* NULL: AUTH with the password alone */
    const char *password;  /* NULL: no AUTH */
    int db;                /* SELECT when nonzero */
    struct redis_tls *tls; /* NULL: plain; borrowed, must outlive the conn */
};

/* Where a backend's data or reset connection goes: u's credentials (its
 * password the one to AUTH with: the backend puts the environment's there,
 * redis_url_password) and db, at host:port, or at u's unix socket when host
 * is NULL. Borrows u's strings and host; tls NULL: plain. */
struct redis_endpoint redis_conn_endpoint(const struct redis_url *u, const char *host, int port,
                                          struct redis_tls *tls);

/* r: the reply (freed after the callback returns), or NULL: the connection
 * went before it came. */
typedef void (*redis_reply_fn)(void *arg, redisReply *r);

struct redis_conn_events {
    /* Connected (and the TLS handshake done); AUTH and SELECT are queued.
     * Commands sent now run before any call sent later. */
    void (*up)(void *arg, struct redis_conn *c);
    /* Lost, dropped, or the connect failed; why is for the log. Waiting
     * calls have completed (NULL) by then; a reconnect is scheduled
     * (none after redis_conn_stop). */
    void (*down)(void *arg, struct redis_conn *c, const char *why);
    /* A reply no call waits for: pub/sub messages after SUBSCRIBE. NULL
     * is allowed when the connection never subscribes. */
    void (*push)(void *arg, redisReply *r);
    void *arg;
};

/* role names the connection in logs ("data", "resets", "sentinel"). Does
 * not connect: redis_conn_connect does. */
struct redis_conn *redis_conn_new(struct event_base *base, const struct logger *lg,
                                  const char *role, const struct redis_endpoint *ep,
                                  const struct redis_conn_events *ev);

/* Where the next connect goes (the current connection, if any, stays). */
void redis_conn_set_endpoint(struct redis_conn *c, const struct redis_endpoint *ep);

/* Connects now unless connected or connecting (a pending backoff is
 * cancelled). After each loss the connection reconnects by itself. */
void redis_conn_connect(struct redis_conn *c);

/* Sends len bytes of RESP (one command) and queues fn for its reply.
 * Returns -1 when not connected (fn is then never called). */
int redis_conn_send(struct redis_conn *c, const char *cmd, size_t len, redis_reply_fn fn,
                    void *arg) RL_WUR;

/* The same for a command given as arguments. */
int redis_conn_command(struct redis_conn *c, redis_reply_fn fn, void *arg, int argc,
                       const char **argv, const size_t *lens) RL_WUR;

/* Connected: the socket is open, the TLS handshake done. */
int redis_conn_is_up(const struct redis_conn *c);

/* Closes the connection now (every waiting call completes with NULL, then
 * down is called) and reconnects after the backoff. A no-op when down. */
void redis_conn_drop(struct redis_conn *c, const char *why);

/* Closes the connection (every waiting call completes with NULL, then
 * down is called) and stays down until redis_conn_connect: the owner has
 * no use for the server now. */
void redis_conn_stop(struct redis_conn *c, const char *why);

/* The backoff starts again from its minimum: the owner found the server
 * healthy (e.g. its code loaded). */
void redis_conn_healthy(struct redis_conn *c);

/* "host:port", "[v6]:port" or "unix:/path": the current endpoint. */
const char *redis_conn_target(const struct redis_conn *c);

/* Waiting calls complete with NULL; no down callback. NULL is a no-op. */
void redis_conn_free(struct redis_conn *c);

#endif
