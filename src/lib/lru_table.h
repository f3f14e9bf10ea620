/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lru_table.h: the index shared by the in-memory tables whose keys callers
 * choose (the limiter's local_store.c, deny_cache.c): a chained hash table
 * keyed with SipHash-2-4 under a secret seed, and a doubly linked list from
 * the most to the least recently used node.
 *
 * Intrusive: the caller's entry embeds a struct lru_node as its FIRST
 * member (so a node pointer converts back to the entry) and keeps its own
 * key; the table never allocates, compares or frees entries. Lookup is the
 * caller's loop over lru_table_chain(t, h) comparing hash then key, which
 * keeps key layout and comparison with the entry's owner.
 *
 * Not thread-safe; one table per owner. Pure: no I/O, no clock.
 */
#ifndef RATELIMITD_LRU_TABLE_H
#define RATELIMITD_LRU_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/siphash.h"

struct lru_node {
    struct lru_node *chain;         /* next in the hash slot */
    struct lru_node *newer, *older; /* the LRU list */
    uint64_t hash;
};

struct lru_table {
    struct lru_node **slots;
    size_t nslots;    /* a power of two */
    size_t max_slots; /* the power of two >= the most entries: no point growing past */
    size_t count;
    struct lru_node *newest, *oldest;
    struct siphash_key key;
};

/* An empty table sized for at most max_entries entries (the caller keeps
 * the bound: it evicts t->oldest before inserting into a full table). seed
 * keys the hash: a random value, or a constant in tests. */
void lru_table_init(struct lru_table *t, size_t max_entries, uint64_t seed);

/* Frees the slot array. The entries are the caller's to free, before or
 * after (walk t->newest through ->older). */
void lru_table_destroy(struct lru_table *t);

/* Forgets every node (the caller frees the entries); the table stays usable. */
void lru_table_reset(struct lru_table *t);

/* The hash of len bytes (any bytes) under the table's secret key. */
uint64_t lru_table_hash(const struct lru_table *t, const void *key, size_t len);

/* The first node of the chain that holds hash h: follow ->chain. */
struct lru_node *lru_table_chain(const struct lru_table *t, uint64_t h);

/* Where an owner keeps an entry's identity: its bytes, and their length in
 * *len. Lets the table compare identities it does not lay out. */
typedef const char *(*lru_id_of_fn)(const struct lru_node *n, size_t *len);

/* The node under hash h whose identity (id_of) is the len bytes at id, or
 * NULL. */
struct lru_node *lru_table_find(const struct lru_table *t, uint64_t h, const char *id, size_t len,
                                lru_id_of_fn id_of);

/* Adds n (not in the table) under hash h as the most recently used;
 * doubles the slot array when the chains grow long (amortised O(1)). */
void lru_table_insert(struct lru_table *t, struct lru_node *n, uint64_t h);

/* Takes n out of the table; the caller then frees its entry. */
void lru_table_remove(struct lru_table *t, struct lru_node *n);

/* Makes n (in the table) the most recently used. */
void lru_table_touch(struct lru_table *t, struct lru_node *n);

/* The identity of an entry whose key is a name and a caller's key: the
 * name, a NUL, then the key's bytes (names hold no NUL, so distinct pairs
 * never share an identity even when keys hold NULs), built in a buffer
 * reused from lookup to lookup. Zeroed is empty; lru_id_free frees it. */
struct lru_id {
    char *p;
    size_t cap;
};

/* Writes the identity of (name, key of keylen bytes) into id->p, growing
 * it as needed; returns its length. */
size_t lru_id_make(struct lru_id *id, const char *name, const char *key, size_t keylen);

void lru_id_free(struct lru_id *id);

/* The node of (name, key) in t, or NULL: its identity is built into id
 * (lru_id_make) and looked up. An empty table hashes nothing. */
struct lru_node *lru_table_find_key(const struct lru_table *t, struct lru_id *id, const char *name,
                                    const char *key, size_t keylen, lru_id_of_fn id_of);

#endif
