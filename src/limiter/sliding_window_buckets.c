/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sliding_window_buckets.c: the sliding window counted in buckets of
 * `precision` µs, at most window/precision live ones. The C twin of
 * lua/sliding_window_buckets.lua, step for step and with its names, for the
 * in-memory limiter (limiter_local.h); its row in the ops table is
 * sliding_window_buckets_ops.
 *
 * Owns: the buckets (search, add, drop the stale) and the steps.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include <string.h>

#include "lib/util.h"
#include "limiter/limiter_internal.h"

/* The first bucket starting at or after x, or len. */
static size_t swb_lower(const struct entry *e, int64_t x)
{
    size_t lo = 0, hi = e->u.swb.len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->u.swb.b[mid].start >= x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* µs from now until the bucket starting at b leaves the window
 * (bucket_leaves): the first bucket start s with s - W + P > b. */
static int64_t swb_leaves(const struct tier_state *ts, int64_t now, int64_t b)
{
    int64_t P = ts->t->precision_us;
    return idiv_ceil(b + ts->t->window_us - P + 1, P) * P - now;
}

static void swb_load(struct tier_state *ts, int64_t now)
{
    int64_t P = ts->t->precision_us;
    ts->cur = idiv(now, P) * P;
    ts->count = 0;
    ts->lo = ts->hi = 0;
    if (ts->e) {
        /* Live: starts in [cur - W + P, cur]; later buckets (a clock ahead)
         * are kept but not counted, earlier ones are stale. */
        ts->lo = swb_lower(ts->e, ts->cur - ts->t->window_us + P);
        ts->hi = swb_lower(ts->e, ts->cur + 1);
        for (size_t i = ts->lo; i < ts->hi; i++)
            ts->count += ts->e->u.swb.b[i].count;
    }
}

static int swb_allows(const struct tier_state *ts)
{
    return ts->count + ts->cost <= ts->t->limit;
}

static void swb_figures(const struct tier_state *ts, int64_t now, int consumed,
                        struct tier_result *r)
{
    int64_t count = ts->count, newest = 0;
    int has_newest = 0;
    if (ts->hi > ts->lo) {
        newest = ts->e->u.swb.b[ts->hi - 1].start;
        has_newest = 1;
    }
    if (consumed && ts->cost > 0) {
        count += ts->cost;
        newest = ts->cur;
        has_newest = 1;
    }
    r->reset_us = has_newest ? swb_leaves(ts, now, newest) : 0;
    r->remaining = max64(0, ts->t->limit - count);
}

static int64_t swb_retry(const struct tier_state *ts, int64_t now)
{
    int64_t left = ts->count;
    for (size_t i = ts->lo; i < ts->hi; i++) {
        left -= ts->e->u.swb.b[i].count;
        if (left + ts->cost <= ts->t->limit)
            return swb_leaves(ts, now, ts->e->u.swb.b[i].start);
    }
    return 0; /* not reached, as in the script */
}

static void swb_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    /* HINCRBY key cur cost */
    size_t pos = swb_lower(e, ts->cur);
    if (pos < e->u.swb.len && e->u.swb.b[pos].start == ts->cur) {
        e->u.swb.b[pos].count += ts->cost;
    } else {
        if (e->u.swb.len == e->u.swb.cap) {
            e->u.swb.cap = e->u.swb.cap ? 2 * e->u.swb.cap : 4;
            e->u.swb.b = xrealloc(e->u.swb.b, e->u.swb.cap * sizeof *e->u.swb.b);
        }
        memmove(e->u.swb.b + pos + 1, e->u.swb.b + pos, (e->u.swb.len - pos) * sizeof *e->u.swb.b);
        e->u.swb.b[pos] = (struct swb_bucket){ts->cur, ts->cost};
        e->u.swb.len++;
    }
    /* HDEL of the stale buckets, those before the window. */
    size_t stale = swb_lower(e, ts->cur - ts->t->window_us + ts->t->precision_us);
    if (stale > 0) {
        memmove(e->u.swb.b, e->u.swb.b + stale, (e->u.swb.len - stale) * sizeof *e->u.swb.b);
        e->u.swb.len -= stale;
    }
    if (e->u.swb.cap > 16 && e->u.swb.len * 4 <= e->u.swb.cap) {
        e->u.swb.cap /= 2;
        e->u.swb.b = xrealloc(e->u.swb.b, e->u.swb.cap * sizeof *e->u.swb.b);
    }
    local_store_expire_in(e, now, swb_leaves(ts, now, ts->cur));
}

/* sliding_window_buckets.report: commit. */
static void swb_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    swb_commit(ts, e, now);
}

const struct alg_ops sliding_window_buckets_ops = {
    .kind = KIND_BUCKETS,
    .load = swb_load,
    .allows = swb_allows,
    .figures = swb_figures,
    .retry = swb_retry,
    .commit = swb_commit,
    .report = swb_report,
};
