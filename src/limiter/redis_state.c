/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_state.c: a tier's state as the string Redis holds, decoded into
 * the limiter's entry so that tier.c and the algorithm files decide on it
 * exactly as on the store's, and encoded back after commit. See
 * redis_state.h for the contract.
 *
 * Owns: the string grammar of each algorithm (as the scripts' patterns:
 * digits only, a sign only in the token bucket's tokens), the bounds that
 * keep a hostile stored value from reaching the arithmetic, and PX/PXAT.
 * Does not own: the arithmetic, Redis calls, the arguments.
 */
#include "limiter/redis_state.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "limiter/limiter_internal.h"

struct redis_tier {
    struct tier_state ts;
    /* the decoded entry: a struct entry whose key[] is empty (never in a
     * store), kept here in storage of its own alignment */
    alignas(struct entry) unsigned char entry[sizeof(struct entry)];
    /* sliding_window_buckets: the stale buckets' starts, which the write's
     * HDEL drops (malloc'd, as the entry's buckets) */
    int64_t *stale;
};

enum redis_layout redis_state_layout(const struct tier *t)
{
    if (t->algorithm == ALG_SLIDING_WINDOW_LOG)
        return REDIS_LAYOUT_LOG;
    if (t->algorithm == ALG_CONCURRENCY)
        return REDIS_LAYOUT_LEASES;
    return t->algorithm == ALG_SLIDING_WINDOW_BUCKETS ? REDIS_LAYOUT_HASH : REDIS_LAYOUT_STRING;
}

size_t redis_state_tier_size(void)
{
    return sizeof(struct redis_tier);
}

struct redis_tier *redis_state_tier_at(void *array, size_t i)
{
    return (struct redis_tier *)array + i;
}

/* Reads ":<digits>" (with a leading '-' if sign) at *p, below end, into
 * *v. A value past 2^53 in magnitude fails: the scripts' doubles are exact
 * only up to it, and no state the daemon writes comes near. */
static int field(const char **p, const char *end, int sign, int64_t *v)
{
    const char *s = *p;
    int neg = 0;
    if (s >= end || *s++ != ':')
        return -1;
    if (sign && s < end && *s == '-') {
        neg = 1;
        s++;
    }
    const char *digits = s;
    int64_t n = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        n = n * 10 + (*s++ - '0');
        if (n > EXACT_MAX)
            return -1;
    }
    if (s == digits)
        return -1;
    *v = neg ? -n : n;
    *p = s;
    return 0;
}

/* Reads "<letter>" then n fields, the first signed if sign, and nothing
 * after. */
static int fields(const char *val, size_t len, char letter, int sign, int n, int64_t *v)
{
    const char *p = val + 1, *end = val + len;
    if (len < 1 || val[0] != letter)
        return -1;
    for (int i = 0; i < n; i++)
        if (field(&p, end, sign && i == 0, &v[i]) < 0)
            return -1;
    return p == end ? 0 : -1;
}

/* Fills e from val as the kind's Redis string; 0, or -1 (as absent). A
 * scale of 0 (the w of "t:" and "g:") would divide by zero: absent. */
static int decode(struct entry *e, enum kind k, const char *val, size_t len)
{
    int64_t v[4];
    e->kind = k;
    switch (k) {
    case KIND_FIXED:
        if (fields(val, len, 'f', 0, 2, v) == 0) {
            e->u.fw.e = v[0], e->u.fw.n = v[1];
            return 0;
        }
        if (fields(val, len, 'w', 0, 3, v) == 0) {
            e->u.fw.s = v[0], e->u.fw.e = v[1], e->u.fw.n = v[2], e->u.fw.cal = 1;
            return 0;
        }
        return -1;
    case KIND_COUNTER:
        if (fields(val, len, 'c', 0, 3, v) < 0)
            return -1;
        e->u.swc.e = v[0], e->u.swc.c = v[1], e->u.swc.p = v[2];
        return 0;
    case KIND_TOKEN:
        if (fields(val, len, 't', 1, 3, v) < 0 || v[2] == 0)
            return -1;
        e->u.tb.s = v[0], e->u.tb.t = v[1], e->u.tb.w = v[2];
        return 0;
    case KIND_GCRA:
        if (fields(val, len, 'g', 0, 3, v) < 0 || v[2] == 0)
            return -1;
        e->u.gc.d = v[0], e->u.gc.t = v[1], e->u.gc.w = v[2];
        return 0;
    default:
        return -1;
    }
}

void redis_state_release(struct redis_tier *x)
{
    struct entry *e = (struct entry *)x->entry;
    if (e->kind == KIND_BUCKETS)
        free(e->u.swb.b);
    if (e->kind == KIND_LOG)
        free(e->u.log.runs);
    if (e->kind == KIND_LEASES)
        free(e->u.ls.l);
    free(x->stale);
    memset(x, 0, sizeof *x);
}

/* Readies x for tier t (bounds: a calendar tier's, or NULL) and cost. */
static void begin(struct redis_tier *x, const struct tier *t, const int64_t *bounds, int64_t cost)
{
    redis_state_release(x);
    x->ts.t = t;
    x->ts.ops = tier_ops(t);
    x->ts.cost = cost;
    x->ts.capacity = policy_tier_capacity(t);
    x->ts.bounds = bounds;
}

int redis_state_read(struct redis_tier *x, const struct tier *t, const int64_t *bounds,
                     int64_t cost, const char *val, size_t len, int64_t now)
{
    struct entry *e = (struct entry *)x->entry;
    int64_t s, end;
    if (bounds && calendar_window_pick(bounds, now, &s, &end) < 0)
        return -1;
    begin(x, t, bounds, cost);
    x->ts.e = val && decode(e, x->ts.ops->kind, val, len) == 0 ? e : NULL;
    tier_decide(&x->ts, now);
    return x->ts.allowed;
}

/* s[0..len) as a decimal integer written as Redis and the scripts write
 * one (no leading zero, '-' only if sign), |v| <= 2^53; 0, or -1. */
static int canonical(const char *s, size_t len, int sign, int64_t *v)
{
    size_t i = sign && len > 1 && s[0] == '-';
    int64_t n = 0;
    if (i == len || (s[i] == '0' && (len - i > 1 || i > 0)))
        return -1;
    for (size_t j = i; j < len; j++) {
        if (s[j] < '0' || s[j] > '9')
            return -1;
        n = n * 10 + (s[j] - '0');
        if (n > EXACT_MAX)
            return -1;
    }
    *v = i ? -n : n;
    return 0;
}

int redis_state_integer(const char *s, size_t len, int64_t *v)
{
    return canonical(s, len, 1, v);
}

/* e's runs as the log's steps see the set: n units in the window, the
 * newest scored `newest`, and if k > 0 the first k of them at or before
 * kth (the k-th, which retry reads): at most two runs, in score order
 * (the second may hold none, if the set grew after the count was read),
 * which sliding_window_log.c reads as it reads a store's. */
static void log_runs(struct entry *e, int64_t n, int64_t newest, int64_t k, int64_t kth)
{
    struct log_run *r = e->u.log.runs;
    size_t len = 0;
    if (n > 0 && k > 0 && kth < newest)
        r[len++] = (struct log_run){kth, k, 0};
    int64_t before = len ? k : 0; /* the units of the run before it */
    if (n > 0)
        r[len++] = (struct log_run){newest, n - before, before};
    e->u.log.head = 0;
    e->u.log.len = len;
}

/* Reads the newest score (if the count read is not 0) and, if x is
 * denied for a cost it could take, the one retry waits for, into x's
 * runs. */
static int log_scores(struct redis_tier *x, const struct redis_zset_reader *r, int64_t now)
{
    struct entry *e = (struct entry *)x->entry;
    int64_t from = now - x->ts.t->window_us, n = x->ts.count, newest = 0, k = 0, kth = 0;
    if (n > 0 && r->newest(r->ctx, from, &newest) < 0)
        return -1;
    if (!x->ts.allowed && !x->ts.exceeds) {
        k = sliding_window_log_retry_rank(&x->ts);
        if (r->score(r->ctx, from, k - 1, &kth) < 0)
            return -1;
    }
    log_runs(e, n, newest, k, kth);
    return 0;
}

int redis_state_read_log(struct redis_tier *x, const struct tier *t, int64_t cost,
                         const struct redis_zset_reader *r, int64_t now)
{
    struct entry *e = (struct entry *)x->entry;
    int64_t n;
    begin(x, t, NULL, cost);
    if (r->count(r->ctx, now - t->window_us, &n) < 0)
        return -1;
    e->kind = KIND_LOG;
    /* room for commit's one more run */
    e->u.log.cap = 3;
    e->u.log.runs = xcalloc(e->u.log.cap, sizeof *e->u.log.runs);
    /* the count alone decides (load reads it from the runs) */
    log_runs(e, n, now, 0, 0);
    x->ts.e = e;
    tier_decide(&x->ts, now);
    return log_scores(x, r, now) < 0 ? -1 : x->ts.allowed;
}

int redis_state_reread_log(struct redis_tier *x, const struct redis_zset_reader *r, int64_t now)
{
    return log_scores(x, r, now);
}

/* A lease member's units, "<digits>:..." as the script's '^(%d+):' reads
 * them: 1 and *units, 0 if it holds none (no match), -1 past 2^53. */
static int lease_units(const char *m, size_t len, int64_t *units)
{
    size_t i = 0;
    int64_t u = 0;
    for (; i < len && m[i] >= '0' && m[i] <= '9'; i++) {
        u = u * 10 + (m[i] - '0');
        if (u > EXACT_MAX)
            return -1;
    }
    if (i == 0 || i == len || m[i] != ':')
        return 0;
    *units = u;
    return 1;
}

int redis_state_read_leases(struct redis_tier *x, const struct tier *t, int64_t cost,
                            const char *nonce, const struct redis_field *f, size_t n, int64_t now)
{
    struct entry *e = (struct entry *)x->entry;
    int64_t held = 0;
    begin(x, t, NULL, cost);
    x->ts.nonce = nonce;
    e->kind = KIND_LEASES;
    /* room for commit's new lease */
    e->u.ls.cap = n + 1;
    e->u.ls.l = xcalloc(e->u.ls.cap, sizeof *e->u.ls.l);
    for (size_t i = 0; i < n; i++) {
        struct lease *l = &e->u.ls.l[e->u.ls.len];
        int got = lease_units(f[i].name, f[i].name_len, &l->units);
        if (got < 0 || canonical(f[i].value, f[i].value_len, 1, &l->expires) < 0)
            return -1;
        held += got ? l->units : 0;
        if (held > EXACT_MAX)
            return -1;
        e->u.ls.len += (size_t)got;
    }
    x->ts.e = e;
    tier_decide(&x->ts, now);
    return x->ts.allowed;
}

int redis_state_can_commit(const struct redis_tier *x)
{
    return x->ts.ops->kind != KIND_LEASES || x->ts.nonce != NULL;
}

int redis_state_lease_op(const char *score, size_t len, int renew, int64_t timeout, int64_t now,
                         int64_t *status, int64_t *expires, int64_t *px_ms)
{
    /* tonumber(s) <= now, in the script's doubles: any score Redis
     * writes (%.17g) reads back as the double it holds. */
    char buf[64];
    double s = 0;
    if (score) {
        size_t n = len < sizeof buf - 1 ? len : sizeof buf - 1;
        memcpy(buf, score, n);
        buf[n] = '\0';
        s = strtod(buf, NULL);
    }
    /* found with an expiry after now: a lease to act on (the decision
     * reads only which side of now it is) */
    int64_t after = s > (double)now ? now + 1 : now;
    struct lease_outcome o =
        concurrency_lease_decide(score != NULL, after, renew, timeout, now, px_ms);
    *status = o.status;
    *expires = o.expires_us;
    if (o.status != LEASE_DONE)
        return 0;
    return renew ? 2 : 1;
}

/* The tier states of the n tiers of xs, for tier.c's loops over them
 * (xcalloc'd: the caller frees). */
static struct tier_state **states_of(void *xs, size_t n)
{
    struct tier_state **ts = xcalloc(n ? n : 1, sizeof *ts);
    for (size_t i = 0; i < n; i++)
        ts[i] = &redis_state_tier_at(xs, i)->ts;
    return ts;
}

int64_t redis_state_take_block(void *xs, size_t n, int64_t want, int64_t now, int64_t *until_us)
{
    struct tier_state **ts = states_of(xs, n);
    int64_t granted = tier_take_block(ts, n, want, now, until_us);
    free(ts);
    return granted;
}

int redis_state_lease_same(void *xs, size_t n, int64_t taken)
{
    struct tier_state **ts = states_of(xs, n);
    int same = tier_lease_same(ts, n, taken);
    free(ts);
    return same;
}

static int by_start(const void *a, const void *b)
{
    int64_t x = ((const struct swb_bucket *)a)->start, y = ((const struct swb_bucket *)b)->start;
    return (x > y) - (x < y);
}

int redis_state_read_hash(struct redis_tier *x, const struct tier *t, int64_t cost,
                          const struct redis_field *f, size_t n, int64_t now)
{
    struct entry *e = (struct entry *)x->entry;
    begin(x, t, NULL, cost);
    if (n > 0) {
        e->kind = KIND_BUCKETS;
        e->u.swb.b = xcalloc(n, sizeof *e->u.swb.b);
        e->u.swb.len = e->u.swb.cap = n;
        for (size_t i = 0; i < n; i++) {
            struct swb_bucket *b = &e->u.swb.b[i];
            if (canonical(f[i].name, f[i].name_len, 0, &b->start) < 0 ||
                canonical(f[i].value, f[i].value_len, 1, &b->count) < 0)
                return -1;
        }
        qsort(e->u.swb.b, n, sizeof *e->u.swb.b, by_start);
        x->ts.e = e;
    }
    tier_decide(&x->ts, now);
    return x->ts.allowed;
}

void redis_state_figures(const struct redis_tier *x, int64_t now, int consumed,
                         int64_t out[REDIS_STATE_FIGURES])
{
    struct tier_result r;
    tier_figures(&x->ts, now, consumed, &r);
    out[0] = r.allowed;
    out[1] = r.limit;
    out[2] = r.remaining;
    out[3] = r.reset_us;
    out[4] = r.retry_us;
    out[5] = r.delay_us;
    out[6] = r.cost_exceeds_limit;
}

/* "<letter>:<v[0]>:...:<v[n-1]>" into buf (1 + 3 * (1 + UTIL_INT_CHARS)
 * bytes at most: REDIS_STATE_BUF holds it), formatted by hand: snprintf
 * was a twentieth of the module's Redis CPU per check. */
static size_t put_state(char *buf, char letter, int n, const int64_t *v)
{
    size_t len = 0;
    buf[len++] = letter;
    for (int i = 0; i < n; i++) {
        buf[len++] = ':';
        len += util_format_int(buf + len, (long long)v[i]);
    }
    return len;
}

/* The state string of e (a kind this file decodes). */
static size_t encode(const struct entry *e, char *buf)
{
    switch (e->kind) {
    case KIND_FIXED:
        if (e->u.fw.cal)
            return put_state(buf, 'w', 3, (const int64_t[]){e->u.fw.s, e->u.fw.e, e->u.fw.n});
        return put_state(buf, 'f', 2, (const int64_t[]){e->u.fw.e, e->u.fw.n});
    case KIND_COUNTER:
        return put_state(buf, 'c', 3, (const int64_t[]){e->u.swc.e, e->u.swc.c, e->u.swc.p});
    case KIND_TOKEN:
        return put_state(buf, 't', 3, (const int64_t[]){e->u.tb.s, e->u.tb.t, e->u.tb.w});
    default: /* KIND_GCRA */
        return put_state(buf, 'g', 3, (const int64_t[]){e->u.gc.d, e->u.gc.t, e->u.gc.w});
    }
}

/* The new state of x, written by the algorithm's commit (report 0) or
 * report (1), as the Redis commands of w. */
static void write_state(struct redis_tier *x, int report, int64_t now, int server_clock,
                        struct redis_write *w)
{
    struct entry *e = (struct entry *)x->entry;
    memset(w, 0, sizeof *w);
    if (x->ts.ops->kind == KIND_BUCKETS) {
        /* HINCRBY of the current bucket, HDEL of the stale ones (the
         * buckets before the window, sorted: a prefix), PEXPIRE: the
         * script's commands; the entry, as the store's, gives the expiry. */
        if (!x->ts.e) {
            memset(e, 0, sizeof *e);
            e->kind = KIND_BUCKETS;
        }
        int64_t oldest = x->ts.cur - x->ts.t->window_us + x->ts.t->precision_us;
        while (w->ndel < e->u.swb.len && e->u.swb.b[w->ndel].start < oldest)
            w->ndel++;
        free(x->stale);
        x->stale = xcalloc(w->ndel + 1, sizeof *x->stale);
        for (size_t i = 0; i < w->ndel; i++)
            x->stale[i] = e->u.swb.b[i].start;
        w->del = x->stale;
        w->field = x->ts.cur;
    } else if (x->ts.ops->kind == KIND_LEASES) {
        /* The leases read stay: commit's expiry runs from the latest. */
        w->field = now - x->ts.t->lease_timeout_us;
        w->score = now + x->ts.t->lease_timeout_us;
        w->nonce = x->ts.nonce;
    } else if (x->ts.ops->kind == KIND_LOG) {
        /* The runs read stay: commit adds to them, and the newest (a
         * daemon's clock ahead of ours may have written one after now)
         * sets the expiry, as the script's t.newest. */
        w->field = now - x->ts.t->window_us;
        w->score = now;
    } else {
        /* A fresh entry for the SET, as the store's get_or_create after
         * become: commit and report write every field its string carries. */
        memset(e, 0, sizeof *e);
        e->kind = x->ts.ops->kind;
    }
    if (report)
        x->ts.ops->report(&x->ts, e, now);
    else
        x->ts.ops->commit(&x->ts, e, now);
    w->by = x->ts.cost;
    if (server_clock && e->expires_from_end > 0) {
        w->ex.at = 1;
        w->ex.ms = idiv_ceil(e->expires_from_end, 1000) + EXPIRY_SLACK_MS;
    } else {
        w->ex.at = 0;
        w->ex.ms = (e->expires_at - now) / 1000;
    }
    if (x->ts.ops->kind != KIND_BUCKETS && x->ts.ops->kind != KIND_LOG &&
        x->ts.ops->kind != KIND_LEASES)
        w->len = encode(e, w->buf);
}

void redis_state_commit(struct redis_tier *x, int64_t now, int server_clock, struct redis_write *w)
{
    write_state(x, 0, now, server_clock, w);
}

void redis_state_report(struct redis_tier *x, int64_t cost, int64_t now, int server_clock,
                        struct redis_write *w)
{
    x->ts.cost = cost;
    write_state(x, 1, now, server_clock, w);
}
