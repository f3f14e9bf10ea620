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
struct event_base;
struct metrics;
struct overrides;
struct status;

/* Every worker's metrics shard summed into a new set the caller frees
 * (worker_metrics_sum): the status names no worker. */
typedef struct metrics *status_sum_fn(void *arg);

/* Starts sampling on base once a second, through sum(arg). NULL (with a
 * message in err) only if libevent cannot make the timer. */
struct status *status_new(struct event_base *base, status_sum_fn *sum, void *arg, char *err,
                          size_t errlen);

/* NULL is a no-op. */
void status_free(struct status *st);

/* A reload happened, on the main thread: ok, or not with its error (then
 * also the last configuration error). The last STATUS_RELOADS are kept. */
#define STATUS_RELOADS 10
void status_reload(struct status *st, int ok, const char *error);

/* The JSON of GET /v1/status for the snapshot cfg (the asking worker's),
 * counting each policy's run-time overrides in force in ov, appended to
 * out. Any thread. */
void status_json(struct status *st, const struct config *cfg, struct overrides *ov,
                 struct buf *out);

/* The JSON of GET /v1/rates for the last `seconds`, appended to out. Any
 * thread. */
void status_rates_json(struct status *st, const struct config *cfg, int seconds, struct buf *out);

#endif
