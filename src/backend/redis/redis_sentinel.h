/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_sentinel.h: finding the master through Redis Sentinel. Asks the
 * sentinels of redis.sentinel.addresses in turn (SENTINEL
 * get-master-addr-by-name), the first that answers with an address wins;
 * stays subscribed to +switch-master on one sentinel to hear of a failover
 * at once; asks again whenever the owner reports the master lost (the
 * connection went, a READONLY reply, ROLE not master), every second
 * while nothing is known (and for 30 s after a loss or a new address), and
 * every 10 s otherwise (a +switch-master missed while not subscribed).
 *
 * The owner (backend_redis.c) points its node at each address reported.
 */
#ifndef RATELIMITD_REDIS_SENTINEL_H
#define RATELIMITD_REDIS_SENTINEL_H

#include "lib/log.h"

struct event_base;
struct metrics;
struct redis_tls;
struct redis_sentinel_config;
struct redis_sentinel;

/* The master is (now) at host:port: the first answer, or a change. */
typedef void (*redis_sentinel_master_fn)(void *arg, const char *host, int port);

/* tls: NULL, or the TLS the sentinels are reached with (borrowed). */
struct redis_sentinel *redis_sentinel_new(struct event_base *base, const struct logger *lg,
                                          struct metrics *m,
                                          const struct redis_sentinel_config *cfg,
                                          struct redis_tls *tls, redis_sentinel_master_fn fn,
                                          void *arg);

void redis_sentinel_start(struct redis_sentinel *s);

/* The owner lost the master (why for the log): ask the sentinels again. */
void redis_sentinel_rediscover(struct redis_sentinel *s, const char *why);

void redis_sentinel_free(struct redis_sentinel *s); /* NULL is a no-op */

#endif
