/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_redis.h: the Redis backend (backend.h) on one server (plain URL,
 * or the master the sentinels name): a redis_node (redis_node.h) for the
 * code, on one pipelined redis_conn (redis_conn.h: plain TCP, unix socket
 * or TLS; AUTH/SELECT from the URL; reconnection with capped, jittered
 * exponential backoff).
 *
 * Deadlines belong to the caller (check.c), which reports each one that
 * passes with no reply (note_timeout). After a few in a row with no reply
 * in time in between (no reply at all, or replies later than their
 * deadline), the connection is taken as hung: it is dropped (its calls
 * complete as unavailable) and re-established with backoff, and calls are
 * refused at once until the script is loaded again: the circuit is open.
 *
 * A second connection, the reset listener, is subscribed to
 * "<key_prefix>reset" (ops->watch_resets): resets made by any daemon
 * sharing the Redis (ops->reset: DEL, then PUBLISH on the first connection)
 * are reported to on_reset, and a NULL policy after each (re)subscription.
 */
#ifndef RATELIMITD_BACKEND_REDIS_H
#define RATELIMITD_BACKEND_REDIS_H

#include <stddef.h>

#include "core/backend.h"
#include "lib/log.h"

struct event_base;
struct metrics;

struct config;

/* Parses cfg's redis.url (redis://[[user]:password@]host[:port][/db] or
 * unix:/path), loads redis.tls when the URL is rediss://, and makes the
 * backend; does not connect (ops->start does, then it reconnects by itself
 * until freed). cfg is not kept. Counts round trips, reconnects, NOSCRIPT
 * reloads and errors in m (which must outlive it). Returns NULL with a
 * message on a bad URL or an unusable CA, certificate or key. */
struct backend *backend_redis_new(struct event_base *base, const struct config *cfg,
                                  const struct logger *lg, struct metrics *m, char *err,
                                  size_t errlen) RL_WUR;

#endif
