/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sliding_window_log.c: at most `limit` units in any window_us ending now,
 * exact: the time of every unit taken, run-length encoded (one run per
 * distinct µs, where the script's ZSET has one member per unit). The C twin
 * of lua/sliding_window_log.lua, step for step and with its names, for the
 * in-memory limiter (limiter_local.h); its row in the ops table is
 * sliding_window_log_ops.
 *
 * Owns: the runs (search, trim, add) and the steps.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include <string.h>

#include "lib/util.h"
#include "limiter/limiter_internal.h"

/* The first live run with score > x (the ZSET's "(x" bound), or len. */
static size_t log_first_after(const struct entry *e, int64_t x)
{
    size_t lo = e->u.log.head, hi = e->u.log.len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->u.log.runs[mid].score > x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Units in runs [i, len). */
static int64_t log_units_from(const struct entry *e, size_t i)
{
    const struct log_run *r = e->u.log.runs;
    size_t len = e->u.log.len;
    if (i >= len)
        return 0;
    return r[len - 1].before + r[len - 1].count - r[i].before;
}

/* The score of the k-th unit (1-based) counting from run i0. */
static int64_t log_kth(const struct entry *e, size_t i0, int64_t k)
{
    const struct log_run *r = e->u.log.runs;
    int64_t target = r[i0].before + k;
    size_t lo = i0, hi = e->u.log.len - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].before + r[mid].count >= target)
            hi = mid;
        else
            lo = mid + 1;
    }
    return r[lo].score;
}

/* ZREMRANGEBYSCORE key -inf x. */
static void log_trim(struct entry *e, int64_t x)
{
    size_t head = log_first_after(e, x), len = e->u.log.len;
    struct log_run *r = e->u.log.runs;
    if (head == len) {
        e->u.log.head = e->u.log.len = 0;
    } else if (head >= len - head) {
        /* As many dead runs as live ones: compact (amortised O(1)). */
        memmove(r, r + head, (len - head) * sizeof *r);
        len -= head;
        int64_t base = r[0].before;
        for (size_t i = 0; i < len; i++)
            r[i].before -= base;
        e->u.log.head = 0;
        e->u.log.len = len;
    } else {
        e->u.log.head = head;
    }
    if (e->u.log.cap > 16 && e->u.log.len * 4 <= e->u.log.cap) {
        e->u.log.cap /= 2;
        e->u.log.runs = xrealloc(e->u.log.runs, e->u.log.cap * sizeof *r);
    }
}

/* ZADD of `cost` members scored `score`. */
static void log_add(struct entry *e, int64_t score, int64_t cost)
{
    size_t head = e->u.log.head, len = e->u.log.len, pos;
    if (len > head && e->u.log.runs[len - 1].score == score) {
        e->u.log.runs[len - 1].count += cost;
        return;
    }
    if (len == e->u.log.cap) {
        e->u.log.cap = e->u.log.cap ? 2 * e->u.log.cap : 4;
        e->u.log.runs = xrealloc(e->u.log.runs, e->u.log.cap * sizeof *e->u.log.runs);
    }
    struct log_run *r = e->u.log.runs;
    if (len == head || r[len - 1].score < score) {
        int64_t before = len > head ? r[len - 1].before + r[len - 1].count : 0;
        r[len] = (struct log_run){score, cost, before};
        e->u.log.len = len + 1;
        return;
    }
    /* A score older than the newest: only after the clock went back. */
    for (pos = head; r[pos].score < score; pos++)
        ;
    if (r[pos].score != score) {
        memmove(r + pos + 1, r + pos, (len - pos) * sizeof *r);
        r[pos] = (struct log_run){score, 0, r[pos + 1].before};
        len++;
        e->u.log.len = len;
    }
    r[pos].count += cost;
    for (size_t i = pos + 1; i < len; i++)
        r[i].before += cost;
}

static void log_load(struct tier_state *ts, int64_t now)
{
    ts->count = 0;
    if (ts->e) {
        ts->lo = log_first_after(ts->e, now - ts->t->window_us);
        ts->count = log_units_from(ts->e, ts->lo);
    }
}

static int log_allows(const struct tier_state *ts)
{
    return ts->count + ts->cost <= ts->t->limit;
}

static void log_figures(const struct tier_state *ts, int64_t now, int consumed,
                        struct tier_result *r)
{
    int64_t count = ts->count, newest = 0;
    int has_newest = 0;
    if (count > 0) {
        newest = ts->e->u.log.runs[ts->e->u.log.len - 1].score;
        has_newest = 1;
    }
    if (consumed && ts->cost > 0) {
        count += ts->cost;
        newest = max64(has_newest ? newest : now, now);
        has_newest = 1;
    }
    r->reset_us = has_newest ? newest + ts->t->window_us - now : 0;
    r->remaining = max64(0, ts->t->limit - count);
}

int64_t sliding_window_log_retry_rank(const struct tier_state *ts)
{
    return ts->count + ts->cost - ts->t->limit;
}

static int64_t log_retry(const struct tier_state *ts, int64_t now)
{
    return log_kth(ts->e, ts->lo, sliding_window_log_retry_rank(ts)) + ts->t->window_us - now;
}

static void log_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    int64_t W = ts->t->window_us;
    log_trim(e, now - W);
    log_add(e, now, ts->cost);
    int64_t top = e->u.log.runs[e->u.log.len - 1].score;
    local_store_expire_in(e, now, max64(top, now) + W - now);
}

/* sliding_window_log.report: commit with at most `limit` members. */
static void log_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    ts->cost = min64(ts->cost, ts->t->limit);
    log_commit(ts, e, now);
}

const struct alg_ops sliding_window_log_ops = {
    .kind = KIND_LOG,
    .load = log_load,
    .allows = log_allows,
    .figures = log_figures,
    .retry = log_retry,
    .commit = log_commit,
    .report = log_report,
};
