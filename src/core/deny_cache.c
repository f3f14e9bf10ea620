/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deny_cache.c: the local deny cache (see deny_cache.h for the rule that
 * makes it exact and what the caller must enforce).
 *
 * Owns: the entries, indexed by an lru_table (a SipHash-keyed hash table
 * and LRU list, shared with the limiter's local_store.c); each entry is
 * one allocation holding the denial's tier results and its identity, the
 * policy name, a NUL, then the key's bytes. Policy names never contain NUL,
 * so that identity tells (P, K) pairs apart even when keys hold NULs.
 * Does not own: clocks, the policy, what is cached (the caller decides).
 *
 * Expiry is lazy: an entry found expired by a lookup is freed; the others
 * wait for eviction, which the max_entries bound makes certain.
 */
#include "core/deny_cache.h"

#include <stdlib.h>
#include <string.h>

#include "lib/lru_table.h"
#include "lib/util.h"

struct entry {
    struct lru_node node; /* first: a node pointer is the entry's */
    int64_t cost;
    int64_t sent_us;
    int64_t expires_us; /* a hit while now_us < expires_us */
    size_t ntiers;
    size_t idlen;               /* policy, NUL, key */
    struct tier_result tiers[]; /* ntiers of them, then the idlen bytes of the identity */
};

struct deny_cache {
    size_t max_entries;
    struct lru_table t;
    struct lru_id id; /* the identity being looked up */
};

static char *entry_id(struct entry *e)
{
    return (char *)(e->tiers + e->ntiers);
}

struct deny_cache *deny_cache_new(size_t max_entries, uint64_t seed)
{
    struct deny_cache *dc = xcalloc(1, sizeof *dc);
    dc->max_entries = max_entries;
    lru_table_init(&dc->t, max_entries, seed);
    return dc;
}

void deny_cache_clear(struct deny_cache *dc)
{
    struct lru_node *n = dc->t.newest;
    while (n) {
        struct lru_node *next = n->older;
        free(n);
        n = next;
    }
    lru_table_reset(&dc->t);
}

void deny_cache_free(struct deny_cache *dc)
{
    if (!dc)
        return;
    deny_cache_clear(dc);
    lru_table_destroy(&dc->t);
    lru_id_free(&dc->id);
    free(dc);
}

size_t deny_cache_size(const struct deny_cache *dc)
{
    return dc->t.count;
}

/* The entry's identity, for lru_table_find. */
static const char *id_of(const struct lru_node *n, size_t *len)
{
    struct entry *e = (struct entry *)n;
    *len = e->idlen;
    return entry_id(e);
}

static struct entry *find(struct deny_cache *dc, size_t idlen, uint64_t h)
{
    return (struct entry *)lru_table_find(&dc->t, h, dc->id.p, idlen, id_of);
}

static struct entry *find_key(struct deny_cache *dc, const char *policy, const char *key,
                              size_t keylen)
{
    return (struct entry *)lru_table_find_key(&dc->t, &dc->id, policy, key, keylen, id_of);
}

static void entry_free(struct deny_cache *dc, struct lru_node *n)
{
    lru_table_remove(&dc->t, n);
    free(n);
}

int deny_cache_del(struct deny_cache *dc, const char *policy, const char *key, size_t keylen)
{
    struct entry *e = find_key(dc, policy, key, keylen);
    if (!e)
        return 0;
    entry_free(dc, &e->node);
    return 1;
}

/* a + b for b > 0, saturating: a retry near INT64_MAX must not wrap into
 * the past. */
static int64_t add_sat(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

void deny_cache_put(struct deny_cache *dc, const char *policy, const char *key, size_t keylen,
                    int64_t cost, const struct tier_result *results, size_t ntiers,
                    int64_t retry_us, int64_t sent_us)
{
    if (dc->max_entries == 0 || retry_us <= 0 || ntiers == 0)
        return;
    size_t idlen = lru_id_make(&dc->id, policy, key, keylen);
    uint64_t h = lru_table_hash(&dc->t, dc->id.p, idlen);
    struct entry *old = find(dc, idlen, h);
    if (old)
        entry_free(dc, &old->node);
    else if (dc->t.count >= dc->max_entries)
        entry_free(dc, dc->t.oldest);

    struct entry *e = xmalloc(sizeof *e + ntiers * sizeof e->tiers[0] + idlen);
    *e = (struct entry){.cost = cost,
                        .sent_us = sent_us,
                        .expires_us = add_sat(sent_us, retry_us),
                        .ntiers = ntiers,
                        .idlen = idlen};
    memcpy(e->tiers, results, ntiers * sizeof e->tiers[0]);
    memcpy(entry_id(e), dc->id.p, idlen);
    lru_table_insert(&dc->t, &e->node, h);
}

/* A time left at sent_us, elapsed µs later, no less than floor. 0 and -1
 * ("none", "never") are not times left and are kept as they are. */
static int64_t shift(int64_t t, int64_t elapsed, int64_t floor)
{
    if (t <= 0)
        return t;
    return t - elapsed > floor ? t - elapsed : floor;
}

int deny_cache_get(struct deny_cache *dc, const char *policy, const char *key, size_t keylen,
                   int64_t cost, size_t ntiers, int64_t now_us, struct tier_result *out)
{
    struct entry *e = find_key(dc, policy, key, keylen);
    if (!e)
        return 0;
    if (now_us >= e->expires_us || e->ntiers != ntiers) {
        entry_free(dc, &e->node);
        return 0;
    }
    if (cost < e->cost)
        return 0;
    /* A monotonic clock does not go back; were it to, nothing has elapsed. */
    int64_t elapsed = now_us > e->sent_us ? now_us - e->sent_us : 0;
    for (size_t i = 0; i < ntiers; i++) {
        out[i] = e->tiers[i];
        out[i].reset_us = shift(e->tiers[i].reset_us, elapsed, 0);
        out[i].delay_us = shift(e->tiers[i].delay_us, elapsed, 0);
        out[i].retry_us = shift(e->tiers[i].retry_us, elapsed, 1);
        if (!out[i].allowed)
            out[i].remaining = 0;
    }
    lru_table_touch(&dc->t, &e->node);
    return 1;
}
