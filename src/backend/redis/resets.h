/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resets.h: the Redis reset channel, written once for both Redis backends
 * (backend_redis.c on one server, backend_cluster.c on a cluster).
 *
 * A reset (the admin API's DELETE) is one DEL of every Redis key of the
 * key's tiers (they share one hash tag, so the DEL is Cluster-safe), then
 * one PUBLISH on "<key_prefix>reset" of "<policy>:<key bytes>" (policy
 * names never hold ':', so the first ':' ends the name, and the key is sent
 * as it is, any bytes), pipelined on one connection so that no daemon hears
 * of the reset before the state is gone. Every backend listens on a
 * connection of its own subscribed to the channel and reports each
 * announcement to its on_reset (backend.h); after each (re)subscription it
 * reports a NULL policy, since announcements made while it was down were
 * lost.
 *
 * Owns: the channel's name, the commands of one reset and the life of its
 * two replies, the listener's connection and what it reads. Does not own
 * which server a reset or the listener goes to (the backends: a cluster
 * picks the slot's master and moves the listener when its node goes), nor
 * the connections' credentials (redis_url.h).
 */
#ifndef RATELIMITD_RESETS_H
#define RATELIMITD_RESETS_H

#include <stddef.h>

#include "backend/backend.h"
#include "backend/redis/redis_conn.h"
#include "lib/log.h"
#include "lib/util.h"

struct config;
struct event_base;
struct policy;
struct redis_node;

struct resets_listener;

/* Makes *channel "<key_prefix>reset" (owned: the old one is freed) unless
 * it is that already: a backend's watch_resets, single server or Cluster.
 * Returns 1 when it changed, the listener *l then freed and NULL, for the
 * caller to make again on the new channel (unsubscribing in place would
 * mix the old channel's messages with the new confirmation); 0 when it did
 * not, *l left alone. */
int resets_channel_follow(char **channel, struct resets_listener **l, const char *key_prefix);

/* The commands of one reset of (p, key): the DEL of every Redis key of
 * every tier, and the PUBLISH of "<policy>:<key>" on channel. Owns its
 * memory (resets_cmds_free); channel is borrowed. */
struct resets_cmds {
    int del_argc;
    const char **del_argv; /* "DEL", then the keys (del_argv[1] is the first) */
    size_t *del_lens;
    char *keys; /* the keys' bytes, POLICY_KEY_BUF each */
    const char *pub_argv[3];
    size_t pub_lens[3];
    char *msg; /* "<policy>:<key>" */
};

/* Builds the commands (p has at least one tier for a DEL that Redis
 * accepts: the caller decides whether to send one without). */
void resets_cmds_build(struct resets_cmds *c, const struct config *cfg, const struct policy *p,
                       const char *key, size_t keylen, const char *channel);

void resets_cmds_free(struct resets_cmds *c);

/* Sends c's DEL then its PUBLISH on n. Returns -1 when the DEL cannot be
 * sent (done is never called), else 0 and done is called exactly once,
 * with the number of keys deleted and of daemons notified, or the first
 * failure: lost is the message for a connection lost before a reply. c may
 * be freed once this returns (the commands are formatted by then). */
int resets_send(struct redis_node *n, struct resets_cmds *c, const char *lost,
                backend_reset_done_fn done, void *arg) RL_WUR;

/* The listener: one connection subscribed to a channel, for one backend. */

/* The listener's connection went down (why is for the log); a reconnect is
 * scheduled, to the endpoint set by then. */
typedef void (*resets_down_fn)(void *arg, struct resets_listener *l, const char *why);

/*
 * Connects to ep and subscribes to channel (copied), reporting every
 * announcement to owner->on_reset (read at each message: it may be set
 * later). SUBSCRIBE not sent or refused drops the connection, which
 * reconnects after the backoff. target names the server in the log lines
 * of a single server (borrowed: it must outlive the listener); NULL: the
 * listener names the node it is on (a cluster's moves). down (may be NULL)
 * hears every loss.
 */
struct resets_listener *resets_listener_new(struct event_base *base, const struct logger *lg,
                                            struct backend *owner, const char *channel,
                                            const struct redis_endpoint *ep, const char *target,
                                            resets_down_fn down, void *down_arg);

/* Where the next connect goes (the current connection, if any, stays). */
void resets_listener_set_endpoint(struct resets_listener *l, const struct redis_endpoint *ep);

/* Drops the connection (why is for the log) and connects to ep now. */
void resets_listener_move(struct resets_listener *l, const struct redis_endpoint *ep,
                          const char *why);

/* "host:port" (redis_conn_target) of the listener's current endpoint. */
const char *resets_listener_target(const struct resets_listener *l);

/* Closes the connection (no down call). NULL is a no-op. */
void resets_listener_free(struct resets_listener *l);

#endif
