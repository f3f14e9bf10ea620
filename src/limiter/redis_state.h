/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_state.h: one tier decided by the limiter's own C steps on the state
 * string Redis holds for it, for the Redis module (src/module/): the same
 * arithmetic as the memory backend (tier.c and the algorithm files), read
 * from and written back to the Functions' strings ("f:<e>:<n>", ...), byte
 * for byte, with the Functions' expiries.
 *
 * Owns: decoding and encoding the string states, and which algorithms have
 * one (fixed_window, sliding_window_counter, token_bucket, gcra,
 * leaky_bucket, and calendar_window, whose bounds the caller passes; the
 * log, the buckets and concurrency keep a ZSET or a HASH: none of these
 * yet).
 * Does not own: Redis calls, argument decoding (src/module/), any
 * algorithm's arithmetic.
 */
#ifndef RATELIMITD_REDIS_STATE_H
#define RATELIMITD_REDIS_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"

#define REDIS_STATE_FIGURES 7 /* a tier's integers in check.lua's reply */
#define REDIS_STATE_BUF 96    /* a state string: a letter and 3 int64s */

/* One tier of a call: its settings, its decoded state and pass 1's reading. */
struct redis_tier;

/* Whether algorithm a's state is a string this file decodes. */
int redis_state_supports(enum algorithm a);

/* The bytes of one struct redis_tier, and the i-th of an array of them
 * (array aligned as malloc aligns). */
size_t redis_state_tier_size(void);
struct redis_tier *redis_state_tier_at(void *array, size_t i);

/* Pass 1 (check.lua's read_and_decide): decodes val[0..len) (NULL: no key,
 * or not a string; another layout reads as absent, as in the script), loads
 * it as of now and decides cost. t (and bounds) must outlive x, have passed
 * the module's checks and be supported. bounds: a calendar tier's four
 * ("p:s:e:n", lua/calendar_window.lua; t's calendar unit is then anything
 * but CALENDAR_NONE), else NULL. Returns 1 if the tier allows, 0 if not,
 * -1 if now is outside the bounds (the script's error; x is unread). */
int redis_state_read(struct redis_tier *x, const struct tier *t, const int64_t *bounds,
                     int64_t cost, const char *val, size_t len, int64_t now)
    __attribute__((warn_unused_result));

/* The tier's 7 integers of the reply (allowed, limit, remaining, reset_us,
 * retry_us, delay_us, reason) as if its cost were taken iff consumed. */
void redis_state_figures(const struct redis_tier *x, int64_t now, int consumed,
                         int64_t out[REDIS_STATE_FIGURES]);

/* What SET is given after the value: PX ms, or PXAT ms (absolute). */
struct redis_expiry {
    int at; /* 1: PXAT */
    int64_t ms;
};

/* Pass 2 (commit): takes the cost, and writes the new state string into
 * buf (REDIS_STATE_BUF bytes) and its expiry into ex, as the script's SET
 * would; server_clock: now is Redis's TIME (then an expiry set from an end
 * is a PXAT, as lua/common.lua's expiry_until). Returns the string's
 * length. */
size_t redis_state_commit(struct redis_tier *x, int64_t now, int server_clock, char *buf,
                          struct redis_expiry *ex);

/* A report (check.lua's charge, argv[2] "3"): charges cost (< 0: a
 * refund) with no decision, on the state redis_state_read loaded (read it
 * with a cost of 0: a report's cost is no decision's), and writes the new
 * state as redis_state_commit does. The caller refused the algorithms
 * that take no report, or no refund (policy_algorithm_reports,
 * policy_algorithm_refunds). */
size_t redis_state_report(struct redis_tier *x, int64_t cost, int64_t now, int server_clock,
                          char *buf, struct redis_expiry *ex);

#endif
