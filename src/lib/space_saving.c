/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space_saving.c: the Space-Saving sketch, its text and its merge
 * (space_saving.h). The counters live in one array; heap[] orders their
 * indexes by count (the root is the smallest, the one a new key takes
 * over), pos[] is each counter's place in heap[], and slot[] is an
 * open-addressed table (linear probing, at most half full, deletion by
 * backward shift) from a key's hash to its counter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/siphash.h"
#include "lib/space_saving.h"

#define NO_SLOT 0xffffu

struct counter {
    uint64_t count, err, hash;
    uint16_t len;
    char key[SPACE_SAVING_KEY_MAX];
};

struct space_saving {
    size_t cap, n, mask;
    uint64_t total;
    struct siphash_key hkey;
    struct counter *c;
    uint16_t *heap, *pos, *slot;
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
    return sizeof(struct space_saving) + cap * (sizeof(struct counter) + 2 * sizeof(uint16_t)) +
           slots_for(cap) * sizeof(uint16_t);
}

struct space_saving *space_saving_new(size_t cap, uint64_t seed)
{
    struct space_saving *s = xcalloc(1, sizeof *s);
    s->cap = cap;
    s->mask = slots_for(cap) - 1;
    s->hkey = siphash_key_from_seed(seed);
    s->c = xcalloc(cap, sizeof *s->c);
    s->heap = xcalloc(cap, sizeof *s->heap);
    s->pos = xcalloc(cap, sizeof *s->pos);
    s->slot = xmalloc((s->mask + 1) * sizeof *s->slot);
    space_saving_clear(s);
    return s;
}

void space_saving_free(struct space_saving *s)
{
    if (!s)
        return;
    free(s->c);
    free(s->heap);
    free(s->pos);
    free(s->slot);
    free(s);
}

void space_saving_clear(struct space_saving *s)
{
    s->n = 0;
    s->total = 0;
    memset(s->slot, 0xff, (s->mask + 1) * sizeof *s->slot);
}

uint64_t space_saving_total(const struct space_saving *s)
{
    return s->total;
}

uint64_t space_saving_min(const struct space_saving *s)
{
    return s->n < s->cap ? 0 : s->c[s->heap[0]].count;
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

/* ---- the heap ---- */

static void heap_set(struct space_saving *s, size_t at, uint16_t ci)
{
    s->heap[at] = ci;
    s->pos[ci] = (uint16_t)at;
}

static void sift_up(struct space_saving *s, size_t at)
{
    uint16_t ci = s->heap[at];
    while (at > 0) {
        size_t up = (at - 1) / 2;
        if (s->c[s->heap[up]].count <= s->c[ci].count)
            break;
        heap_set(s, at, s->heap[up]);
        at = up;
    }
    heap_set(s, at, ci);
}

static void sift_down(struct space_saving *s, size_t at)
{
    uint16_t ci = s->heap[at];
    for (;;) {
        size_t l = 2 * at + 1, best = l;
        if (l >= s->n)
            break;
        if (l + 1 < s->n && s->c[s->heap[l + 1]].count < s->c[s->heap[l]].count)
            best = l + 1;
        if (s->c[ci].count <= s->c[s->heap[best]].count)
            break;
        heap_set(s, at, s->heap[best]);
        at = best;
    }
    heap_set(s, at, ci);
}

/* ---- the table ---- */

/* The slot holding name, or the empty slot where it would go. */
static size_t find(const struct space_saving *s, const char *name, size_t len, uint64_t h)
{
    size_t i = (size_t)h & s->mask;
    while (s->slot[i] != NO_SLOT) {
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
        s->slot[i] = NO_SLOT;
        for (;;) {
            j = (j + 1) & s->mask;
            if (s->slot[j] == NO_SLOT)
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
    if (s->slot[i] != NO_SLOT) {
        uint16_t ci = s->slot[i];
        s->c[ci].count += w;
        sift_down(s, s->pos[ci]);
        return;
    }
    uint16_t ci;
    uint64_t base = 0;
    if (s->n < s->cap) {
        ci = (uint16_t)s->n++;
        heap_set(s, s->n - 1, ci);
    } else {
        /* The smallest counter is taken over: its count becomes the new
         * key's error, the most the new key may have had unseen. */
        ci = s->heap[0];
        base = s->c[ci].count;
        unslot(s, find(s, s->c[ci].key, s->c[ci].len, s->c[ci].hash));
        i = find(s, name, len, h);
    }
    struct counter *c = &s->c[ci];
    c->count = base + w;
    c->err = base;
    c->hash = h;
    c->len = (uint16_t)len;
    memcpy(c->key, name, len);
    s->slot[i] = ci;
    sift_up(s, s->pos[ci]);
    sift_down(s, s->pos[ci]);
}

size_t space_saving_entries(const struct space_saving *s, struct space_saving_entry *out)
{
    for (size_t i = 0; i < s->n; i++)
        out[i] = (struct space_saving_entry){s->c[i].key, s->c[i].len, s->c[i].count, s->c[i].err};
    return s->n;
}

/* ---- text ---- */

void space_saving_write(const struct space_saving *s, struct buf *out)
{
    char line[80];
    snprintf(line, sizeof line, "%llu %llu %zu\n", (unsigned long long)s->total,
             (unsigned long long)space_saving_min(s), s->n);
    buf_append_str(out, line);
    for (size_t i = 0; i < s->n; i++) {
        const struct counter *c = &s->c[i];
        snprintf(line, sizeof line, "%llu %llu %u ", (unsigned long long)c->count,
                 (unsigned long long)c->err, (unsigned)c->len);
        buf_append_str(out, line);
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
