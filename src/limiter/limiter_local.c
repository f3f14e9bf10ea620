/* SPDX-License-Identifier: Apache-2.0 */
/*
 * limiter_local.c: the seven algorithms in memory, a line-for-line mirror of
 * the Lua script (lua/check.lua drives, lua/<algorithm>.lua decide), for
 * `backend: memory` and `failure_mode: local`. See limiter_local.h for the
 * contract.
 *
 * Owns: the store (its entries, indexed by an lru_table: a chained hash
 * table keyed with SipHash and an LRU list; lazy and incremental expiry)
 * and the in-memory form of each algorithm's Redis state. Does not own: key
 * encoding (policy.c), the request (decision.h), clocks.
 *
 * Each algorithm has the script's steps, with the same names, in one row of
 * ops_table (the script's ALGORITHMS table): load (reads only, into a
 * struct tier_state like the script's `t`), allows, figures, retry, delay
 * (leaky_bucket only), commit. load keeps a pointer to the entry for
 * figures and retry, which (like the script's) read the stored state
 * between the passes; commit looks its key up again, because writing a new
 * key may evict another, and writes absolute values computed from the
 * tier_state, as the script's SET/HINCRBY do. Nothing else in this file
 * depends on which algorithm a tier uses.
 *
 * Arithmetic: int64, exact, in the same integers as the script. Products
 * that validated tiers keep below 2^53 are plain int64; the few that state
 * left over from another configuration (a reload) or a clock that went
 * backwards could push past int64 are done in __int128, where the script
 * (in doubles) would merely lose exactness.
 */
#include "limiter/limiter_local.h"

#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "lib/lru_table.h"
#include "lib/util.h"

#include <stdio.h>

__extension__ typedef __int128 i128;

#define EXPIRY_SLACK_MS 1000  /* EXPIRY_SLACK_MS in lua/common.lua */
#define EXACT_MAX (1LL << 53) /* EXACT_MAX in lua/common.lua */
#define SWEEP_SLOTS 4         /* hash slots checked for expired entries per call */
#define TAIL_CHECKS 2         /* LRU tail entries checked for expiry per call */

/* ------------------------------------------------------------ arithmetic */

/* floor(a / b) and ceil(a / b) for b > 0 (idiv and idiv_ceil in common.lua),
 * in 128 bits where a product may pass 64. */
static i128 idiv128(i128 a, i128 b)
{
    i128 q = a / b;
    if (a % b < 0)
        q--;
    return q;
}

static i128 idiv_ceil128(i128 a, i128 b)
{
    i128 q = a / b;
    if (a % b > 0)
        q++;
    return q;
}

static int64_t idiv(int64_t a, int64_t b)
{
    return (int64_t)idiv128(a, b);
}

static int64_t idiv_ceil(int64_t a, int64_t b)
{
    return (int64_t)idiv_ceil128(a, b);
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* ----------------------------------------------------------------- store */

struct alg_ops;

enum kind {
    KIND_NONE, /* created, not yet written */
    KIND_FIXED,
    KIND_COUNTER,
    KIND_TOKEN,
    KIND_GCRA, /* gcra and leaky_bucket */
    KIND_LOG,
    KIND_BUCKETS,
    KIND_LEASES,
};

/* concurrency: one lease, the member "<units>:<nonce>" scored `expires`. */
struct lease {
    int64_t expires; /* µs; holds its units while now < expires */
    int64_t units;
    char nonce[LEASE_NONCE_LEN + 1];
};

/* sliding_window_log: `count` units taken at `score`; `before` is the
 * number of units in the runs before this one, from an arbitrary base, so
 * that any range's units are a difference (rebased when compacted). */
struct log_run {
    int64_t score;
    int64_t count;
    int64_t before;
};

struct swb_bucket {
    int64_t start; /* µs */
    int64_t count;
};

struct entry {
    struct lru_node node; /* first: a node pointer is the entry's */
    int64_t expires_at;   /* µs; alive while now_us <= expires_at */
    enum kind kind;
    union {
        struct {
            int64_t e, n; /* n units in the window ending at e */
            int64_t s;    /* calendar windows ("w:s:e:n"): where it starts */
            int cal;      /* 1: a calendar window's count ("w:"), 0: "f:" */
        } fw;
        struct {
            int64_t e, c, p; /* c in the window ending at e, p in the one before */
        } swc;
        struct {
            int64_t s, t, w; /* s / w tokens at time t */
        } tb;
        struct {
            int64_t d, t, w; /* d / w tokens short of full at time t */
        } gc;
        struct {
            struct log_run *runs; /* live runs are [head, len), by score */
            size_t head, len, cap;
        } log;
        struct {
            struct swb_bucket *b; /* by idx */
            size_t len, cap;
        } swb;
        struct {
            struct lease *l; /* in no order; expired ones are tombstones */
            size_t len, cap;
        } ls;
    } u;
    size_t keylen;
    char key[]; /* NUL-terminated */
};

/* One tier of the request being decided: the script's `t`. */
struct tier_state {
    const struct tier *t;
    const struct alg_ops *ops;
    int64_t cost, capacity;
    struct entry *e; /* as loaded in pass 1 (NULL: absent); valid until pass 2 */
    int allowed, exceeds;
    /* fixed_window, sliding_window_counter, sliding_window_buckets (cur:
     * the current bucket's start) */
    int64_t n, window_end, start, cur, prev, elapsed;
    /* sliding_window_log: count, first in-window run; buckets: live range */
    int64_t count;
    size_t lo, hi;
    /* token_bucket */
    int64_t s, last, full;
    /* gcra, leaky_bucket */
    i128 d;
    /* concurrency: units held, the latest live expiry (0: none), the nonce */
    int64_t held, latest;
    const char *nonce;
};

struct local_store {
    size_t max_keys;
    struct lru_table t;
    size_t sweep; /* next slot the incremental sweep looks at */
    struct tier_state *scratch;
    size_t scratch_cap;
};

static uint64_t siphash(const struct local_store *s, const char *key, size_t len)
{
    return lru_table_hash(&s->t, key, len);
}

struct local_store *local_store_new(size_t max_keys, uint64_t hash_seed)
{
    struct local_store *s = xcalloc(1, sizeof *s);
    s->max_keys = max_keys ? max_keys : 1;
    lru_table_init(&s->t, s->max_keys, hash_seed);
    return s;
}

/* Drops whatever state the entry holds; it becomes KIND_NONE. */
static void entry_clear(struct entry *e)
{
    if (e->kind == KIND_LOG)
        free(e->u.log.runs);
    else if (e->kind == KIND_BUCKETS)
        free(e->u.swb.b);
    else if (e->kind == KIND_LEASES)
        free(e->u.ls.l);
    memset(&e->u, 0, sizeof e->u);
    e->kind = KIND_NONE;
}

void local_store_free(struct local_store *s)
{
    if (!s)
        return;
    struct lru_node *n = s->t.newest;
    while (n) {
        struct lru_node *next = n->older;
        entry_clear((struct entry *)n);
        free(n);
        n = next;
    }
    lru_table_destroy(&s->t);
    free(s->scratch);
    free(s);
}

size_t local_store_size(const struct local_store *s)
{
    return s->t.count;
}

static int expired(const struct entry *e, int64_t now)
{
    return now > e->expires_at;
}

static struct entry *find(const struct local_store *s, const char *key, size_t len, uint64_t h)
{
    for (struct lru_node *n = lru_table_chain(&s->t, h); n; n = n->chain) {
        struct entry *e = (struct entry *)n;
        if (n->hash == h && e->keylen == len && memcmp(e->key, key, len) == 0)
            return e;
    }
    return NULL;
}

static void entry_free(struct local_store *s, struct entry *e)
{
    lru_table_remove(&s->t, &e->node);
    entry_clear(e);
    free(e);
}

/* The live entry under key (a use: moves it to the LRU head), or NULL. An
 * expired one is freed and reported absent. */
static struct entry *lookup(struct local_store *s, const char *key, size_t len, int64_t now)
{
    struct entry *e = find(s, key, len, siphash(s, key, len));
    if (!e)
        return NULL;
    if (expired(e, now)) {
        entry_free(s, e);
        return NULL;
    }
    lru_table_touch(&s->t, &e->node);
    return e;
}

/* The live entry under key, created empty (KIND_NONE) if absent; a full
 * store first evicts its least recently used entry. */
static struct entry *get_or_create(struct local_store *s, const char *key, size_t len, int64_t now)
{
    struct entry *e = lookup(s, key, len, now);
    if (e)
        return e;
    if (s->t.count >= s->max_keys)
        entry_free(s, (struct entry *)s->t.oldest);
    e = xcalloc(1, sizeof *e + len + 1);
    e->keylen = len;
    memcpy(e->key, key, len);
    e->kind = KIND_NONE;
    e->expires_at = now;
    lru_table_insert(&s->t, &e->node, siphash(s, key, len));
    return e;
}

/* Makes e hold state of kind k, dropping state of another kind. */
static void entry_become(struct entry *e, enum kind k)
{
    if (e->kind != k) {
        entry_clear(e);
        e->kind = k;
    }
}

/* expire_in/px_in in common.lua: `us` more µs, rounded up to the ms, plus
 * the slack. */
static void expire_in(struct entry *e, int64_t now, int64_t us)
{
    e->expires_at = now + (idiv_ceil(us, 1000) + EXPIRY_SLACK_MS) * 1000;
}

/* A few expired entries per call: the next SWEEP_SLOTS slots of the table,
 * then the LRU tail. Memory is bounded by max_keys regardless; this only
 * gives memory back sooner. */
static void reclaim(struct local_store *s, int64_t now)
{
    for (int i = 0; i < SWEEP_SLOTS; i++) {
        size_t slot = s->sweep++ & (s->t.nslots - 1);
        struct lru_node *n = s->t.slots[slot];
        while (n) {
            struct lru_node *next = n->chain;
            if (expired((struct entry *)n, now))
                entry_free(s, (struct entry *)n);
            n = next;
        }
    }
    for (int i = 0; i < TAIL_CHECKS && s->t.oldest && expired((struct entry *)s->t.oldest, now);
         i++)
        entry_free(s, (struct entry *)s->t.oldest);
}

int64_t local_store_expiry(const struct local_store *s, const char *key, size_t keylen,
                           int64_t now_us)
{
    const struct entry *e = find(s, key, keylen, siphash(s, key, keylen));
    if (!e || e->kind == KIND_NONE || expired(e, now_us))
        return -1;
    return e->expires_at;
}

/* ---------------------------------------------------------- fixed_window */

static void fw_load(struct tier_state *ts, int64_t now)
{
    int cal = ts->t->calendar.unit != CALENDAR_NONE;
    ts->n = 0;
    if (cal) {
        /* calendar_window.lua: both ends must match. */
        calendar_window(&ts->t->calendar, now, &ts->start, &ts->window_end);
        if (ts->e && ts->e->u.fw.cal && ts->e->u.fw.s == ts->start &&
            ts->e->u.fw.e == ts->window_end)
            ts->n = ts->e->u.fw.n;
        return;
    }
    int64_t W = ts->t->window_us;
    ts->window_end = (idiv(now, W) + 1) * W;
    /* The count is the current window's only if it ends where ours does. */
    if (ts->e && !ts->e->u.fw.cal && ts->e->u.fw.e == ts->window_end)
        ts->n = ts->e->u.fw.n;
}

static int fw_allows(const struct tier_state *ts)
{
    return ts->n + ts->cost <= ts->t->limit;
}

static void fw_figures(const struct tier_state *ts, int64_t now, int consumed,
                       struct tier_result *r)
{
    int64_t n = ts->n + (consumed ? ts->cost : 0);
    /* A limit of 0 (requests_per_unit: 0) is always full: it resets when
     * the window ends, as fixed_window.lua says. */
    r->reset_us = n > 0 || ts->t->limit == 0 ? ts->window_end - now : 0;
    r->remaining = max64(0, ts->t->limit - n);
}

static int64_t fw_retry(const struct tier_state *ts, int64_t now)
{
    return ts->window_end - now;
}

static void fw_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    e->u.fw.e = ts->window_end;
    e->u.fw.n = ts->n + ts->cost;
    e->u.fw.cal = ts->t->calendar.unit != CALENDAR_NONE;
    e->u.fw.s = e->u.fw.cal ? ts->start : 0;
    expire_in(e, now, ts->window_end - now);
}

/* fixed_window.report: n += cost (past the limit if so), never below 0. */
static void fw_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    e->u.fw.e = ts->window_end;
    e->u.fw.n = min64(max64(0, ts->n + ts->cost), EXACT_MAX);
    e->u.fw.cal = ts->t->calendar.unit != CALENDAR_NONE;
    e->u.fw.s = e->u.fw.cal ? ts->start : 0;
    expire_in(e, now, ts->window_end - now);
}

/* ---------------------------------------------------- sliding_window_log */

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

static int64_t log_retry(const struct tier_state *ts, int64_t now)
{
    int64_t k = ts->count + ts->cost - ts->t->limit;
    return log_kth(ts->e, ts->lo, k) + ts->t->window_us - now;
}

static void log_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    int64_t W = ts->t->window_us;
    log_trim(e, now - W);
    log_add(e, now, ts->cost);
    int64_t top = e->u.log.runs[e->u.log.len - 1].score;
    expire_in(e, now, max64(top, now) + W - now);
}

/* sliding_window_log.report: commit with at most `limit` members. */
static void log_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    ts->cost = min64(ts->cost, ts->t->limit);
    log_commit(ts, e, now);
}

/* ------------------------------------------------ sliding_window_counter */

static void swc_load(struct tier_state *ts, int64_t now)
{
    int64_t W = ts->t->window_us;
    ts->start = idiv(now, W) * W;
    ts->cur = ts->prev = 0;
    if (ts->e && ts->e->u.swc.e == ts->start + W) {
        ts->cur = ts->e->u.swc.c;
        ts->prev = ts->e->u.swc.p;
    } else if (ts->e && ts->e->u.swc.e == ts->start) {
        ts->prev = ts->e->u.swc.c;
    }
    ts->elapsed = now - ts->start;
}

static int swc_allows(const struct tier_state *ts)
{
    int64_t W = ts->t->window_us;
    int64_t room = ts->t->limit - ts->cur - ts->cost;
    return room >= 0 && (i128)ts->prev * (W - ts->elapsed) <= (i128)room * W;
}

static void swc_figures(const struct tier_state *ts, int64_t now, int consumed,
                        struct tier_result *r)
{
    int64_t W = ts->t->window_us;
    int64_t cur = ts->cur + (consumed ? ts->cost : 0);
    int64_t room = ts->t->limit - cur;
    r->remaining = 0;
    if (room > 0) {
        i128 v = idiv128((i128)room * W - (i128)ts->prev * (W - ts->elapsed), W);
        r->remaining = v > 0 ? (int64_t)v : 0;
    }
    r->reset_us = 0;
    if (cur > 0)
        r->reset_us = ts->start + 2 * W - now;
    else if (ts->prev > 0)
        r->reset_us = ts->start + W - now;
}

static int64_t swc_retry(const struct tier_state *ts, int64_t now)
{
    int64_t W = ts->t->window_us;
    int64_t room = ts->t->limit - ts->cur - ts->cost;
    if (room >= 0 && ts->prev > 0)
        return ts->start + (W - (int64_t)idiv128((i128)room * W, ts->prev)) - now;
    if (ts->cur == 0)
        return ts->start + W - now;
    return ts->start + W + (W - (int64_t)idiv128((i128)(ts->t->limit - ts->cost) * W, ts->cur)) -
           now;
}

static void swc_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    int64_t W = ts->t->window_us;
    e->u.swc.e = ts->start + W;
    e->u.swc.c = ts->cur + ts->cost;
    e->u.swc.p = ts->prev;
    expire_in(e, now, ts->start + 2 * W - now);
}

/* sliding_window_counter.report: commit, the count saturating at
 * floor(2^53 / W). */
static void swc_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    ts->cost = max64(0, min64(ts->cost, EXACT_MAX / ts->t->window_us - ts->cur));
    swc_commit(ts, e, now);
}

/* ------------------------------------------------ sliding_window_buckets */

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
    expire_in(e, now, swb_leaves(ts, now, ts->cur));
}

/* ---------------------------------------------------------- token_bucket */

static void tb_load(struct tier_state *ts, int64_t now)
{
    int64_t limit = ts->t->limit, W = ts->t->window_us;
    ts->full = ts->capacity * W;
    ts->s = ts->full;
    ts->last = now;
    if (!ts->e)
        return;
    int64_t s = ts->e->u.tb.s, last = ts->e->u.tb.t;
    /* Scaled by another window (a reload): whole tokens, at most C. */
    if (ts->e->u.tb.w != W)
        s = (int64_t)((i128)max64(0, min64(idiv(s, ts->e->u.tb.w), ts->capacity)) * W);
    int64_t elapsed = max64(0, now - last);
    if (elapsed >= idiv_ceil(ts->full - s, limit))
        s = ts->full;
    else
        s = s + elapsed * limit; /* < full - s: no overflow */
    ts->s = s;
    ts->last = max64(last, now);
}

static int tb_allows(const struct tier_state *ts)
{
    return ts->s >= ts->cost * ts->t->window_us;
}

static void tb_figures(const struct tier_state *ts, int64_t now, int consumed,
                       struct tier_result *r)
{
    int64_t s = ts->s - (consumed ? ts->cost * ts->t->window_us : 0);
    r->reset_us = 0;
    if (s < ts->full)
        r->reset_us = (ts->last - now) + idiv_ceil(ts->full - s, ts->t->limit);
    r->remaining = max64(0, idiv(s, ts->t->window_us));
}

static int64_t tb_retry(const struct tier_state *ts, int64_t now)
{
    return (ts->last - now) + idiv_ceil(ts->cost * ts->t->window_us - ts->s, ts->t->limit);
}

/* token_bucket_write: S = s as of ts->last; expires when full again. */
static void tb_write(const struct tier_state *ts, struct entry *e, int64_t now, int64_t s)
{
    e->u.tb.s = s;
    e->u.tb.t = ts->last;
    e->u.tb.w = ts->t->window_us;
    expire_in(e, now, (ts->last - now) + idiv_ceil(ts->full - s, ts->t->limit));
}

static void tb_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    tb_write(ts, e, now, ts->s - ts->cost * ts->t->window_us);
}

/* token_bucket.report: S -= cost * W, at most full, at least full - 2^53. */
static void tb_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    i128 s = (i128)ts->s - (i128)ts->cost * ts->t->window_us;
    if (s > ts->full)
        s = ts->full;
    if (s < (i128)ts->full - EXACT_MAX)
        s = (i128)ts->full - EXACT_MAX;
    tb_write(ts, e, now, (int64_t)s);
}

/* ------------------------------------------------- gcra and leaky_bucket */

/* gcra_read: how empty the bucket is, in scaled units, as of now. */
static void gcra_load(struct tier_state *ts, int64_t now)
{
    int64_t limit = ts->t->limit, W = ts->t->window_us;
    ts->full = ts->capacity * W;
    ts->d = 0;
    if (!ts->e)
        return;
    i128 d = ts->e->u.gc.d;
    /* Scaled by another window (a reload): whole tokens short, at most C. */
    if (ts->e->u.gc.w != W)
        d = (i128)min64((int64_t)idiv_ceil128(d, ts->e->u.gc.w), ts->capacity) * W;
    int64_t elapsed = now - ts->e->u.gc.t;
    if (elapsed <= 0)
        ts->d = d - (i128)elapsed * limit; /* a clock behind the writer's */
    else if (elapsed >= idiv_ceil128(d, limit))
        ts->d = 0;
    else
        ts->d = d - (i128)elapsed * limit;
}

static int gcra_allows(const struct tier_state *ts)
{
    return ts->d + (i128)ts->cost * ts->t->window_us <= ts->full;
}

static void gcra_figures(const struct tier_state *ts, int64_t now, int consumed,
                         struct tier_result *r)
{
    (void)now;
    i128 d = ts->d + (consumed ? (i128)ts->cost * ts->t->window_us : 0);
    i128 rem = idiv128((i128)ts->full - d, ts->t->window_us);
    r->remaining = rem > 0 ? (int64_t)rem : 0;
    r->reset_us = (int64_t)idiv_ceil128(d, ts->t->limit);
}

static int64_t gcra_retry(const struct tier_state *ts, int64_t now)
{
    (void)now;
    return (int64_t)idiv_ceil128(ts->d + (i128)ts->cost * ts->t->window_us - ts->full,
                                 ts->t->limit);
}

static int64_t leaky_delay(const struct tier_state *ts)
{
    return (int64_t)idiv_ceil128(ts->d + (i128)(ts->cost - 1) * ts->t->window_us, ts->t->limit);
}

/* gcra_write: d as of now, scaled by this window; expires when TAT passes. */
static void gcra_write(const struct tier_state *ts, struct entry *e, int64_t now, i128 d)
{
    e->u.gc.d = (int64_t)d;
    e->u.gc.t = now;
    e->u.gc.w = ts->t->window_us;
    expire_in(e, now, (int64_t)idiv_ceil128(d, ts->t->limit));
}

static void gcra_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    gcra_write(ts, e, now, ts->d + (i128)ts->cost * ts->t->window_us);
}

/* gcra.report (and leaky_bucket's): d += cost * W, in [0, 2^53]. */
static void gcra_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    i128 d = ts->d + (i128)ts->cost * ts->t->window_us;
    gcra_write(ts, e, now, d < 0 ? 0 : d > EXACT_MAX ? EXACT_MAX : d);
}

/* ----------------------------------------------------------- concurrency */

/* lua/concurrency.lua: the window is the lease timeout; a lease holds its
 * units while now < expires; expired leases stay as tombstones for one
 * more lease timeout (a late release hears "expired"). */

static void cc_load(struct tier_state *ts, int64_t now)
{
    ts->held = ts->latest = 0;
    for (size_t i = 0; ts->e && i < ts->e->u.ls.len; i++) {
        const struct lease *l = &ts->e->u.ls.l[i];
        if (l->expires > now) {
            ts->held += l->units;
            ts->latest = max64(ts->latest, l->expires);
        }
    }
}

static int cc_allows(const struct tier_state *ts)
{
    return ts->held + ts->cost <= ts->t->limit;
}

static void cc_figures(const struct tier_state *ts, int64_t now, int consumed,
                       struct tier_result *r)
{
    int64_t held = ts->held, last = ts->latest;
    if (consumed && ts->cost > 0) {
        held += ts->cost;
        last = max64(last, now + ts->t->lease_timeout_us);
    }
    r->remaining = max64(0, ts->t->limit - held);
    r->reset_us = last ? last - now : 0;
}

static int lease_cmp(const void *a, const void *b)
{
    const struct lease *x = a, *y = b;
    return (x->expires > y->expires) - (x->expires < y->expires);
}

/* The earliest expiry after which held + cost <= limit (the script's
 * ZRANGEBYSCORE order: by expiry). */
static int64_t cc_retry(const struct tier_state *ts, int64_t now)
{
    size_t n = ts->e ? ts->e->u.ls.len : 0, k = 0;
    struct lease *live = xcalloc(n ? n : 1, sizeof *live);
    for (size_t i = 0; i < n; i++)
        if (ts->e->u.ls.l[i].expires > now)
            live[k++] = ts->e->u.ls.l[i];
    qsort(live, k, sizeof *live, lease_cmp);
    int64_t need = ts->held + ts->cost - ts->t->limit, freed = 0, retry = ts->t->lease_timeout_us;
    for (size_t i = 0; i < k; i++) {
        freed += live[i].units;
        if (freed >= need) {
            retry = live[i].expires - now;
            break;
        }
    }
    free(live);
    return retry;
}

static void cc_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    int64_t W = ts->t->lease_timeout_us;
    size_t k = 0;
    for (size_t i = 0; i < e->u.ls.len; i++) /* ZREMRANGEBYSCORE -inf now-W */
        if (e->u.ls.l[i].expires > now - W)
            e->u.ls.l[k++] = e->u.ls.l[i];
    e->u.ls.len = k;
    if (e->u.ls.len == e->u.ls.cap) {
        e->u.ls.cap = e->u.ls.cap ? 2 * e->u.ls.cap : 4;
        e->u.ls.l = xrealloc(e->u.ls.l, e->u.ls.cap * sizeof *e->u.ls.l);
    }
    struct lease *l = &e->u.ls.l[e->u.ls.len++];
    l->expires = now + W;
    l->units = ts->cost;
    snprintf(l->nonce, sizeof l->nonce, "%s", ts->nonce ? ts->nonce : "");
    expire_in(e, now, max64(ts->latest, now + W) + W - now);
}

/* ------------------------------------------------------------ ops table */

/* One row per algorithm, indexed by enum algorithm: the script's
 * ALGORITHMS table. The kind is the state it reads and writes (gcra and
 * leaky_bucket share theirs, as their scripts share the string); delay is
 * NULL where the algorithm never asks a caller to wait. */
static const struct alg_ops {
    enum kind kind;
    void (*load)(struct tier_state *ts, int64_t now);
    int (*allows)(const struct tier_state *ts);
    void (*figures)(const struct tier_state *ts, int64_t now, int consumed, struct tier_result *r);
    int64_t (*retry)(const struct tier_state *ts, int64_t now);
    int64_t (*delay)(const struct tier_state *ts);
    void (*commit)(const struct tier_state *ts, struct entry *e, int64_t now);
} ops_table[ALG__COUNT] = {
    [ALG_FIXED_WINDOW] = {KIND_FIXED, fw_load, fw_allows, fw_figures, fw_retry, NULL, fw_commit},
    [ALG_SLIDING_WINDOW_LOG] = {KIND_LOG, log_load, log_allows, log_figures, log_retry, NULL,
                                log_commit},
    [ALG_SLIDING_WINDOW_COUNTER] = {KIND_COUNTER, swc_load, swc_allows, swc_figures, swc_retry,
                                    NULL, swc_commit},
    [ALG_SLIDING_WINDOW_BUCKETS] = {KIND_BUCKETS, swb_load, swb_allows, swb_figures, swb_retry,
                                    NULL, swb_commit},
    [ALG_TOKEN_BUCKET] = {KIND_TOKEN, tb_load, tb_allows, tb_figures, tb_retry, NULL, tb_commit},
    [ALG_GCRA] = {KIND_GCRA, gcra_load, gcra_allows, gcra_figures, gcra_retry, NULL, gcra_commit},
    [ALG_LEAKY_BUCKET] = {KIND_GCRA, gcra_load, gcra_allows, gcra_figures, gcra_retry, leaky_delay,
                          gcra_commit},
    [ALG_CONCURRENCY] = {KIND_LEASES, cc_load, cc_allows, cc_figures, cc_retry, NULL, cc_commit},
};

/* The algorithms' report step (the script's `report`, POST /report): charges
 * ts->cost with no decision, after load, and writes e. A separate table
 * from ops_table, as policy_algorithm_reports/_refunds say which rows have
 * one and which take a cost < 0. */
typedef void report_fn(struct tier_state *ts, struct entry *e, int64_t now);

static void swb_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    swb_commit(ts, e, now);
}

static report_fn *const report_table[ALG__COUNT] = {
    [ALG_FIXED_WINDOW] = fw_report,
    [ALG_SLIDING_WINDOW_LOG] = log_report,
    [ALG_SLIDING_WINDOW_COUNTER] = swc_report,
    [ALG_SLIDING_WINDOW_BUCKETS] = swb_report,
    [ALG_TOKEN_BUCKET] = tb_report,
    [ALG_GCRA] = gcra_report,
    [ALG_LEAKY_BUCKET] = gcra_report,
};

/* The tier's row; a tier that passed validation has one of the seven. */
static const struct alg_ops *ops_of(const struct tier *t)
{
    if ((unsigned)t->algorithm >= ALG__COUNT)
        abort();
    return &ops_table[t->algorithm];
}

size_t local_store_forget(struct local_store *s, const char *key_prefix, const struct policy *p,
                          const char *key, size_t keylen, int64_t now_us)
{
    char k[POLICY_KEY_BUF];
    size_t freed = 0;
    for (size_t j = 0; j < p->ntiers; j++) {
        /* One entry per tier, under its first key (as tier_key below). */
        int n = policy_tier_key(key_prefix, p->name, key, keylen, &p->tiers[j], 0, k, sizeof k);
        if (n < 0)
            continue; /* too long to have been stored */
        struct entry *e = find(s, k, (size_t)n, siphash(s, k, (size_t)n));
        if (!e)
            continue;
        freed += e->kind != KIND_NONE && !expired(e, now_us);
        entry_free(s, e);
    }
    return freed;
}

/* ---------------------------------------------------------------- decide */

/* The Redis key of one tier (its first key: the log's ZSET). */
static size_t tier_key(const char *prefix, const struct check_item *c, const struct tier *t,
                       char *out, size_t outlen)
{
    int n =
        policy_redis_key(prefix, c->policy->name, c->key, c->keylen, t->name, NULL, out, outlen);
    /* POLICY_KEY_BUF bounds every key that config and request validation
     * let through (as in scripts.c). */
    if (n < 0)
        abort();
    return (size_t)n;
}

/* Pass 1 for tier j of check c: reads its state (x->e: the live entry of
 * its algorithm, or NULL) and decides a cost of x->cost. */
static void tier_read(struct local_store *s, const char *key_prefix, const struct check_item *c,
                      size_t j, int64_t cost, int64_t now, struct tier_state *x)
{
    char key[POLICY_KEY_BUF];
    memset(x, 0, sizeof *x);
    x->t = &c->policy->tiers[j];
    x->cost = cost;
    x->capacity = policy_tier_capacity(x->t);
    size_t len = tier_key(key_prefix, c, x->t, key, sizeof key);
    x->ops = ops_of(x->t);
    x->e = lookup(s, key, len, now);
    if (x->e && x->e->kind != x->ops->kind)
        x->e = NULL; /* another algorithm's state: as absent */
    x->ops->load(x, now);
    if (x->cost == 0) {
        x->allowed = 1;
    } else if (x->cost > x->capacity) {
        x->allowed = 0;
        x->exceeds = 1;
    } else {
        x->allowed = x->ops->allows(x);
    }
}

/* One tier's figures into r, from the state tier_read read. */
static void tier_figures(const struct tier_state *x, int64_t now, int consumed,
                         struct tier_result *r)
{
    memset(r, 0, sizeof *r);
    r->allowed = x->allowed;
    r->limit = x->capacity;
    r->cost_exceeds_limit = x->exceeds;
    r->now_us = now;
    x->ops->figures(x, now, consumed, r);
    if (x->exceeds)
        r->retry_us = -1;
    else if (!x->allowed)
        r->retry_us = x->ops->retry(x, now);
    else if (x->cost > 0 && x->ops->delay)
        r->delay_us = x->ops->delay(x);
}

/* Makes room for n tier states in the store's scratch array. */
static struct tier_state *scratch(struct local_store *s, size_t n)
{
    if (n > s->scratch_cap) {
        free(s->scratch);
        s->scratch = xcalloc(n, sizeof *s->scratch);
        s->scratch_cap = n;
    }
    return s->scratch;
}

/* A report (check.lua's charge): every tier takes its cost with no
 * decision, then reports the figures of a dry run of cost 1. The caller
 * (check_json.c) refused what the algorithms cannot take. */
static int local_report(struct local_store *s, const char *key_prefix,
                        const struct check_request *req, int64_t now, struct tier_result *out)
{
    char key[POLICY_KEY_BUF];
    struct tier_state *x = scratch(s, 1);
    int request_allowed = 1;
    size_t k = 0;
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        for (size_t j = 0; j < c->policy->ntiers; j++, k++) {
            const struct tier *t = &c->policy->tiers[j];
            if (c->cost != 0 && report_table[t->algorithm]) {
                tier_read(s, key_prefix, c, j, c->cost, now, x);
                size_t len = tier_key(key_prefix, c, t, key, sizeof key);
                struct entry *e = get_or_create(s, key, len, now);
                entry_become(e, x->ops->kind);
                report_table[t->algorithm](x, e, now);
            }
            tier_read(s, key_prefix, c, j, 1, now, x);
            tier_figures(x, now, 0, &out[k]);
            if (!x->allowed && !c->policy->shadow)
                request_allowed = 0;
        }
    }
    reclaim(s, now);
    return request_allowed;
}

int local_decide(struct local_store *s, const char *key_prefix, const struct check_request *req,
                 int64_t now, struct tier_result *out)
{
    char key[POLICY_KEY_BUF];
    size_t ntiers = 0, k;
    if (req->report)
        return local_report(s, key_prefix, req, now, out);
    for (size_t i = 0; i < req->nchecks; i++)
        ntiers += req->checks[i].policy->ntiers;
    struct tier_state *ts = scratch(s, ntiers);

    /* Pass 1: read every tier and decide; every tier is read even after one
     * has denied, because every tier reports its figures. */
    int request_allowed = 1;
    k = 0;
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        int check_allowed = 1;
        for (size_t j = 0; j < c->policy->ntiers; j++, k++) {
            tier_read(s, key_prefix, c, j, c->cost, now, &ts[k]);
            check_allowed = check_allowed && ts[k].allowed;
            ts[k].nonce = req->lease_nonce;
        }
        if (!c->policy->shadow && !check_allowed)
            request_allowed = 0;
    }

    /* The figures, from the state read in pass 1, before anything is
     * written. A tier's cost counts as taken iff the request and its check
     * allow, dry run or not. */
    k = 0;
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        int check_allowed = 1;
        for (size_t j = 0; j < c->policy->ntiers; j++)
            check_allowed = check_allowed && ts[k + j].allowed;
        int consumed = request_allowed && check_allowed;
        for (size_t j = 0; j < c->policy->ntiers; j++, k++)
            tier_figures(&ts[k], now, consumed, &out[k]);
    }
    /* Pass 2: take the cost, only for a real run of an allowed request, on
     * the checks that allowed (a denied shadow check takes nothing). */
    if (request_allowed && !req->dry_run) {
        k = 0;
        for (size_t i = 0; i < req->nchecks; i++) {
            const struct check_item *c = &req->checks[i];
            int check_allowed = 1;
            for (size_t j = 0; j < c->policy->ntiers; j++)
                check_allowed = check_allowed && ts[k + j].allowed;
            for (size_t j = 0; j < c->policy->ntiers; j++, k++) {
                if (!check_allowed || c->cost == 0)
                    continue;
                size_t len = tier_key(key_prefix, c, ts[k].t, key, sizeof key);
                struct entry *e = get_or_create(s, key, len, now);
                entry_become(e, ts[k].ops->kind);
                ts[k].ops->commit(&ts[k], e, now);
            }
        }
    }

    reclaim(s, now);
    return request_allowed;
}

/* One lease's release or renew (concurrency.lease_op in the script). */
static struct lease_outcome lease_op(struct local_store *s, const char *key_prefix, int renew,
                                     const struct lease_ref *r, int64_t now)
{
    char key[POLICY_KEY_BUF];
    struct lease_outcome o = {LEASE_UNKNOWN, 0};
    int n =
        policy_redis_key(key_prefix, r->policy, r->key, r->keylen, r->tier, NULL, key, sizeof key);
    if (n < 0)
        return o;
    struct entry *e = lookup(s, key, (size_t)n, now);
    if (!e || e->kind != KIND_LEASES)
        return o;
    for (size_t i = 0; i < e->u.ls.len; i++) {
        struct lease *l = &e->u.ls.l[i];
        if (l->units != r->units || strcmp(l->nonce, r->nonce) != 0)
            continue;
        if (l->expires <= now) {
            o.status = LEASE_EXPIRED;
        } else if (!renew) {
            e->u.ls.l[i] = e->u.ls.l[--e->u.ls.len]; /* ZREM */
            o.status = LEASE_DONE;
            if (e->u.ls.len == 0)
                entry_free(s, e); /* Redis deletes an emptied ZSET */
        } else {
            l->expires = o.expires_us = now + r->timeout_us;
            o.status = LEASE_DONE;
            /* The script's PEXPIRE when PTTL < want. */
            int64_t want =
                now + (idiv_ceil(l->expires + r->timeout_us - now, 1000) + EXPIRY_SLACK_MS) * 1000;
            if (e->expires_at < want)
                e->expires_at = want;
        }
        break;
    }
    return o;
}

void local_store_lease(struct local_store *s, const char *key_prefix, int renew,
                       const struct lease_ref *refs, size_t n, int64_t now_us,
                       struct lease_outcome *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = lease_op(s, key_prefix, renew, &refs[i], now_us);
}
