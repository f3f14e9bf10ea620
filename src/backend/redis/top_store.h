/* SPDX-License-Identifier: Apache-2.0 */
/*
 * top_store.h: the heaviest keys' sketches (core/top_keys.h) in Redis,
 * written once for both Redis backends (backend_redis.c, backend_cluster.c).
 *
 * One hash per policy and minute, "<key_prefix>top:{<policy>}:<minute>",
 * a field per member (a daemon's worker) holding its sketches' text,
 * expiring TOP_KEYS_TTL_S after its last write. The hash tag keeps a
 * policy's minutes in one Cluster slot, so that a query is one pipeline of
 * HGETALLs to one node. A hand-over is HSET then EXPIRE, pipelined with the
 * other policies' of the same tick, with no reply awaited.
 *
 * Owns the keys' names, the commands and the reading of their replies.
 * Does not own which node they go to (the backends: a cluster picks the
 * slot's master by top_store_key).
 */
#ifndef RATELIMITD_TOP_STORE_H
#define RATELIMITD_TOP_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "lib/buf.h"

struct redis_node;

/* The key of (policy, minute) appended to out. */
void top_store_key(struct buf *out, const char *key_prefix, const char *policy, int64_t minute);

/* HSET and EXPIRE of member's sketches on n. -1: n not ready. */
int top_store_put(struct redis_node *n, const char *key_prefix, const char *policy, int64_t minute,
                  const char *member, const char *data, size_t len) RL_WUR;

/* The HGETALL of each minute lo .. hi on n; done is called once with every
 * field found, or the first failure (lost: the message for a connection
 * lost). -1: not connected (done never called). */
int top_store_get(struct redis_node *n, const char *key_prefix, const char *policy, int64_t lo,
                  int64_t hi, const char *lost, backend_top_done_fn done, void *arg) RL_WUR;

#endif
