/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lru_table.c: the hash index and LRU list of lru_table.h. Owns the slot
 * array and the links; never an entry.
 */
#include "lib/lru_table.h"

#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

#define MIN_SLOTS 16

void lru_table_init(struct lru_table *t, size_t max_entries, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->max_slots = 1;
    while (t->max_slots < max_entries && t->max_slots < ((size_t)1 << 40))
        t->max_slots <<= 1;
    t->nslots = t->max_slots < MIN_SLOTS ? t->max_slots : MIN_SLOTS;
    t->slots = xcalloc(t->nslots, sizeof *t->slots);
    t->key = siphash_key_from_seed(seed);
}

void lru_table_destroy(struct lru_table *t)
{
    free(t->slots);
    t->slots = NULL;
}

void lru_table_reset(struct lru_table *t)
{
    memset(t->slots, 0, t->nslots * sizeof *t->slots);
    t->newest = t->oldest = NULL;
    t->count = 0;
}

uint64_t lru_table_hash(const struct lru_table *t, const void *key, size_t len)
{
    return siphash24(&t->key, key, len);
}

struct lru_node *lru_table_chain(const struct lru_table *t, uint64_t h)
{
    return t->slots[h & (t->nslots - 1)];
}

struct lru_node *lru_table_find(const struct lru_table *t, uint64_t h, const char *id, size_t len,
                                lru_id_of_fn id_of)
{
    for (struct lru_node *n = lru_table_chain(t, h); n; n = n->chain) {
        size_t nlen;
        if (n->hash != h)
            continue;
        const char *nid = id_of(n, &nlen);
        if (nlen == len && memcmp(nid, id, len) == 0)
            return n;
    }
    return NULL;
}

static void unlink_lru(struct lru_table *t, struct lru_node *n)
{
    if (n->newer)
        n->newer->older = n->older;
    else
        t->newest = n->older;
    if (n->older)
        n->older->newer = n->newer;
    else
        t->oldest = n->newer;
    n->newer = n->older = NULL;
}

static void push_lru(struct lru_table *t, struct lru_node *n)
{
    n->newer = NULL;
    n->older = t->newest;
    if (t->newest)
        t->newest->newer = n;
    else
        t->oldest = n;
    t->newest = n;
}

static void grow(struct lru_table *t)
{
    size_t n = t->nslots * 2;
    struct lru_node **slots = xcalloc(n, sizeof *slots);
    for (size_t i = 0; i < t->nslots; i++) {
        for (struct lru_node *e = t->slots[i], *next; e; e = next) {
            next = e->chain;
            e->chain = slots[e->hash & (n - 1)];
            slots[e->hash & (n - 1)] = e;
        }
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = n;
}

void lru_table_insert(struct lru_table *t, struct lru_node *n, uint64_t h)
{
    struct lru_node **slot = &t->slots[h & (t->nslots - 1)];
    n->hash = h;
    n->chain = *slot;
    *slot = n;
    push_lru(t, n);
    t->count++;
    if (t->count > t->nslots && t->nslots < t->max_slots)
        grow(t);
}

void lru_table_remove(struct lru_table *t, struct lru_node *n)
{
    struct lru_node **p = &t->slots[n->hash & (t->nslots - 1)];
    while (*p != n)
        p = &(*p)->chain;
    *p = n->chain;
    unlink_lru(t, n);
    t->count--;
}

void lru_table_touch(struct lru_table *t, struct lru_node *n)
{
    unlink_lru(t, n);
    push_lru(t, n);
}

size_t lru_id_make(struct lru_id *id, const char *name, const char *key, size_t keylen)
{
    size_t nlen = strlen(name), n = nlen + 1 + keylen;
    if (n > id->cap) {
        id->cap = n;
        id->p = xrealloc(id->p, n);
    }
    memcpy(id->p, name, nlen + 1);
    if (keylen)
        memcpy(id->p + nlen + 1, key, keylen);
    return n;
}

void lru_id_free(struct lru_id *id)
{
    free(id->p);
    id->p = NULL;
    id->cap = 0;
}

struct lru_node *lru_table_find_key(const struct lru_table *t, struct lru_id *id, const char *name,
                                    const char *key, size_t keylen, lru_id_of_fn id_of)
{
    if (t->count == 0)
        return NULL;
    size_t len = lru_id_make(id, name, key, keylen);
    return lru_table_find(t, lru_table_hash(t, id->p, len), id->p, len, id_of);
}
