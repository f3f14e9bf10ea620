/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local_store.c: the in-memory limiter's store, which plays the part of
 * Redis: one entry per Redis key (policy_redis_key, so keys are isolated
 * exactly as in Redis), with the scripts' expiries (lua/common.lua's
 * expire_in) and an LRU bound. See limiter_local.h for the contract
 * (expiry, eviction and its effect) and limiter_internal.h for the entry.
 *
 * Owns: the entries, indexed by an lru_table (a chained hash table keyed
 * with SipHash and an LRU list); lazy and incremental expiry; eviction of
 * the least recently used entry when full; forgetting a key's tiers.
 * Does not own: what an entry's state means (the algorithm files), the
 * decision (limiter_local.c), key encoding (policy.c), locking (the store
 * is not thread-safe: backend_memory.c holds the lock), clocks.
 */
#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "lib/lru_table.h"
#include "lib/util.h"
#include "limiter/limiter_internal.h"
#include "limiter/limiter_local.h"

#define SWEEP_SLOTS 4 /* hash slots checked for expired entries per call */
#define TAIL_CHECKS 2 /* LRU tail entries checked for expiry per call */

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

void local_store_drop(struct local_store *s, struct entry *e)
{
    lru_table_remove(&s->t, &e->node);
    entry_clear(e);
    free(e);
}

/* local_store_lookup with the key's hash h already known: a miss that
 * creates the entry needs it again, and hashing the key twice showed in
 * bench/instructions.py (FRONT=auth BACKEND=memory). */
static struct entry *lookup_hashed(struct local_store *s, const char *key, size_t len, uint64_t h,
                                   int64_t now)
{
    struct entry *e = find(s, key, len, h);
    if (!e)
        return NULL;
    if (expired(e, now)) {
        local_store_drop(s, e);
        return NULL;
    }
    lru_table_touch(&s->t, &e->node);
    return e;
}

struct entry *local_store_lookup(struct local_store *s, const char *key, size_t len, int64_t now)
{
    return lookup_hashed(s, key, len, siphash(s, key, len), now);
}

struct entry *local_store_get_or_create(struct local_store *s, const char *key, size_t len,
                                        int64_t now)
{
    uint64_t h = siphash(s, key, len);
    struct entry *e = lookup_hashed(s, key, len, h, now);
    if (e)
        return e;
    if (s->t.count >= s->max_keys)
        local_store_drop(s, (struct entry *)s->t.oldest);
    e = xcalloc(1, sizeof *e + len + 1);
    e->keylen = len;
    memcpy(e->key, key, len);
    e->kind = KIND_NONE;
    e->expires_at = now;
    lru_table_insert(&s->t, &e->node, h);
    return e;
}

void local_store_become(struct entry *e, enum kind k)
{
    if (e->kind != k) {
        entry_clear(e);
        e->kind = k;
    }
}

void local_store_expire_in(struct entry *e, int64_t now, int64_t us)
{
    e->expires_at = now + (idiv_ceil(us, 1000) + EXPIRY_SLACK_MS) * 1000;
    e->expires_from_end = 0;
}

void local_store_expire_until(struct entry *e, int64_t now, int64_t end_us)
{
    local_store_expire_in(e, now, end_us - now);
    e->expires_from_end = end_us;
}

/* The next SWEEP_SLOTS slots of the table, then the LRU tail. */
void local_store_reclaim(struct local_store *s, int64_t now)
{
    for (int i = 0; i < SWEEP_SLOTS; i++) {
        size_t slot = s->sweep++ & (s->t.nslots - 1);
        struct lru_node *n = s->t.slots[slot];
        while (n) {
            struct lru_node *next = n->chain;
            if (expired((struct entry *)n, now))
                local_store_drop(s, (struct entry *)n);
            n = next;
        }
    }
    for (int i = 0; i < TAIL_CHECKS && s->t.oldest && expired((struct entry *)s->t.oldest, now);
         i++)
        local_store_drop(s, (struct entry *)s->t.oldest);
}

int64_t local_store_expiry(const struct local_store *s, const char *key, size_t keylen,
                           int64_t now_us)
{
    const struct entry *e = find(s, key, keylen, siphash(s, key, keylen));
    if (!e || e->kind == KIND_NONE || expired(e, now_us))
        return -1;
    return e->expires_at;
}

size_t local_store_forget(struct local_store *s, const char *key_prefix, const struct policy *p,
                          const char *key, size_t keylen, int64_t now_us)
{
    char k[POLICY_KEY_BUF];
    size_t freed = 0;
    for (size_t j = 0; j < p->ntiers; j++) {
        /* One entry per tier, under its first key (as limiter_local.c's
         * tier_key). */
        int n = policy_tier_key(key_prefix, p->name, key, keylen, &p->tiers[j], 0, k, sizeof k);
        if (n < 0)
            continue; /* too long to have been stored */
        struct entry *e = find(s, k, (size_t)n, siphash(s, k, (size_t)n));
        if (!e)
            continue;
        freed += e->kind != KIND_NONE && !expired(e, now_us);
        local_store_drop(s, e);
    }
    return freed;
}
