/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rates.h: decisions per second per policy over the last RATES_SECONDS,
 * allowed and denied, as GET /v1/rates answers them (the status page's
 * chart). Fed once a second with each policy's running totals (the sum of
 * every worker's metrics shard, read the way /metrics reads them), it keeps
 * the differences in a ring per policy: the decision path is untouched.
 *
 * Owns the rings and their JSON; not the clock (the caller passes the
 * second), not the counting (metrics.c), not the timer (status.c).
 * Any thread: one mutex, taken once a second by the feeder and by each
 * request for the JSON.
 */
#ifndef RATELIMITD_RATES_H
#define RATELIMITD_RATES_H

#include <stdint.h>

#include "lib/buf.h"

#define RATES_SECONDS 300

struct config;
struct rates;

/* Empty; never NULL. */
struct rates *rates_new(void);

/* NULL is a no-op. */
void rates_free(struct rates *r);

/* policy's running totals (since the process started) at wall-clock
 * second sec (seconds since the epoch). Seconds skipped since the last
 * word are zeros, and the second sec holds everything since. A total that
 * went down (it never should) counts 0. */
void rates_record(struct rates *r, int64_t sec, const char *policy, uint64_t allowed,
                  uint64_t denied);

/* The ring's last `seconds` seconds (1..RATES_SECONDS) up to the last one
 * recorded, oldest first, for every policy of cfg, as the JSON of GET
 * /v1/rates appended to out. A policy with no word yet has zeros. */
void rates_json(struct rates *r, const struct config *cfg, int seconds, struct buf *out);

#endif
