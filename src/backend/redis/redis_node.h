/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_node.h: one Redis server the decision code runs on: a redis_conn
 * (redis_conn.h), the code loaded on every new connection (FUNCTION LOAD
 * REPLACE, or SCRIPT LOAD on a server without Functions: the EVALSHA
 * path), calls of the code with NOSCRIPT reload-and-retry, and the node's
 * readiness: connected and the code loaded, within READY_TIMEOUT of the
 * connect (else the connection is dropped and retried).
 *
 * A node may be required to be a master (sentinel and cluster modes): it
 * then asks ROLE after AUTH, and is never ready on a replica.
 *
 * The stall rule lives here: redis_node_note_timeout, reported by the
 * caller for each call whose deadline passed with no reply; after a few in
 * a row with no reply in time in between, the connection is taken as hung
 * and dropped (its calls complete with NULL).
 *
 * With redis.module auto or on, the calls go to the module's
 * ratelimitd.check on a node that has it (see redis_node.c).
 *
 * Per-node metrics (ratelimitd_redis_node_*{node="host:port"}): calls,
 * errors, reconnects, up; ratelimitd_redis_decision_path; the owner counts redirects and failovers
 * on the node's name.
 */
#ifndef RATELIMITD_REDIS_NODE_H
#define RATELIMITD_REDIS_NODE_H

#include "backend/redis/redis_conn.h"
#include "backend/redis/scripts.h"

struct metrics;
struct redis_node;

/* ready changed (the node's own view: connected, code loaded, master when
 * required). */
typedef void (*redis_node_state_fn)(void *arg, struct redis_node *n, int ready);

struct redis_node *redis_node_new(struct event_base *base, const struct logger *lg,
                                  struct metrics *m, const struct redis_endpoint *ep,
                                  int require_master, redis_node_state_fn fn, void *arg);

/* Connects (and keeps reconnecting until freed). */
void redis_node_start(struct redis_node *n);

int redis_node_ready(const struct redis_node *n);

/* Calls the code with call's KEYS and ARGV (FCALL, or EVALSHA where the
 * server has no Functions), preceded by ASKING when asking. fn receives the
 * reply, or NULL when the connection went; never a NOSCRIPT (the code is
 * reloaded and the call retried, a bounded number of times). call must
 * stay valid until fn is called. -1: not ready (fn never called). */
int redis_node_call(struct redis_node *n, const struct script_call *call, int asking,
                    redis_reply_fn fn, void *arg) RL_WUR;

/* The integers of a reply of the code, in buf when they fit: a check's
 * completion allocates nothing (the single-server and Cluster backends'
 * one buffer rule). */
struct redis_node_ints {
    long long *v; /* buf, or allocated */
    size_t n;
    long long buf[64];
};

/* What a backend answers when the script and the daemon are out of step. */
#define REDIS_NODE_NOT_INTS "script reply holds a non-integer"

/* The integers of r (an array of r->elements) into *ri, to free with
 * redis_node_ints_free whatever the result. Returns 0, or -1 if one is not
 * an integer (REDIS_NODE_NOT_INTS, or a lease's own message, to say). */
int redis_node_ints_of(const redisReply *r, struct redis_node_ints *ri) RL_WUR;
void redis_node_ints_free(struct redis_node_ints *ri);

/* As redis_node_call (never ASKING), but with redis.batch > 1
 * (redis_node_set_batch) the call waits for the end of this loop turn and
 * goes with the other calls of its group queued by then, up to redis.batch
 * per FCALL (a group: calls whose keys may share one command, the Cluster
 * slot; 0 on one server). fn receives the call's own reply; an error to the
 * whole batch, or NULL for the connection's loss, reaches every call of it.
 * -1: not ready (fn never called). */
int redis_node_call_batched(struct redis_node *n, const struct script_call *call, unsigned group,
                            redis_reply_fn fn, void *arg) RL_WUR;

/* redis.batch: at most this many calls per FCALL (1: every call alone). */
void redis_node_set_batch(struct redis_node *n, int64_t batch);

/* redis.module (before redis_node_start: it applies from the next connect
 * on). */
void redis_node_set_module(struct redis_node *n, enum redis_module_mode mode);

/* Why the node cannot be used under redis.module: on ("host:port: no
 * ratelimitd.check..."), from the last connection's probe; NULL if that is
 * not the reason. */
const char *redis_node_unusable(const struct redis_node *n);

/* Ready, and its calls go to the module (those it takes). */
int redis_node_by_module(const struct redis_node *n);

/* Any other command on the node's connection (DEL and PUBLISH of a reset,
 * CLUSTER SLOTS). -1: not connected. */
int redis_node_command(struct redis_node *n, redis_reply_fn fn, void *arg, int argc,
                       const char **argv, const size_t *lens) RL_WUR;

/* The calls' deadline, for the stall rule: a reply that comes later than
 * this after its call was sent does not show the connection healthy. 0
 * (the default): every reply does. */
void redis_node_set_timeout(struct redis_node *n, int64_t timeout_us);

/* A call's deadline passed with no reply (see the stall rule above). */
void redis_node_note_timeout(struct redis_node *n);

/* The server moved (a sentinel named a new master): drops the current
 * connection and connects to ep. */
void redis_node_set_endpoint(struct redis_node *n, const struct redis_endpoint *ep);

/* Drops the connection now (calls complete with NULL), reconnecting after
 * the backoff: a READONLY reply, a role change. */
void redis_node_drop(struct redis_node *n, const char *why);

/* Closes the connection (calls complete with NULL) and stays down until
 * redis_node_start: a server the owner has no use for now (a replica). */
void redis_node_stop(struct redis_node *n, const char *why);

/* "host:port" or "unix:/path", the metrics' node label. */
const char *redis_node_target(const struct redis_node *n);

void redis_node_free(struct redis_node *n); /* NULL is a no-op */

#endif
