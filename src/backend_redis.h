/*
 * backend_redis.h: the one Redis connection (hiredis async on libevent).
 * The only module that speaks RESP: connect, AUTH/SELECT from the URL,
 * SCRIPT LOAD, EVALSHA with NOSCRIPT reload-and-retry, reconnection with
 * capped exponential backoff.
 *
 * Every call handed to backend_eval gets exactly one completion callback:
 * with the script's integers, with a Redis error, or "unavailable" when the
 * connection is lost first. Deadlines belong to the caller (check.c): a
 * completion may arrive after the caller has answered, and must then only
 * release what it holds.
 *
 * Today there is one connection per daemon; Cluster routing will group a
 * request's keys by node behind this same interface.
 */
#ifndef RATELIMITD_BACKEND_REDIS_H
#define RATELIMITD_BACKEND_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "scripts.h"
#include "util.h"

struct event_base;
struct backend;

enum backend_status {
    BACKEND_OK,          /* ints/nints hold the script's reply */
    BACKEND_ERROR,       /* Redis answered with an error (message in errmsg) */
    BACKEND_UNAVAILABLE, /* not connected, or the connection was lost */
};

/* ints and errmsg are valid only during the callback. */
typedef void (*backend_done_fn)(void *arg, enum backend_status status, const long long *ints,
                                size_t nints, const char *errmsg);

/* The environment variable whose value, when set, is the Redis password
 * (overriding the URL's). The password is never logged. */
#define BACKEND_PASSWORD_ENV "RATELIMITD_REDIS_PASSWORD"

/* Parses a redis URL (redis://[[user]:password@]host[:port][/db] or
 * unix:/path). Does not connect. Returns NULL with a message on a bad URL. */
struct metrics;
/* Parses a redis URL (see above); counts round trips, reconnects, NOSCRIPT
 * reloads and errors in m (which must outlive the backend). */
struct backend *backend_new(struct event_base *base, const char *url, const struct logger *lg,
                            struct metrics *m, char *err, size_t errlen) RL_WUR;

/* Starts connecting; reconnects by itself from then on until backend_free. */
void backend_start(struct backend *b);

/*
 * Runs the decision script with call's KEYS/ARGV. Takes call (left empty)
 * in every case: it is kept, uncopied, until the reply, for a NOSCRIPT
 * retry. Returns 0 if the call was sent or queued (done will be called
 * exactly once, possibly after the connection is lost), or -1 when the
 * backend is down right now (done is not called; the caller answers at
 * once instead of waiting for a deadline).
 */
int backend_eval(struct backend *b, struct script_call *call, backend_done_fn done,
                 void *arg) RL_WUR;

/* Told by the caller when a call's deadline passed with no reply. After a
 * few in a row with no reply from Redis in between, the connection is taken
 * as hung: it is dropped (its calls complete as unavailable) and
 * re-established with backoff, and calls are refused at once until the
 * script is loaded again. */
void backend_note_timeout(struct backend *b);

/* Called whenever backend_ready() changes. */
typedef void (*backend_state_fn)(void *arg, int ready);
void backend_on_state(struct backend *b, backend_state_fn fn, void *arg);

/* True when connected and the script is loaded. */
int backend_ready(const struct backend *b);

/* A short description of the target for logs: "127.0.0.1:6379/0". */
const char *backend_target(const struct backend *b);

/* Closes the connection; pending calls complete as unavailable.
 * NULL is a no-op. */
void backend_free(struct backend *b);

#endif
