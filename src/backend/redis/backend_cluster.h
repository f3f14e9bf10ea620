/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_cluster.h: the Redis Cluster backend (backend.h): a slot map
 * from CLUSTER SLOTS, one redis_node per master, each check routed by the
 * slot of its hash tag; MOVED (refresh the map, retry), ASK (ASKING, retry
 * on that node), TRYAGAIN and CLUSTERDOWN (bounded retries, then the
 * failure_mode answer). A request whose checks share one slot is one
 * atomic call; a request whose checks span slots is decided in two phases
 * (see backend_cluster.c and the README's "Scaling out").
 */
#ifndef RATELIMITD_BACKEND_CLUSTER_H
#define RATELIMITD_BACKEND_CLUSTER_H

#include <stddef.h>

#include "core/backend.h"
#include "lib/log.h"

struct event_base;
struct metrics;
struct config;

/* From cfg's redis.cluster seeds (and redis.tls); does not connect
 * (ops->start does). NULL with a message. */
struct backend *backend_cluster_new(struct event_base *base, const struct config *cfg,
                                    const struct logger *lg, struct metrics *m, char *err,
                                    size_t errlen) RL_WUR;

#endif
