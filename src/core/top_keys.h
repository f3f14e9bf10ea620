/* SPDX-License-Identifier: Apache-2.0 */
/*
 * top_keys.h: the heaviest keys of a policy, per loop and across the fleet
 * (GET /v1/top/<policy>).
 *
 * Each loop (a worker's core) keeps, per policy, two Space-Saving sketches
 * (lib/space_saving.h) of the current minute: denied checks per key, and
 * admitted cost per key. They are fed after each decision (top_keys_count:
 * no allocation, no backend call) and, once a second when they changed,
 * handed to the backend (backend.h top_put) under (policy, minute, member):
 * Redis keeps them in a hash per policy and minute shared by every daemon,
 * the memory backend in the process. A minute's sketches are final once
 * the loop's first tick of the next minute has handed them over, and then
 * cleared: a count lands in the minute of the tick that hands it over (at
 * most TOP_KEYS_TICK_US late).
 *
 * A query (top_query_start) asks the backend for every member's sketches
 * of the window's minutes (top_keys_window: the current minute and the N
 * whole minutes before it, so window=1m covers the last 60 to 120 s) and
 * merges them (space_saving_merge): counts are sums, and each count's
 * error is the sum of the sketches' errors plus each sketch's min where
 * the key has no counter, so count - error <= the true count <= count.
 *
 * Owns the per-loop sketches, their hand-over timer, the window rule and
 * the life of a query (its pending call, as reset.c's). Does not own how a
 * backend stores sketches, nor the HTTP answer (front/http/admin_top.c).
 */
#ifndef RATELIMITD_TOP_KEYS_H
#define RATELIMITD_TOP_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "lib/space_saving.h"

#define TOP_KEYS_CAP 256
#define TOP_KEYS_TICK_US 1000000
/* How long a backend keeps a minute's sketches: past the longest window. */
#define TOP_KEYS_TTL_S 720
#define TOP_KEYS_N_MAX 100

enum top_by { TOP_BY_DENIED, TOP_BY_USED };

struct top_keys;

/* A loop's sketches for core's config, handed over as member ("<daemon
 * id>/<worker>", copied) from a timer on core->base; seed keys the tables.
 * NULL with core->top NULL is "not kept" everywhere. */
struct top_keys *top_keys_new(struct core *core, const char *member, uint64_t seed);

/* The sketches of cfg's policies: those of a policy of the same name are
 * kept, others freed (their counts since the last tick are lost). */
void top_keys_reload(struct top_keys *t, const struct config *cfg);

/* Counts one decided check: 1 under denied when denied, else its cost
 * under used when admitted (its request was allowed, so the cost was
 * taken). cfg is the check's snapshot. NULL t is a no-op. */
void top_keys_count(struct top_keys *t, const struct config *cfg, const struct check_item *it,
                    int denied, int admitted);

/* Hands over every changed sketch now (a drain's last word). */
void top_keys_flush(struct top_keys *t);

void top_keys_free(struct top_keys *t); /* NULL is a no-op */

/* The minutes (unix time / 60) of a window of `minutes` as of now_us: the
 * current one and the `minutes` whole ones before. Pure. */
void top_keys_window(int64_t now_us, int minutes, int64_t *lo, int64_t *hi);

/* The bytes a loop's sketches take per policy. */
size_t top_keys_bytes_per_policy(void);

/* What a query found. */
struct top_result {
    int ok;             /* else why */
    const char *why;    /* "redis is unavailable" */
    const char *policy; /* the query's */
    enum top_by by;
    int window; /* minutes */
    uint64_t total;
    size_t daemons;
    int64_t merged_at_us; /* wall clock */
    const struct space_saving_entry *keys;
    size_t n;
};

/* r and what it points to are valid only during the call. */
typedef void (*top_reply_fn)(void *ctx, const struct top_result *r);

struct top_query;

/* Asks core's backend for the window's sketches of p and merges the n
 * heaviest: reply is called exactly once, possibly before this returns
 * (then NULL is returned), else the query is returned until then, to
 * cancel (top_query_cancel: reply is then never called). */
struct top_query *top_query_start(struct core *core, const struct policy *p, enum top_by by,
                                  int window, size_t n, top_reply_fn reply, void *ctx);
void top_query_cancel(struct top_query *q); /* NULL is a no-op */

#endif
