/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local_lease.c: the per-worker table of leased blocks (see local_lease.h
 * for the rules and why they are exact).
 *
 * Owns: the entries, indexed by an lru_table as the deny cache's are; an
 * entry is one allocation: its counters, the figures of its block's take
 * (one tier_result per tier), then its identity, the policy name, a NUL and
 * the key's bytes. Does not own: the backend calls (local_lease_calls.c
 * makes them), clocks, metrics.
 */
#include "core/local_lease.h"

#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "lib/lru_table.h"
#include "lib/util.h"

struct entry {
    struct lru_node node; /* first: a node pointer is the entry's */
    int64_t span_start_us, span_hits, last_span_hits;
    int64_t left;     /* units of the block not yet spent */
    int64_t until_us; /* spend by (monotonic) */
    int64_t taken_us; /* the backend's clock at the block's take */
    int64_t size;     /* the block's size when last asked */
    int64_t base_us;  /* when the figures below were true (monotonic) */
    uint64_t ticket;  /* the call in flight, or 0 */
    size_t ntiers;
    size_t idlen;               /* policy, NUL, key */
    struct tier_result tiers[]; /* ntiers, then the identity */
};

struct local_lease_table {
    struct lru_table t;
    uint64_t next_ticket;
    struct lru_id id; /* the identity being looked up */
};

static char *entry_id(struct entry *e)
{
    return (char *)(e->tiers + e->ntiers);
}

struct local_lease_table *local_lease_new(uint64_t seed)
{
    struct local_lease_table *t = xcalloc(1, sizeof *t);
    lru_table_init(&t->t, LOCAL_LEASE_MAX_KEYS, seed);
    return t;
}

size_t local_lease_size(const struct local_lease_table *t)
{
    return t->t.count;
}

/* The entry's identity, for lru_table_find. */
static const char *id_of(const struct lru_node *n, size_t *len)
{
    struct entry *e = (struct entry *)n;
    *len = e->idlen;
    return entry_id(e);
}

static struct entry *find(struct local_lease_table *t, size_t idlen, uint64_t h)
{
    return (struct entry *)lru_table_find(&t->t, h, t->id.p, idlen, id_of);
}

static struct entry *find_key(struct local_lease_table *t, const char *policy, const char *key,
                              size_t keylen)
{
    return (struct entry *)lru_table_find_key(&t->t, &t->id, policy, key, keylen, id_of);
}

/* Hands e's unspent block to spill and empties it. */
static void spill_block(struct entry *e, int64_t now_us, local_lease_spill_fn spill, void *arg)
{
    if (e->left <= 0)
        return;
    const char *id = entry_id(e);
    size_t plen = strlen(id);
    struct local_lease_block b = {.policy = id,
                                  .key = id + plen + 1,
                                  .keylen = e->idlen - plen - 1,
                                  .units = e->left,
                                  .taken_us = e->taken_us,
                                  .expired = now_us >= e->until_us};
    e->left = 0;
    if (spill)
        spill(arg, &b);
}

static void entry_drop(struct local_lease_table *t, struct entry *e, int64_t now_us,
                       local_lease_spill_fn spill, void *arg)
{
    spill_block(e, now_us, spill, arg);
    lru_table_remove(&t->t, &e->node);
    free(e);
}

void local_lease_drop(struct local_lease_table *t, const char *policy, const char *key,
                      size_t keylen, int64_t now_us, local_lease_spill_fn spill, void *arg)
{
    if (policy && key) {
        struct entry *e = find_key(t, policy, key, keylen);
        if (e)
            entry_drop(t, e, now_us, spill, arg);
        return;
    }
    struct lru_node *n = t->t.newest;
    while (n) {
        struct lru_node *older = n->older;
        struct entry *e = (struct entry *)n;
        if (!policy || strcmp(entry_id(e), policy) == 0)
            entry_drop(t, e, now_us, spill, arg);
        n = older;
    }
}

void local_lease_free(struct local_lease_table *t, local_lease_spill_fn spill, void *arg)
{
    if (!t)
        return;
    local_lease_drop(t, NULL, NULL, 0, INT64_MAX, spill, arg);
    lru_table_destroy(&t->t);
    lru_id_free(&t->id);
    free(t);
}

/* The entry of the identity in t->id (idlen bytes, hash h), made if
 * absent (the least recently used evicted from a full table). */
static struct entry *entry_get(struct local_lease_table *t, size_t idlen, uint64_t h, size_t ntiers,
                               int64_t now_us, local_lease_spill_fn spill, void *arg)
{
    struct entry *e = find(t, idlen, h);
    if (e && e->ntiers != ntiers) {
        /* Another policy under the name, not dropped: start afresh. */
        entry_drop(t, e, now_us, spill, arg);
        e = NULL;
    }
    if (e) {
        lru_table_touch(&t->t, &e->node);
        return e;
    }
    if (t->t.count >= LOCAL_LEASE_MAX_KEYS)
        entry_drop(t, (struct entry *)t->t.oldest, now_us, spill, arg);
    e = xcalloc(1, sizeof *e + ntiers * sizeof e->tiers[0] + idlen);
    e->ntiers = ntiers;
    e->idlen = idlen;
    e->span_start_us = now_us;
    memcpy(entry_id(e), t->id.p, idlen);
    lru_table_insert(&t->t, &e->node, h);
    return e;
}

/* Counts a check in e's spans; 1 if the key is hot. */
static int count_hit(struct entry *e, int64_t now_us)
{
    int64_t since = now_us - e->span_start_us;
    if (since >= LOCAL_LEASE_SPAN_US) {
        e->last_span_hits = since < 2 * LOCAL_LEASE_SPAN_US ? e->span_hits : 0;
        e->span_start_us = now_us;
        e->span_hits = 0;
    }
    e->span_hits++;
    return e->span_hits >= LOCAL_LEASE_HOT_HITS || e->last_span_hits >= LOCAL_LEASE_HOT_HITS;
}

/* a - b for a time left, no less than 0; 0 and -1 kept. */
static int64_t shift(int64_t v, int64_t elapsed)
{
    if (v <= 0)
        return v;
    return v - elapsed > 0 ? v - elapsed : 0;
}

static void serve(const struct entry *e, int64_t now_us, struct tier_result *out)
{
    int64_t elapsed = now_us > e->base_us ? now_us - e->base_us : 0;
    for (size_t i = 0; i < e->ntiers; i++) {
        out[i] = e->tiers[i];
        out[i].allowed = 1;
        out[i].remaining = e->tiers[i].remaining + e->left;
        if (out[i].remaining > out[i].limit)
            out[i].remaining = out[i].limit;
        out[i].reset_us = shift(e->tiers[i].reset_us, elapsed);
        out[i].retry_us = 0;
        out[i].delay_us = 0;
        out[i].cost_exceeds_limit = 0;
        if (out[i].now_us > 0)
            out[i].now_us += elapsed;
    }
}

enum local_lease_step local_lease_check(struct local_lease_table *t, const char *policy,
                                        const char *key, size_t keylen, int64_t cost, int64_t lease,
                                        int64_t cap, size_t ntiers, int64_t now_us,
                                        struct tier_result *out, int64_t *want, uint64_t *ticket,
                                        local_lease_spill_fn spill, void *arg)
{
    size_t idlen = lru_id_make(&t->id, policy, key, keylen);
    uint64_t h = lru_table_hash(&t->t, t->id.p, idlen);
    struct entry *e = entry_get(t, idlen, h, ntiers, now_us, spill, arg);
    int hot = count_hit(e, now_us);
    if (e->left > 0 && now_us >= e->until_us)
        spill_block(e, now_us, spill, arg);
    int low = e->left < cost || e->left * 4 < e->size;
    if (hot && low && e->ticket == 0) {
        int64_t size = lease;
        if (lease == POLICY_LEASE_AUTO) {
            size = e->span_hits > e->last_span_hits ? e->span_hits : e->last_span_hits;
            if (size < LOCAL_LEASE_HOT_HITS)
                size = LOCAL_LEASE_HOT_HITS;
        }
        if (size > cap)
            size = cap;
        /* Tops the block up to size; the asking check's cost comes out of
         * the grant. */
        int64_t ask = size - e->left;
        if (ask >= cost && size > cost) {
            e->size = size;
            e->ticket = ++t->next_ticket;
            *ticket = e->ticket;
            *want = ask;
            return LOCAL_LEASE_ASK;
        }
    }
    if (e->left >= cost) {
        e->left -= cost;
        serve(e, now_us, out);
        return LOCAL_LEASE_SERVED;
    }
    return hot && e->ticket ? LOCAL_LEASE_WAIT : LOCAL_LEASE_PLAIN;
}

/* The entry whose call is ticket, or NULL. */
static struct entry *find_ticket(struct local_lease_table *t, const char *policy, const char *key,
                                 size_t keylen, uint64_t ticket)
{
    struct entry *e = find_key(t, policy, key, keylen);
    return e && e->ticket == ticket ? e : NULL;
}

int local_lease_install(struct local_lease_table *t, const char *policy, const char *key,
                        size_t keylen, uint64_t ticket, int64_t units, int64_t cost,
                        int64_t until_us, int64_t taken_us, const struct tier_result *res,
                        size_t ntiers, int64_t now_us, local_lease_spill_fn spill, void *arg)
{
    struct entry *e = find_ticket(t, policy, key, keylen, ticket);
    if (!e || e->ntiers != ntiers)
        return 0;
    e->ticket = 0;
    if (e->left > 0 && now_us >= e->until_us)
        spill_block(e, now_us, spill, arg);
    /* A block still valid is in the same window as the new one (its end,
     * measured from its own send, is no later than the backend's), so the
     * two are one block with the new one's end and take time. */
    e->left += units - cost;
    e->until_us = until_us;
    e->taken_us = taken_us;
    e->base_us = now_us;
    memcpy(e->tiers, res, ntiers * sizeof *res);
    return 1;
}

void local_lease_abandon(struct local_lease_table *t, const char *policy, const char *key,
                         size_t keylen, uint64_t ticket)
{
    struct entry *e = find_ticket(t, policy, key, keylen, ticket);
    if (e)
        e->ticket = 0;
}
