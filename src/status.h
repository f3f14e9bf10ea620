/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status.h: what the status page reads of the whole process (GET
 * /v1/status, GET /v1/rates): the last reloads and the last configuration
 * error, the decisions per second per policy (core/rates.h) and the
 * round trip per Redis node, both sampled once a second on the main loop
 * from the sum of every worker's metrics shard, as /metrics sums them.
 *
 * Owns that history and the sampling timer; not the counting (metrics.c),
 * not the HTTP (the front asks through front_host).
 */
#ifndef RATELIMITD_STATUS_H
#define RATELIMITD_STATUS_H

#include "lib/buf.h"

struct config;
struct server;
struct status;

/* Starts sampling on srv->base once a second. NULL (with a message in err)
 * only if libevent cannot make the timer. */
struct status *status_new(struct server *srv, char *err, size_t errlen);

/* NULL is a no-op. */
void status_free(struct status *st);

/* A reload happened, on the main thread: ok, or not with its error (then
 * also the last configuration error). The last STATUS_RELOADS are kept. */
#define STATUS_RELOADS 10
void status_reload(struct status *st, int ok, const char *error);

/* The JSON of GET /v1/status for the snapshot cfg (the asking worker's),
 * appended to out. Any thread. */
void status_json(struct server *srv, const struct config *cfg, struct buf *out);

/* The JSON of GET /v1/rates for the last `seconds`, appended to out. Any
 * thread. */
void status_rates_json(struct server *srv, const struct config *cfg, int seconds, struct buf *out);

#endif
