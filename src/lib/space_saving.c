/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space_saving.c: the Space-Saving sketch, its text and its merge
 * (space_saving.h). The counters live in one array; the stream-summary
 * orders them: a list of buckets by ascending count, each holding the
 * counters of that count in a list of its own, so that the smallest (the
 * one a new key takes over) is the first bucket's head, and a count that
 * grows by w moves to the next buckets: one step for a weight of 1 (most
 * checks), at most one per distinct count for a larger weight. slot[] is an
 * open-addressed table (linear probing, at most half full, deletion by
 * backward shift) from a key's hash to its counter. Indexes are 16 bits
 * (NONE: none), the structure a few cache lines per update.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/siphash.h"
#include "lib/space_saving.h"

#define NONE 0xffffu

struct counter {
    uint64_t count, err, hash;
    uint16_t len;
    uint16_t bucket;     /* the bucket of its count */
    uint16_t prev, next; /* in the bucket's list */
    char key[SPACE_SAVING_KEY_MAX];
};

struct bucket {
    uint64_t count;
    uint16_t head;       /* its counters' list */
    uint16_t prev, next; /* the buckets, by ascending count */
};

struct space_saving {
    size_t cap, n, mask;
    uint64_t total;
    struct siphash_key hkey;
    struct counter *c;
    struct bucket *b; /* cap of them: never more counts than counters */
    uint16_t first;   /* the smallest count's bucket */
    uint16_t free_b;  /* unused buckets, linked by next */
    uint16_t *slot;
};

static size_t slots_for(size_t cap)
{
    size_t n = 4;
    while (n < 2 * cap)
        n *= 2;
    return n;
}

size_t space_saving_bytes(size_t cap)
{
    return sizeof(struct space_saving) + cap * (sizeof(struct counter) + sizeof(struct bucket)) +
           slots_for(cap) * sizeof(uint16_t);
}

struct space_saving *space_saving_new(size_t cap, uint64_t seed)
{
    struct space_saving *s = xcalloc(1, sizeof *s);
    s->cap = cap;
    s->mask = slots_for(cap) - 1;
    s->hkey = siphash_key_from_seed(seed);
    s->c = xcalloc(cap, sizeof *s->c);
    s->b = xcalloc(cap, sizeof *s->b);
    s->slot = xmalloc((s->mask + 1) * sizeof *s->slot);
    space_saving_clear(s);
    return s;
}

void space_saving_free(struct space_saving *s)
{
    if (!s)
        return;
    free(s->c);
    free(s->b);
    free(s->slot);
    free(s);
}

void space_saving_clear(struct space_saving *s)
{
    s->n = 0;
    s->total = 0;
    memset(s->slot, 0xff, (s->mask + 1) * sizeof *s->slot);
    s->first = NONE;
    for (size_t i = 0; i < s->cap; i++)
        s->b[i].next = i + 1 < s->cap ? (uint16_t)(i + 1) : NONE;
    s->free_b = 0;
}

uint64_t space_saving_total(const struct space_saving *s)
{
    return s->total;
}

uint64_t space_saving_min(const struct space_saving *s)
{
    return s->n < s->cap ? 0 : s->b[s->first].count;
}

size_t space_saving_name(const char *key, size_t len, char *out)
{
    if (len <= SPACE_SAVING_KEY_MAX) {
        memcpy(out, key, len);
        return len;
    }
    /* A fixed key: every daemon must name a long key alike to merge it. */
    static const struct siphash_key fixed = {0x73706163655f7361ULL, 0x76696e675f6e616dULL};
    char tail[18];
    snprintf(tail, sizeof tail, "~%016llx", (unsigned long long)siphash24(&fixed, key, len));
    size_t head = SPACE_SAVING_KEY_MAX - 17;
    memcpy(out, key, head);
    memcpy(out + head, tail, 17);
    return SPACE_SAVING_KEY_MAX;
}

/* ---- the buckets ---- */

/* Takes counter ci out of its bucket, freeing the bucket if it empties.
 * Returns the bucket after which ci's new count goes: its old bucket if it
 * stays, else the one before it (NONE: the start). */
static uint16_t unbucket(struct space_saving *s, uint16_t ci)
{
    struct counter *c = &s->c[ci];
    uint16_t bi = c->bucket;
    struct bucket *b = &s->b[bi];
    if (c->prev != NONE)
        s->c[c->prev].next = c->next;
    else
        b->head = c->next;
    if (c->next != NONE)
        s->c[c->next].prev = c->prev;
    if (b->head != NONE)
        return bi;
    uint16_t before = b->prev;
    if (before != NONE)
        s->b[before].next = b->next;
    else
        s->first = b->next;
    if (b->next != NONE)
        s->b[b->next].prev = before;
    b->next = s->free_b;
    s->free_b = bi;
    return before;
}

/* Puts counter ci, of its count, in the bucket of that count, walking up
 * from the bucket after `after` (NONE: from the first), whose count is
 * smaller. */
static void bucket(struct space_saving *s, uint16_t ci, uint16_t after)
{
    uint64_t count = s->c[ci].count;
    uint16_t bi = after == NONE ? s->first : s->b[after].next;
    while (bi != NONE && s->b[bi].count < count) {
        after = bi;
        bi = s->b[bi].next;
    }
    if (bi == NONE || s->b[bi].count != count) {
        uint16_t nb = s->free_b; /* never NONE: a bucket per count at most */
        s->free_b = s->b[nb].next;
        s->b[nb] = (struct bucket){count, NONE, after, bi};
        if (after != NONE)
            s->b[after].next = nb;
        else
            s->first = nb;
        if (bi != NONE)
            s->b[bi].prev = nb;
        bi = nb;
    }
    struct counter *c = &s->c[ci];
    c->bucket = bi;
    c->prev = NONE;
    c->next = s->b[bi].head;
    if (c->next != NONE)
        s->c[c->next].prev = ci;
    s->b[bi].head = ci;
}

/* ---- the table ---- */

/* The slot holding name, or the empty slot where it would go. */
static size_t find(const struct space_saving *s, const char *name, size_t len, uint64_t h)
{
    size_t i = (size_t)h & s->mask;
    while (s->slot[i] != NONE) {
        const struct counter *c = &s->c[s->slot[i]];
        if (c->hash == h && c->len == len && memcmp(c->key, name, len) == 0)
            break;
        i = (i + 1) & s->mask;
    }
    return i;
}

/* Empties slot i, moving back the entries after it that probing would no
 * longer reach. */
static void unslot(struct space_saving *s, size_t i)
{
    size_t j = i;
    for (;;) {
        s->slot[i] = NONE;
        for (;;) {
            j = (j + 1) & s->mask;
            if (s->slot[j] == NONE)
                return;
            size_t home = (size_t)s->c[s->slot[j]].hash & s->mask;
            /* j's entry may move to i unless its home lies in (i, j]. */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        s->slot[i] = s->slot[j];
        i = j;
    }
}

void space_saving_add(struct space_saving *s, const char *key, size_t len, uint64_t w)
{
    char name[SPACE_SAVING_KEY_MAX];
    len = space_saving_name(key, len, name);
    uint64_t h = siphash24(&s->hkey, name, len);
    s->total += w;
    size_t i = find(s, name, len, h);
    if (s->slot[i] != NONE) {
        uint16_t ci = s->slot[i];
        uint16_t after = unbucket(s, ci);
        s->c[ci].count += w;
        bucket(s, ci, after);
        return;
    }
    uint16_t ci, after = NONE;
    uint64_t base = 0;
    if (s->n < s->cap) {
        ci = (uint16_t)s->n++;
    } else {
        /* The smallest counter is taken over: its count becomes the new
         * key's error, the most the new key may have had unseen. */
        ci = s->b[s->first].head;
        base = s->c[ci].count;
        unslot(s, find(s, s->c[ci].key, s->c[ci].len, s->c[ci].hash));
        i = find(s, name, len, h);
        after = unbucket(s, ci);
    }
    struct counter *c = &s->c[ci];
    c->count = base + w;
    c->err = base;
    c->hash = h;
    c->len = (uint16_t)len;
    memcpy(c->key, name, len);
    s->slot[i] = ci;
    bucket(s, ci, after);
}

size_t space_saving_entries(const struct space_saving *s, struct space_saving_entry *out)
{
    for (size_t i = 0; i < s->n; i++)
        out[i] = (struct space_saving_entry){s->c[i].key, s->c[i].len, s->c[i].count, s->c[i].err};
    return s->n;
}

/* ---- text ---- */

/* v in decimal then sep, appended: once a second for every counter of
 * every sketch, where snprintf's machinery cost more than the rest. */
static void put_u64(struct buf *out, uint64_t v, char sep)
{
    char d[24];
    size_t n = sizeof d;
    d[--n] = sep;
    do
        d[--n] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    buf_append(out, d + n, sizeof d - n);
}

void space_saving_write(const struct space_saving *s, struct buf *out)
{
    put_u64(out, s->total, ' ');
    put_u64(out, space_saving_min(s), ' ');
    put_u64(out, s->n, '\n');
    for (size_t i = 0; i < s->n; i++) {
        const struct counter *c = &s->c[i];
        put_u64(out, c->count, ' ');
        put_u64(out, c->err, ' ');
        put_u64(out, c->len, ' ');
        buf_append(out, c->key, c->len);
        buf_append_char(out, '\n');
    }
}

/* A decimal number then sep at *p. */
static int read_u64(const char **p, const char *end, char sep, uint64_t *out)
{
    const char *q = *p;
    uint64_t v = 0;
    if (q >= end || *q < '0' || *q > '9')
        return -1;
    for (; q < end && *q >= '0' && *q <= '9'; q++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*q - '0');
    }
    if (q >= end || *q != sep)
        return -1;
    *p = q + 1;
    *out = v;
    return 0;
}

int space_saving_read(const char **p, const char *end, struct space_saving_summary *out)
{
    uint64_t n;
    memset(out, 0, sizeof *out);
    if (read_u64(p, end, ' ', &out->total) < 0 || read_u64(p, end, ' ', &out->min) < 0 ||
        read_u64(p, end, '\n', &n) < 0 || n > 65535)
        return -1;
    out->e = xcalloc(n ? n : 1, sizeof *out->e);
    for (out->n = 0; out->n < n; out->n++) {
        struct space_saving_entry *e = &out->e[out->n];
        uint64_t len;
        if (read_u64(p, end, ' ', &e->count) < 0 || read_u64(p, end, ' ', &e->err) < 0 ||
            read_u64(p, end, ' ', &len) < 0 || len > SPACE_SAVING_KEY_MAX ||
            (size_t)(end - *p) < len + 1 || (*p)[len] != '\n') {
            free(out->e);
            out->e = NULL;
            return -1;
        }
        e->key = *p;
        e->len = (size_t)len;
        *p += len + 1;
    }
    return 0;
}

/* ---- merge ---- */

static int by_key(const void *a, const void *b)
{
    const struct space_saving_entry *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int by_count(const void *a, const void *b)
{
    const struct space_saving_entry *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    return by_key(a, b);
}

/* One sketch's counter, with that sketch's min, while grouping by key. */
struct part {
    struct space_saving_entry e;
    uint64_t min;
};

static int part_by_key(const void *a, const void *b)
{
    return by_key(&((const struct part *)a)->e, &((const struct part *)b)->e);
}

size_t space_saving_merge(const struct space_saving_summary *s, size_t m,
                          struct space_saving_entry **out)
{
    size_t all = 0;
    uint64_t mins = 0;
    for (size_t i = 0; i < m; i++)
        all += s[i].n, mins += s[i].min;
    struct part *p = xcalloc(all ? all : 1, sizeof *p);
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < s[i].n; j++)
            p[k++] = (struct part){s[i].e[j], s[i].min};
    qsort(p, all, sizeof *p, part_by_key);
    struct space_saving_entry *e = xcalloc(all ? all : 1, sizeof *e);
    size_t n = 0;
    for (size_t i = 0; i < all;) {
        /* A sketch without the key bounds its weight there by its min:
         * that much is added to the count and to the error alike. */
        uint64_t absent = mins, count = 0, err = 0;
        size_t j = i;
        for (; j < all && by_key(&p[i].e, &p[j].e) == 0; j++)
            absent -= p[j].min, count += p[j].e.count, err += p[j].e.err;
        e[n++] = (struct space_saving_entry){p[i].e.key, p[i].e.len, count + absent, err + absent};
        i = j;
    }
    free(p);
    qsort(e, n, sizeof *e, by_count);
    *out = e;
    return n;
}
