/* SPDX-License-Identifier: Apache-2.0 */
/*
 * limiter_internal.h: what the files of the in-memory limiter share, and
 * nothing else. Included only by the .c files of src/limiter/; everything
 * outside them sees limiter_local.h alone (as config_internal.h is to
 * config.h).
 *
 *   local_store.c     the store: the key table, eviction, expiry; plays
 *                     the part of Redis, one entry per Redis key
 *   limiter_local.c   the two-pass decision, reports and lease calls
 *   tier.c            one tier's steps wherever its state lives, and the
 *                     one ops table (lua/check.lua's ALGORITHMS)
 *   redis_state.c     a tier's state as the string Redis holds (the module)
 *   fixed_window.c, calendar_window.c, sliding_window_log.c,
 *   sliding_window_counter.c, sliding_window_buckets.c, token_bucket.c,
 *   gcra.c, leaky_bucket.c, concurrency.c
 *                     one algorithm each, beside its twin lua/<name>.lua:
 *                     its steps, exported as one struct alg_ops
 *
 * Owns the types above: struct entry (one Redis key's state, in the
 * in-memory form of each algorithm), struct local_store, struct tier_state
 * (the script's `t`), struct alg_ops (a row of the ops table). Includes no
 * header of its module's users (limiter_local.h), so that limiter_local.c
 * including it makes no cycle.
 */
#ifndef RATELIMITD_LIMITER_INTERNAL_H
#define RATELIMITD_LIMITER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"
#include "core/decision.h"
#include "core/lease_id.h"
#include "lib/lru_table.h"
#include "limiter/common.h"

#define EXPIRY_SLACK_MS 1000           /* EXPIRY_SLACK_MS in lua/common.lua */
#define LEASE_BUCKET_SPAN_US 1000000LL /* LEASE_BUCKET_SPAN_US in lua/common.lua */

/* Which algorithm's state an entry holds: gcra and leaky_bucket share
 * theirs (as their scripts share the string), as do fixed_window and
 * calendar_window (told apart inside, as "f:" and "w:" in Redis). */
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

/* One Redis key's state. Each algorithm's file reads and writes its own
 * member of u; the store only frees what a kind owns. */
struct entry {
    struct lru_node node; /* first: a node pointer is the entry's */
    int64_t expires_at;   /* µs; alive while now_us <= expires_at */
    /* µs: the end the expiry was set from (lua/common.lua's expiry_until,
     * which Redis stores as PXAT under `clock: redis`); 0: set by a
     * duration alone (expire_in, always PX) */
    int64_t expires_from_end;
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

struct alg_ops;

/* One tier of the request being decided: the script's `t`. Each algorithm's
 * load sets the fields it names and reads nothing another one set. */
struct tier_state {
    const struct tier *t;
    const struct alg_ops *ops;
    int64_t cost, capacity;
    struct entry *e; /* as loaded in pass 1 (NULL: absent); valid until an entry is made */
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
    /* calendar_window: the four bounds a caller computed ("p:s:e:n" of
     * lua/calendar_window.lua: the module is sent them, as the script is),
     * or NULL: from the tier's calendar (the memory backend) */
    const int64_t *bounds;
};

struct local_store {
    size_t max_keys;
    struct lru_table t;
    size_t sweep; /* next slot the incremental sweep looks at */
    /* limiter_local.c's room for one request's tiers, kept between calls
     * (freed with the store) so that a decision need not allocate it. */
    struct tier_state *scratch;
    size_t scratch_cap;
};

/* The live entry under key (a use: moves it to the LRU head), or NULL. An
 * expired one is freed and reported absent. */
struct entry *local_store_lookup(struct local_store *s, const char *key, size_t len, int64_t now);

/* The live entry under key, created empty (KIND_NONE) if absent; a full
 * store first evicts its least recently used entry. */
struct entry *local_store_get_or_create(struct local_store *s, const char *key, size_t len,
                                        int64_t now);

/* Makes e hold state of kind k, dropping state of another kind. */
void local_store_become(struct entry *e, enum kind k);

/* Removes e from the store and frees it (e is invalid after). */
void local_store_drop(struct local_store *s, struct entry *e);

/* expire_in/px_in in common.lua: e expires `us` more µs after now, rounded
 * up to the ms, plus the slack. */
void local_store_expire_in(struct entry *e, int64_t now, int64_t us);

/* expiry_until in common.lua: e expires as local_store_expire_in(e, now,
 * end_us - now) does, and keeps end_us, from which Redis's PXAT is made. */
void local_store_expire_until(struct entry *e, int64_t now, int64_t end_us);

/* Frees a few expired entries (the end of every call): memory is bounded
 * by max_keys regardless; this only gives it back sooner. */
void local_store_reclaim(struct local_store *s, int64_t now);

/*
 * One algorithm's steps, with the script's names (lua/common.lua lists
 * them): load (reads only, into a struct tier_state like the script's `t`),
 * allows, figures, retry, delay, commit, report. load keeps a pointer to
 * the entry for figures and retry, which (like the script's) read the
 * stored state between the passes; commit and report are handed the entry
 * again (looked up anew: writing a new key may evict another) and write
 * absolute values computed from the tier_state, as the script's SET and
 * HINCRBY do. kind is the state it reads and writes (gcra and leaky_bucket
 * share theirs, as their scripts share the string); delay is NULL where the
 * algorithm never asks a caller to wait, report NULL where POST /report
 * may not charge it (policy_algorithm_reports says the same).
 */
struct alg_ops {
    enum kind kind;
    void (*load)(struct tier_state *ts, int64_t now);
    int (*allows)(const struct tier_state *ts);
    void (*figures)(const struct tier_state *ts, int64_t now, int consumed, struct tier_result *r);
    int64_t (*retry)(const struct tier_state *ts, int64_t now);
    int64_t (*delay)(const struct tier_state *ts);
    void (*commit)(const struct tier_state *ts, struct entry *e, int64_t now);
    /* charges ts->cost with no decision, after load, and writes e */
    void (*report)(struct tier_state *ts, struct entry *e, int64_t now);
    /* Local leases' blocks (lua/check.lua's take_block and give_back;
     * NULL where the algorithm cannot lease, policy_algorithm_leases):
     * the units a block may take now, the time it must be spent by, and
     * whether a block taken at `taken` may be given back now; after load. */
    int64_t (*lease_avail)(const struct tier_state *ts);
    int64_t (*lease_until)(const struct tier_state *ts, int64_t now);
    int (*lease_same)(const struct tier_state *ts, int64_t taken);
};

/* tier.c: the tier's row of the ops table (abort()s on a tier that did not
 * pass validation). */
const struct alg_ops *tier_ops(const struct tier *t);

/* tier.c: pass 1 for one tier whose ts->t, ops, cost, capacity and e (the
 * entry found, or NULL) are set: drops e if it holds another algorithm's
 * state, loads, and decides (read_and_decide in check.lua). */
void tier_decide(struct tier_state *ts, int64_t now);

/* tier.c: the tier's figures into r, from the state tier_decide read
 * (check.lua's report), as if its cost were taken iff consumed. */
void tier_figures(const struct tier_state *ts, int64_t now, int consumed, struct tier_result *r);

/* tier.c: a block's take (check.lua's take_block) over the n tiers of ts
 * (one check, each able to lease, each decided allowed for the check's
 * cost): the units granted, at least the cost and at most want (if more)
 * and what every tier has left, which becomes every tier's cost (its
 * figures and commit then take the block); *until_us the earliest time a
 * tier says the block must be spent by. */
int64_t tier_take_block(struct tier_state *const *ts, size_t n, int64_t want, int64_t now,
                        int64_t *until_us);

/* tier.c: whether a block taken at `taken` may go back to every one of
 * the n loaded tiers of ts (check.lua's give_back). */
int tier_lease_same(struct tier_state *const *ts, size_t n, int64_t taken);

/* Each algorithm file's row, gathered into the one ops table by
 * tier.c (calendar_window is a fixed_window tier with `calendar:`,
 * a row of its own as in lua/check.lua's ALGORITHMS). */
extern const struct alg_ops fixed_window_ops;
extern const struct alg_ops calendar_window_ops;
extern const struct alg_ops sliding_window_log_ops;
extern const struct alg_ops sliding_window_counter_ops;
extern const struct alg_ops sliding_window_buckets_ops;
extern const struct alg_ops token_bucket_ops;
extern const struct alg_ops gcra_ops;
extern const struct alg_ops leaky_bucket_ops;
extern const struct alg_ops concurrency_ops;

/* fixed_window.c's steps that calendar_window.c takes as they are (as
 * calendar_window.lua takes fixed_window's), and the write both share:
 * n units in the window ts loaded; a calendar window (cal) keeps its
 * start too. */
int fixed_window_allows(const struct tier_state *ts);
void fixed_window_figures(const struct tier_state *ts, int64_t now, int consumed,
                          struct tier_result *r);
int64_t fixed_window_retry(const struct tier_state *ts, int64_t now);
int64_t fixed_window_lease_avail(const struct tier_state *ts);
int64_t fixed_window_lease_until(const struct tier_state *ts, int64_t now);
void fixed_window_write(const struct tier_state *ts, struct entry *e, int64_t now, int64_t n,
                        int cal);

/* calendar_window.c: the window of the four bounds b ("p:s:e:n") that
 * holds now, [*s, *e), as calendar_window.lua's load picks it; -1 if now
 * is outside [b[0], b[3]) (the script's error: clocks a window apart). */
int calendar_window_pick(const int64_t b[4], int64_t now, int64_t *s, int64_t *e);

/* gcra.c's steps, which leaky_bucket.c takes as they are (as
 * leaky_bucket.lua takes gcra's). */
void gcra_load(struct tier_state *ts, int64_t now);
int gcra_allows(const struct tier_state *ts);
void gcra_figures(const struct tier_state *ts, int64_t now, int consumed, struct tier_result *r);
int64_t gcra_retry(const struct tier_state *ts, int64_t now);
void gcra_commit(const struct tier_state *ts, struct entry *e, int64_t now);
void gcra_report(struct tier_state *ts, struct entry *e, int64_t now);

/* token_bucket.c's lease steps that gcra.c takes as they are (a bucket's
 * block is spent within LEASE_BUCKET_SPAN_US, and always given back). */
int64_t token_bucket_lease_until(const struct tier_state *ts, int64_t now);
int token_bucket_lease_same(const struct tier_state *ts, int64_t taken);

/* sliding_window_log.c: which unit of the window (1-based, in score order)
 * a denied request waits for to leave it (the script's retry: with the
 * scores s_1 <= ... <= s_count, count + cost - limit of them must leave),
 * so that redis_state.c reads that score, and only it, from Redis. */
int64_t sliding_window_log_retry_rank(const struct tier_state *ts);

/* concurrency.c: the script's concurrency.lease_op (lua/concurrency.lua)
 * for one lease, wherever it is kept: found (its member is in the set,
 * expiring at `expires`) or not, released (renew 0) or renewed for
 * timeout µs as of now. The outcome; for a renew done, *px_ms is the PX
 * the key must live at least (the script's PEXPIRE when PTTL is less),
 * else 0. The caller makes the write: ZREM for a release done, ZADD XX of
 * the new expiry for a renew done. */
struct lease_outcome concurrency_lease_decide(int found, int64_t expires, int renew,
                                              int64_t timeout, int64_t now, int64_t *px_ms);

/* One lease's release (renew 0) or renew as of now, as the script's
 * concurrency.lease_op (lua/concurrency.lua), on the store. */
struct lease_outcome concurrency_lease_op(struct local_store *s, const char *key_prefix, int renew,
                                          const struct lease_ref *r, int64_t now);

#endif
