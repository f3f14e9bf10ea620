/* SPDX-License-Identifier: Apache-2.0 */
/*
 * overrides.c: the process-wide table of run-time overrides (overrides.h):
 * a chained hash table keyed by (policy, key) under a reader-writer lock,
 * the change counts per policy, and the copy of a policy a check of an
 * overridden key is decided by. Owns the entries and the counts.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/decision.h"
#include "core/overrides.h"
#include "lib/siphash.h"

struct entry {
    struct entry *next;
    uint64_t hash;
    struct override *o;
    int64_t applied_us; /* monotonic: when this table took it */
    int seen;           /* overrides_replace_all's mark */
};

/* A removal this table applied: a re-read sent before it and answered
 * after it must not bring the override back. The last TOMBS are kept. */
#define TOMBS 256
struct tomb {
    char policy[POLICY_NAME_MAX + 1];
    char *key; /* NULL: an empty slot */
    size_t keylen;
    int64_t at_us; /* monotonic */
};

/* Changes counted for one policy name (names of removed policies stay:
 * counters never go back). */
struct counts {
    struct counts *next;
    char policy[POLICY_NAME_MAX + 1];
    uint64_t set, deleted, expired;
};

/* 2^17 bits (16 KiB): under 1 % of keys without an override look up
 * under the lock while the table holds up to about 1 300 entries. */
#define FILTER_BITS_LOG2 17
#define FILTER_WORDS ((1u << FILTER_BITS_LOG2) / 64)

struct overrides {
    pthread_rwlock_t lock;
    struct siphash_key sk;
    struct entry **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;    /* read without the lock: atomic */
    struct counts *counts;
    struct tomb tombs[TOMBS];
    size_t next_tomb;
    /* No entry expires before this (0: none expires): a sweep walks the
     * table under the write lock, which checks wait for, only then. Read
     * without the lock: atomic. */
    int64_t next_expiry;
    /* A filter of the hashes of the (policy, key) pairs held, read without
     * the lock: a check of a key whose bit is clear (nearly every key
     * without an override) takes no lock. A removal leaves its bit set
     * until the next rebuild (a sweep, a re-read, or removals outnumbering
     * the entries): a stale bit costs a lookup under the lock, never a
     * wrong answer. Words read and written atomically. */
    uint64_t filter[FILTER_WORDS];
    size_t stale; /* removals since the filter was rebuilt */
};

void override_free(struct override *o)
{
    if (!o)
        return;
    free(o->key);
    free(o->tiers);
    free(o->note);
    free(o->by);
    free(o);
}

struct override *override_copy(const struct override *o)
{
    struct override *c = xmalloc(sizeof *c);
    *c = *o;
    c->key = xmalloc(o->keylen + 1);
    memcpy(c->key, o->key, o->keylen + 1);
    c->tiers = xcalloc(o->ntiers, sizeof *c->tiers);
    memcpy(c->tiers, o->tiers, o->ntiers * sizeof *c->tiers);
    c->note = o->note ? xstrdup(o->note) : NULL;
    c->by = o->by ? xstrdup(o->by) : NULL;
    return c;
}

int override_expired(const struct override *o, int64_t now_us)
{
    return o->expires_us > 0 && now_us >= o->expires_us;
}

const char *limit_source_name(enum limit_source s)
{
    static const char *const names[] = {"policy", "file_override", "runtime_override"};
    return names[s];
}

struct overrides *overrides_new(uint64_t seed)
{
    struct overrides *t = xcalloc(1, sizeof *t);
    if (pthread_rwlock_init(&t->lock, NULL) != 0)
        abort(); /* only without memory, which xmalloc treats alike */
    t->sk = siphash_key_from_seed(seed ^ 0x6f76657272696465ULL);
    t->nbuckets = 64;
    t->buckets = xcalloc(t->nbuckets, sizeof *t->buckets);
    return t;
}

void overrides_free(struct overrides *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (struct entry *e = t->buckets[i], *next; e; e = next) {
            next = e->next;
            override_free(e->o);
            free(e);
        }
    }
    for (struct counts *c = t->counts, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    for (size_t i = 0; i < TOMBS; i++)
        free(t->tombs[i].key);
    free(t->buckets);
    pthread_rwlock_destroy(&t->lock);
    free(t);
}

/* ---- the hash table (callers hold the lock) ---- */

/* The policy name, a NUL, then the key: names hold no NUL, so two
 * different pairs never hash the same bytes. */
static uint64_t hash_of(const struct overrides *t, const char *policy, const char *key,
                        size_t keylen)
{
    char buf[POLICY_NAME_MAX + 1 + POLICY_KEY_MAX];
    size_t plen = strnlen(policy, POLICY_NAME_MAX);
    if (keylen > POLICY_KEY_MAX)
        keylen = POLICY_KEY_MAX; /* the API refuses longer keys */
    memcpy(buf, policy, plen);
    buf[plen] = '\0';
    memcpy(buf + plen + 1, key, keylen);
    return siphash24(&t->sk, buf, plen + 1 + keylen);
}

static struct entry **find(struct overrides *t, uint64_t h, const char *policy, const char *key,
                           size_t keylen)
{
    struct entry **at = &t->buckets[h & (t->nbuckets - 1)];
    for (; *at; at = &(*at)->next) {
        const struct override *o = (*at)->o;
        if ((*at)->hash == h && o->keylen == keylen && strcmp(o->policy, policy) == 0 &&
            memcmp(o->key, key, keylen) == 0)
            return at;
    }
    return at;
}

static void grow(struct overrides *t)
{
    size_t n = t->nbuckets * 2;
    struct entry **b = xcalloc(n, sizeof *b);
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (struct entry *e = t->buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = n;
}

/* The filter's bit of hash h: its top bits (the buckets use the bottom
 * ones). */
static size_t filter_bit(uint64_t h)
{
    return (size_t)(h >> (64 - FILTER_BITS_LOG2));
}

/* Under the write lock, before the entry is linked. */
static void filter_add(struct overrides *t, uint64_t h)
{
    size_t b = filter_bit(h);
    __atomic_fetch_or(&t->filter[b / 64], 1ULL << (b % 64), __ATOMIC_RELEASE);
}

/* Any thread, no lock: 0 if the table surely holds no entry of hash h. */
static int filter_may_hold(const struct overrides *t, uint64_t h)
{
    size_t b = filter_bit(h);
    return (__atomic_load_n(&t->filter[b / 64], __ATOMIC_ACQUIRE) >> (b % 64)) & 1;
}

/* Under the write lock: the filter of the entries held, once removals
 * made it stale enough (force: any removal; the caller walked the table
 * anyway). Each word is stored whole and keeps the bit of every entry
 * held, so that a check reading it meanwhile never misses one. */
static void filter_rebuild(struct overrides *t, int force)
{
    if (t->stale == 0 || (!force && t->stale < t->count))
        return;
    uint64_t *w = xcalloc(FILTER_WORDS, sizeof *w);
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (const struct entry *e = t->buckets[i]; e; e = e->next) {
            size_t b = filter_bit(e->hash);
            w[b / 64] |= 1ULL << (b % 64);
        }
    }
    for (size_t i = 0; i < FILTER_WORDS; i++)
        __atomic_store_n(&t->filter[i], w[i], __ATOMIC_RELEASE);
    free(w);
    t->stale = 0;
}

/* o may expire before what next_expiry says (under the write lock). */
static void note_expiry(struct overrides *t, const struct override *o)
{
    if (o->expires_us > 0 && (t->next_expiry == 0 || o->expires_us < t->next_expiry))
        __atomic_store_n(&t->next_expiry, o->expires_us, __ATOMIC_RELAXED);
}

static void insert(struct overrides *t, struct override *o)
{
    note_expiry(t, o);
    uint64_t h = hash_of(t, o->policy, o->key, o->keylen);
    struct entry **at = find(t, h, o->policy, o->key, o->keylen);
    if (*at) {
        override_free((*at)->o);
        (*at)->o = o;
        (*at)->applied_us = util_monotonic_us();
        (*at)->seen = 1;
        return;
    }
    struct entry *e = xmalloc(sizeof *e);
    *e = (struct entry){.hash = h, .o = o, .applied_us = util_monotonic_us(), .seen = 1};
    filter_add(t, h);
    *at = e;
    __atomic_store_n(&t->count, t->count + 1, __ATOMIC_RELAXED);
    if (t->count > t->nbuckets)
        grow(t);
}

static struct override *unlink_at(struct overrides *t, struct entry **at)
{
    struct entry *e = *at;
    struct override *o = e->o;
    *at = e->next;
    free(e);
    __atomic_store_n(&t->count, t->count - 1, __ATOMIC_RELAXED);
    t->stale++;
    return o;
}

static struct counts *counts_of(struct overrides *t, const char *policy)
{
    for (struct counts *c = t->counts; c; c = c->next)
        if (strcmp(c->policy, policy) == 0)
            return c;
    struct counts *c = xcalloc(1, sizeof *c);
    snprintf(c->policy, sizeof c->policy, "%s", policy);
    c->next = t->counts;
    t->counts = c;
    return c;
}

static void count_locked(struct overrides *t, const char *policy, const char *op)
{
    struct counts *c = counts_of(t, policy);
    if (strcmp(op, "set") == 0)
        c->set++;
    else if (strcmp(op, "deleted") == 0)
        c->deleted++;
    else
        c->expired++;
}

/* ---- changes ---- */

int overrides_set(struct overrides *t, struct override *o, struct override **prev)
{
    if (prev)
        *prev = NULL;
    pthread_rwlock_wrlock(&t->lock);
    uint64_t h = hash_of(t, o->policy, o->key, o->keylen);
    struct entry **at = find(t, h, o->policy, o->key, o->keylen);
    /* The same change heard again (every worker hears each announcement):
     * not newer, not applied. */
    if (*at && (*at)->o->updated_us >= o->updated_us) {
        pthread_rwlock_unlock(&t->lock);
        override_free(o);
        return 0;
    }
    if (*at) {
        struct override *old = (*at)->o;
        (*at)->o = o;
        note_expiry(t, o);
        (*at)->applied_us = util_monotonic_us();
        if (prev)
            *prev = old;
        else
            override_free(old);
    } else {
        insert(t, o);
    }
    count_locked(t, o->policy, "set");
    pthread_rwlock_unlock(&t->lock);
    return 1;
}

int overrides_delete(struct overrides *t, const char *policy, const char *key, size_t keylen,
                     int64_t updated_us, struct override **prev)
{
    if (prev)
        *prev = NULL;
    pthread_rwlock_wrlock(&t->lock);
    uint64_t h = hash_of(t, policy, key, keylen);
    struct entry **at = find(t, h, policy, key, keylen);
    if (!*at || (*at)->o->updated_us > updated_us) {
        pthread_rwlock_unlock(&t->lock);
        return 0;
    }
    struct override *o = unlink_at(t, at);
    struct tomb *tb = &t->tombs[t->next_tomb++ % TOMBS];
    free(tb->key);
    *tb =
        (struct tomb){.key = xstrndup(key, keylen), .keylen = keylen, .at_us = util_monotonic_us()};
    snprintf(tb->policy, sizeof tb->policy, "%s", policy);
    count_locked(t, policy, "deleted");
    filter_rebuild(t, 0);
    pthread_rwlock_unlock(&t->lock);
    if (prev)
        *prev = o;
    else
        override_free(o);
    return 1;
}

/* 1 if o's key was removed here at or after since_us. */
static int removed_since(const struct overrides *t, const struct override *o, int64_t since_us)
{
    for (size_t i = 0; i < TOMBS; i++) {
        const struct tomb *tb = &t->tombs[i];
        if (tb->key && tb->at_us >= since_us && tb->keylen == o->keylen &&
            memcmp(tb->key, o->key, o->keylen) == 0 && strcmp(tb->policy, o->policy) == 0)
            return 1;
    }
    return 0;
}

void overrides_replace_all(struct overrides *t, struct override **v, size_t n, int64_t since_us)
{
    pthread_rwlock_wrlock(&t->lock);
    for (size_t i = 0; i < t->nbuckets; i++)
        for (struct entry *e = t->buckets[i]; e; e = e->next)
            e->seen = 0;
    for (size_t i = 0; i < n; i++) {
        struct entry **at = find(t, hash_of(t, v[i]->policy, v[i]->key, v[i]->keylen), v[i]->policy,
                                 v[i]->key, v[i]->keylen);
        if (*at)
            (*at)->seen = 1;
        /* Heard newer since the read was sent: a change, or a removal. */
        if ((*at && (*at)->o->updated_us >= v[i]->updated_us) ||
            (!*at && removed_since(t, v[i], since_us)))
            override_free(v[i]);
        else
            insert(t, v[i]);
    }
    /* Not in the store: removed, unless set after the read was sent. */
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct entry **at = &t->buckets[i];
        while (*at) {
            if ((*at)->seen || (*at)->applied_us >= since_us)
                at = &(*at)->next;
            else
                override_free(unlink_at(t, at));
        }
    }
    filter_rebuild(t, 1);
    pthread_rwlock_unlock(&t->lock);
    free(v);
}

void overrides_count_change(struct overrides *t, const char *policy, const char *op)
{
    pthread_rwlock_wrlock(&t->lock);
    count_locked(t, policy, op);
    pthread_rwlock_unlock(&t->lock);
}

size_t overrides_sweep(struct overrides *t, int64_t now_us, const struct logger *lg,
                       void (*expired)(void *arg, const struct override *o), void *arg)
{
    int64_t next = __atomic_load_n(&t->next_expiry, __ATOMIC_RELAXED);
    if (overrides_count(t) == 0 || next == 0 || now_us < next)
        return 0;
    size_t n = 0, cap = 0;
    struct override **gone = NULL;
    pthread_rwlock_wrlock(&t->lock);
    __atomic_store_n(&t->next_expiry, 0, __ATOMIC_RELAXED);
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct entry **at = &t->buckets[i];
        while (*at) {
            if (!override_expired((*at)->o, now_us)) {
                note_expiry(t, (*at)->o);
                at = &(*at)->next;
                continue;
            }
            struct override *o = unlink_at(t, at);
            count_locked(t, o->policy, "expired");
            log_event(lg, LOG_LVL_INFO, "override expired", "policy", o->policy, "key", o->key,
                      NULL);
            if (n == cap)
                gone = xrealloc(gone, (cap = cap ? 2 * cap : 8) * sizeof *gone);
            gone[n++] = o;
        }
    }
    filter_rebuild(t, 1);
    pthread_rwlock_unlock(&t->lock);
    /* Told outside the lock: expired() sends to the backend. */
    for (size_t i = 0; i < n; i++) {
        if (expired)
            expired(arg, gone[i]);
        override_free(gone[i]);
    }
    free(gone);
    return n;
}

/* ---- reads ---- */

size_t overrides_count(const struct overrides *t)
{
    return __atomic_load_n(&t->count, __ATOMIC_RELAXED);
}

struct override *overrides_get(struct overrides *t, const char *policy, const char *key,
                               size_t keylen, int64_t now_us)
{
    pthread_rwlock_rdlock(&t->lock);
    struct entry **at = find(t, hash_of(t, policy, key, keylen), policy, key, keylen);
    struct override *o =
        *at && !override_expired((*at)->o, now_us) ? override_copy((*at)->o) : NULL;
    pthread_rwlock_unlock(&t->lock);
    return o;
}

static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static int by_key(const void *a, const void *b)
{
    const struct override *x = *(const struct override *const *)a;
    const struct override *y = *(const struct override *const *)b;
    return key_cmp(x->key, x->keylen, y->key, y->keylen);
}

void overrides_page(struct overrides *t, const char *policy, const char *after, size_t afterlen,
                    size_t max, int64_t now_us, struct override ***out, size_t *n, int *more)
{
    /* Every entry of the policy past `after`, sorted, then the first max:
     * a page costs a walk of the table, which is in memory. */
    size_t cap = 16, m = 0;
    const struct override **all = xcalloc(cap, sizeof *all);
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->nbuckets; i++) {
        for (const struct entry *e = t->buckets[i]; e; e = e->next) {
            const struct override *o = e->o;
            if ((policy && strcmp(o->policy, policy) != 0) || override_expired(o, now_us) ||
                (after && key_cmp(o->key, o->keylen, after, afterlen) <= 0))
                continue;
            if (m == cap)
                all = xrealloc(all, (cap *= 2) * sizeof *all);
            all[m++] = o;
        }
    }
    qsort(all, m, sizeof *all, by_key);
    *n = m < max ? m : max;
    *more = m > max;
    *out = xcalloc(*n ? *n : 1, sizeof **out);
    for (size_t i = 0; i < *n; i++)
        (*out)[i] = override_copy(all[i]);
    pthread_rwlock_unlock(&t->lock);
    free(all);
}

size_t overrides_policy_count(struct overrides *t, const char *policy, int64_t now_us)
{
    size_t n = 0;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->nbuckets; i++)
        for (const struct entry *e = t->buckets[i]; e; e = e->next)
            n += strcmp(e->o->policy, policy) == 0 && !override_expired(e->o, now_us);
    pthread_rwlock_unlock(&t->lock);
    return n;
}

/* ---- the check path ---- */

/* Puts o's limits into p's tiers of the same names; returns the mask of
 * the tiers changed. */
static unsigned substitute(struct policy *p, const struct override *o)
{
    unsigned mask = 0;
    for (size_t k = 0; k < o->ntiers; k++) {
        for (size_t i = 0; i < p->ntiers; i++) {
            if (strcmp(p->tiers[i].name, o->tiers[k].name) != 0)
                continue;
            struct tier t = p->tiers[i];
            t.limit = o->tiers[k].limit;
            if (o->tiers[k].burst >= 0)
                t.burst = o->tiers[k].burst;
            char err[RL_ERRLEN];
            if (policy_tier_validate(&t, err, sizeof err) == 0) {
                p->tiers[i] = t;
                mask |= 1u << i;
            }
        }
    }
    return mask;
}

int overrides_apply(struct overrides *t, struct check_item *item, int64_t now_us)
{
    if (item->owned || overrides_count(t) == 0)
        return 0;
    const struct policy *p = item->policy;
    /* The key (hash) of sk, which never changes, needs no lock. */
    uint64_t h = hash_of(t, p->name, item->key, item->keylen);
    if (!filter_may_hold(t, h))
        return 0;
    struct policy *copy = NULL;
    unsigned mask = 0;
    pthread_rwlock_rdlock(&t->lock);
    struct entry **at = find(t, h, p->name, item->key, item->keylen);
    if (*at && !override_expired((*at)->o, now_us)) {
        copy = xmalloc(sizeof *copy);
        *copy = *p;
        mask = substitute(copy, (*at)->o);
    }
    pthread_rwlock_unlock(&t->lock);
    if (!copy)
        return 0;
    item->owned = copy;
    item->policy = copy;
    item->runtime_tiers = (uint16_t)mask;
    return 1;
}

/* ---- metrics ---- */

void overrides_metrics(struct overrides *t, const char *const *names, size_t n, int64_t now_us,
                       struct buf *out)
{
    char line[256];
    buf_append_str(out, "# HELP ratelimitd_override_changes_total Run-time override changes "
                        "applied by this daemon (made here or announced by another), by "
                        "policy and operation.\n"
                        "# TYPE ratelimitd_override_changes_total counter\n");
    pthread_rwlock_rdlock(&t->lock);
    for (const struct counts *c = t->counts; c; c = c->next) {
        const char *ops[] = {"set", "deleted", "expired"};
        const uint64_t v[] = {c->set, c->deleted, c->expired};
        for (size_t k = 0; k < 3; k++) {
            snprintf(line, sizeof line,
                     "ratelimitd_override_changes_total{policy=\"%s\",op=\"%s\"} %llu\n", c->policy,
                     ops[k], (unsigned long long)v[k]);
            buf_append_str(out, line);
        }
    }
    pthread_rwlock_unlock(&t->lock);
    buf_append_str(out, "# HELP ratelimitd_overrides Run-time overrides in force, by policy.\n"
                        "# TYPE ratelimitd_overrides gauge\n");
    for (size_t i = 0; i < n; i++) {
        snprintf(line, sizeof line, "ratelimitd_overrides{policy=\"%s\"} %zu\n", names[i],
                 overrides_policy_count(t, names[i], now_us));
        buf_append_str(out, line);
    }
}
