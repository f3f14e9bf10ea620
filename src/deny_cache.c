/*
 * deny_cache.c: the local deny cache (see deny_cache.h for the rule that
 * makes it exact and what the caller must enforce).
 *
 * Owns: a chained hash table keyed with SipHash-2-4 (siphash.c) and a doubly
 * linked LRU list, as in limiter_local.c's store, and the entries: each is
 * one allocation holding the denial's tier results and its identity, the
 * policy name, a NUL, then the key's bytes. Policy names never contain NUL,
 * so that identity tells (P, K) pairs apart even when keys hold NULs.
 * Does not own: clocks, the policy, what is cached (the caller decides).
 *
 * Expiry is lazy: an entry found expired by a lookup is freed; the others
 * wait for eviction, which the max_entries bound makes certain.
 */
#include "deny_cache.h"

#include <stdlib.h>
#include <string.h>

#include "siphash.h"
#include "util.h"

#define MIN_SLOTS 16

struct entry {
    struct entry *chain;         /* next in the hash slot */
    struct entry *newer, *older; /* LRU list: head is the newest */
    uint64_t hash;
    int64_t cost;
    int64_t sent_us;
    int64_t expires_us; /* a hit while now_us < expires_us */
    size_t ntiers;
    size_t idlen;               /* policy, NUL, key */
    struct tier_result tiers[]; /* ntiers of them, then the idlen bytes of the identity */
};

struct deny_cache {
    size_t max_entries;
    size_t count;
    struct entry **slots;
    size_t nslots;    /* a power of two */
    size_t max_slots; /* the power of two >= max_entries: no point growing past */
    struct entry *newest, *oldest;
    struct siphash_key hash_key;
    char *scratch; /* the identity being looked up, grown as keys need */
    size_t scratch_cap;
};

static char *entry_id(struct entry *e)
{
    return (char *)(e->tiers + e->ntiers);
}

struct deny_cache *deny_cache_new(size_t max_entries, uint64_t seed)
{
    struct deny_cache *dc = xcalloc(1, sizeof *dc);
    dc->max_entries = max_entries;
    dc->max_slots = 1;
    while (dc->max_slots < max_entries && dc->max_slots < ((size_t)1 << 40))
        dc->max_slots <<= 1;
    dc->nslots = dc->max_slots < MIN_SLOTS ? dc->max_slots : MIN_SLOTS;
    dc->slots = xcalloc(dc->nslots, sizeof *dc->slots);
    dc->hash_key = siphash_key_from_seed(seed);
    return dc;
}

void deny_cache_clear(struct deny_cache *dc)
{
    struct entry *e = dc->newest;
    while (e) {
        struct entry *next = e->older;
        free(e);
        e = next;
    }
    memset(dc->slots, 0, dc->nslots * sizeof *dc->slots);
    dc->newest = dc->oldest = NULL;
    dc->count = 0;
}

void deny_cache_free(struct deny_cache *dc)
{
    if (!dc)
        return;
    deny_cache_clear(dc);
    free(dc->slots);
    free(dc->scratch);
    free(dc);
}

size_t deny_cache_size(const struct deny_cache *dc)
{
    return dc->count;
}

/* Writes "policy\0key" into the scratch buffer; returns its length. */
static size_t make_id(struct deny_cache *dc, const char *policy, const char *key, size_t keylen)
{
    size_t plen = strlen(policy), n = plen + 1 + keylen;
    if (n > dc->scratch_cap) {
        dc->scratch_cap = n;
        dc->scratch = xrealloc(dc->scratch, n);
    }
    memcpy(dc->scratch, policy, plen + 1);
    if (keylen)
        memcpy(dc->scratch + plen + 1, key, keylen);
    return n;
}

static struct entry *find(struct deny_cache *dc, size_t idlen, uint64_t h)
{
    for (struct entry *e = dc->slots[h & (dc->nslots - 1)]; e; e = e->chain)
        if (e->hash == h && e->idlen == idlen && memcmp(entry_id(e), dc->scratch, idlen) == 0)
            return e;
    return NULL;
}

static void lru_unlink(struct deny_cache *dc, struct entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        dc->newest = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        dc->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(struct deny_cache *dc, struct entry *e)
{
    e->newer = NULL;
    e->older = dc->newest;
    if (dc->newest)
        dc->newest->newer = e;
    else
        dc->oldest = e;
    dc->newest = e;
}

static void entry_free(struct deny_cache *dc, struct entry *e)
{
    struct entry **p = &dc->slots[e->hash & (dc->nslots - 1)];
    while (*p != e)
        p = &(*p)->chain;
    *p = e->chain;
    lru_unlink(dc, e);
    free(e);
    dc->count--;
}

/* Doubles the slot array (amortised O(1) per insert). */
static void grow(struct deny_cache *dc)
{
    size_t n = dc->nslots * 2;
    struct entry **slots = xcalloc(n, sizeof *slots);
    for (size_t i = 0; i < dc->nslots; i++) {
        for (struct entry *e = dc->slots[i], *next; e; e = next) {
            next = e->chain;
            e->chain = slots[e->hash & (n - 1)];
            slots[e->hash & (n - 1)] = e;
        }
    }
    free(dc->slots);
    dc->slots = slots;
    dc->nslots = n;
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
    size_t idlen = make_id(dc, policy, key, keylen);
    uint64_t h = siphash24(&dc->hash_key, dc->scratch, idlen);
    struct entry *old = find(dc, idlen, h);
    if (old)
        entry_free(dc, old);
    else if (dc->count >= dc->max_entries)
        entry_free(dc, dc->oldest);

    struct entry *e = xmalloc(sizeof *e + ntiers * sizeof e->tiers[0] + idlen);
    *e = (struct entry){.hash = h,
                        .cost = cost,
                        .sent_us = sent_us,
                        .expires_us = add_sat(sent_us, retry_us),
                        .ntiers = ntiers,
                        .idlen = idlen};
    memcpy(e->tiers, results, ntiers * sizeof e->tiers[0]);
    memcpy(entry_id(e), dc->scratch, idlen);
    size_t slot = h & (dc->nslots - 1);
    e->chain = dc->slots[slot];
    dc->slots[slot] = e;
    lru_push(dc, e);
    dc->count++;
    if (dc->count > dc->nslots && dc->nslots < dc->max_slots)
        grow(dc);
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
    if (dc->count == 0)
        return 0;
    size_t idlen = make_id(dc, policy, key, keylen);
    struct entry *e = find(dc, idlen, siphash24(&dc->hash_key, dc->scratch, idlen));
    if (!e)
        return 0;
    if (now_us >= e->expires_us || e->ntiers != ntiers) {
        entry_free(dc, e);
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
    lru_unlink(dc, e);
    lru_push(dc, e);
    return 1;
}
