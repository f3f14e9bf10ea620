/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_module_args.c: libFuzzer harness for the Redis module's argument
 * decoder (module/module_args.c) and the decision it feeds
 * (limiter/redis_state.c), taken the way module.c takes them. The input
 * is one `ratelimitd.check` call as '|'-separated fields: numkeys, the
 * keys, then ARGV (a single request, or "B" and a batch). A key's bytes
 * are also its stored state, so hostile states meet hostile tiers: a
 * string tier's GET answers them, a sliding_window_buckets tier's HGETALL
 * reads them as "field,value,field,value", and a sorted set (a log's, a
 * concurrency tier's, a lease call's) as "member,score,member,score".
 * What a call writes (SET; HINCRBY, HDEL, PEXPIRE; ZREMRANGEBYSCORE,
 * INCRBY, ZADD, ZREM) is kept per key name for the rest of the call, so
 * that a report's second read, and a key two tiers name, see it.
 *
 * The arrays are allocated at exactly the sizes module_args.h promises
 * suffice (no slack, unlike module.c), so ASan catches a decoder that
 * writes past them. Beyond ASan/UBSan/LSan, the harness aborts when a
 * documented contract breaks: a refusal's message is a terminated string
 * starting "ratelimitd: " within the buffer; a batch's counts add up to
 * its arguments; an accepted request has one check per (cost, policy)
 * pair, its mode's flags, contiguous non-empty tier ranges that use every
 * key once in order, each tier within the daemon's bounds (module_args.h;
 * a calendar_window tier a fixed_window with a calendar unit and four
 * ascending bounds), and its policy string's words read back (an
 * independent tokeniser) as exactly its shadow flag and tiers; a read
 * fails only for a now outside a calendar tier's bounds; a write carries
 * a state that fits REDIS_STATE_BUF and an expiry Redis accepts (> 0 ms),
 * never HDELs the bucket it counts, adds 1..limit members to a log and a
 * lease with the request's nonce; a block grants from the cost to the
 * most asked for, to be spent after now; a lease call's outcome is one of
 * its three, a renewal's expiry after now.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limiter/common.h"
#include "limiter/redis_state.h"
#include "module/module_args.h"

#define MAX_FIELDS 4096
#define SERVER_TIME 1700000000123456LL /* Redis's TIME, for ARGV[1] "" */

static void check_refusal(const char *err, size_t errlen)
{
    if (!memchr(err, '\0', errlen) || strncmp(err, "ratelimitd: ", 12) != 0 || !err[12])
        abort();
}

static int space(char c)
{
    return c != '\0' && strchr(" \t\n\v\f\r", c) != NULL;
}

/* The n-th word of s (a policy string), or len 0 past the last. */
static struct module_arg nth_word(struct module_arg s, size_t n)
{
    size_t i = 0;
    for (size_t w = 0;; w++) {
        while (i < s.len && space(s.p[i]))
            i++;
        size_t from = i;
        while (i < s.len && !space(s.p[i]))
            i++;
        if (w == n || from == i)
            return (struct module_arg){s.p + from, i - from};
    }
}

static int word_is_int(struct module_arg w, int64_t v)
{
    char buf[24];
    int neg = w.len > 1 && w.p[0] == '-'; /* a report's cost; "-0" is 0 */
    if (neg && v > 0)
        return 0;
    int n = snprintf(buf, sizeof buf, "%llu", (unsigned long long)(v < 0 ? -v : v));
    size_t z = (size_t)neg;
    while (z + 1 < w.len && w.p[z] == '0') /* leading zeros are allowed */
        z++;
    return (v >= 0 || neg) && (size_t)n == w.len - z && memcmp(buf, w.p + z, (size_t)n) == 0;
}

/* w as "p:s:e:n" of b, each part read back as word_is_int reads one. */
static int word_is_bounds(struct module_arg w, const int64_t b[4])
{
    size_t at = 0;
    for (int i = 0; i < 4; i++) {
        size_t from = at;
        while (at < w.len && w.p[at] != ':')
            at++;
        if (at == from || w.p[from] == '-' ||
            !word_is_int((struct module_arg){w.p + from, at - from}, b[i]) ||
            (at < w.len) != (i < 3))
            return 0;
        at++;
    }
    return 1;
}

/* An accepted request, against the arguments it came from. */
static void check_request(const struct module_request *req, const struct module_arg *argv,
                          size_t na, size_t nk)
{
    size_t pairs = (na - na % 2) / 2;
    if (req->server_clock != (argv[0].len == 0) ||
        (!req->server_clock && (req->now < 0 || req->now > EXACT_MAX)))
        abort();
    /* "r" or "n": a member and a timeout per key, nothing else decoded */
    if (req->lease_op) {
        if (argv[1].len != 1 || argv[1].p[0] != req->lease_op || na != 2 + 2 * nk)
            abort();
        return;
    }
    if (pairs < 1 || req->nchecks != pairs - 1 || req->ntiers > nk)
        abort();
    /* the nonce: the odd count's last argument */
    if (req->has_nonce != (int)(na % 2) ||
        (req->has_nonce && (strlen(req->nonce) != 22 || memcmp(req->nonce, argv[na - 1].p, 22))))
        abort();
    /* mode: "0", "1", "2" (both), "3" (a report), or a block's "L<n>" or
     * "G<n>" (n >= 1; one check, every tier able to lease, costs >= 1) */
    if (req->block) {
        if (argv[1].len < 2 || argv[1].p[0] != req->block || req->block_n < 1 ||
            !word_is_int((struct module_arg){argv[1].p + 1, argv[1].len - 1}, req->block_n) ||
            argv[1].p[1] == '-' || req->nchecks != 1 || req->checks[0].cost < 1 || req->dry_run ||
            req->report)
            abort();
        for (size_t i = 0; i < req->ntiers; i++)
            if (!policy_algorithm_leases(req->tiers[i].t.algorithm))
                abort();
    } else if (argv[1].len != 1 || argv[1].p[0] < '0' || argv[1].p[0] > '3' ||
               req->dry_run != (argv[1].p[0] != '0') || req->both != (argv[1].p[0] == '2') ||
               req->report != (argv[1].p[0] == '3')) {
        abort();
    }
    size_t next = 0, key = 0;
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        struct module_arg policy = argv[3 + 2 * c];
        if (chk->first != next || chk->last <= chk->first ||
            chk->cost < (req->report ? -EXACT_MAX : 0) || chk->cost > EXACT_MAX ||
            !word_is_int(argv[2 + 2 * c], chk->cost) ||
            (!req->report && argv[2 + 2 * c].p[0] == '-'))
            abort();
        if (!word_is_int(nth_word(policy, 0), chk->shadow) || chk->shadow > 1)
            abort();
        for (size_t i = chk->first; i < chk->last; i++) {
            const struct module_tier *mt = &req->tiers[i];
            const struct tier *t = &mt->t;
            size_t w = 1 + 5 * (i - chk->first);
            const char *name =
                mt->calendar ? "calendar_window" : policy_algorithm_name(t->algorithm);
            struct module_arg a = nth_word(policy, w);
            if (mt->key != key || a.len != strlen(name) || memcmp(a.p, name, a.len) != 0 ||
                !word_is_int(nth_word(policy, w + 1), t->limit) ||
                !word_is_int(nth_word(policy, w + 3), t->burst) ||
                !word_is_int(nth_word(policy, w + 4), t->precision_us))
                abort();
            if (t->window_us < 1 || t->limit < 0 || t->burst < 0 || t->precision_us < 0 ||
                (t->limit == 0 && t->algorithm != ALG_FIXED_WINDOW))
                abort();
            key += (size_t)policy_algorithm_nkeys(t->algorithm);
            if (mt->calendar) {
                /* a fixed_window with a calendar unit, its window the
                 * bounds' [s, e); its arithmetic multiplies nothing */
                if (t->algorithm != ALG_FIXED_WINDOW || t->calendar.unit == CALENDAR_NONE ||
                    !word_is_bounds(nth_word(policy, w + 2), mt->bounds) || mt->bounds[0] < 0 ||
                    mt->bounds[3] > EXACT_MAX || t->window_us != mt->bounds[2] - mt->bounds[1])
                    abort();
                for (int b = 1; b < 4; b++)
                    if (mt->bounds[b - 1] >= mt->bounds[b])
                        abort();
                continue;
            }
            if (t->calendar.unit != CALENDAR_NONE ||
                !word_is_int(nth_word(policy, w + 2), t->window_us))
                abort();
            if (t->algorithm == ALG_SLIDING_WINDOW_BUCKETS &&
                (t->precision_us < 1 || t->window_us % t->precision_us != 0 ||
                 t->window_us / t->precision_us > MODULE_MAX_BUCKETS))
                abort();
            /* the products the scripts compute stay exact; a log's
             * members and a lease's timeout */
            int64_t factor = policy_tier_window_factor(t);
            if (factor > EXACT_MAX / t->window_us)
                abort();
            if ((t->algorithm == ALG_SLIDING_WINDOW_LOG && t->limit > MODULE_MAX_LOG) ||
                (t->algorithm == ALG_CONCURRENCY && t->lease_timeout_us != t->window_us))
                abort();
        }
        if (nth_word(policy, 1 + 5 * (chk->last - chk->first)).len != 0)
            abort(); /* a word the decoder did not take */
        next = chk->last;
    }
    if (next != req->ntiers || key != nk)
        abort();
}

/* Redis, as far as one call sees it: each key (by name: two keys of the
 * same bytes are one) raw until written, then a string or a hash. A raw
 * key is the bytes of its name: a string of them to GET, or to HGETALL a
 * hash of "field,value,field,value" (an odd last word dropped, a field
 * again dropped, as a hash holds each once). */
enum kv_type { KV_RAW, KV_STRING, KV_HASH, KV_ZSET };

struct kv {
    struct module_arg name;
    enum kv_type type;
    char buf[REDIS_STATE_BUF];
    size_t len;
    /* KV_HASH: n fields, each's bytes malloc'd; KV_ZSET: n members
     * (name) and their scores (value, as Redis answers them), by score */
    struct redis_field *f;
    size_t n;
};

struct store {
    struct kv *kv; /* room for every key of the request */
    size_t n;
    const char *nonce; /* the request's lease nonce, or NULL */
};

static struct kv *lookup(struct store *s, struct module_arg name)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->kv[i].name.len == name.len && memcmp(s->kv[i].name.p, name.p, name.len) == 0)
            return &s->kv[i];
    struct kv *k = &s->kv[s->n++];
    memset(k, 0, sizeof *k);
    k->name = name;
    return k;
}

static void store_free(struct store *s)
{
    for (size_t i = 0; i < s->n; i++) {
        for (size_t j = 0; j < s->kv[i].n; j++) {
            free((char *)s->kv[i].f[j].name);
            free((char *)s->kv[i].f[j].value);
        }
        free(s->kv[i].f);
    }
    free(s->kv);
}

static char *dup_bytes(const char *p, size_t len)
{
    char *d = malloc(len + 1);
    if (!d)
        abort();
    memcpy(d, p, len);
    d[len] = '\0';
    return d;
}

/* A raw key as the hash HGETALL would answer, each field once, made the
 * key's own. */
static void make_hash(struct kv *k)
{
    struct module_arg r = k->name;
    size_t words = 1;
    for (size_t i = 0; i < r.len; i++)
        words += r.p[i] == ',';
    k->f = calloc(words / 2 + 1, sizeof *k->f);
    if (!k->f)
        abort();
    k->n = 0;
    const char *p = r.p, *end = r.p + r.len;
    for (size_t w = 0; w + 1 < words; w += 2) {
        const char *c1 = memchr(p, ',', (size_t)(end - p));
        const char *c2 = memchr(c1 + 1, ',', (size_t)(end - c1 - 1));
        const char *v = c1 + 1, *ve = c2 ? c2 : end;
        int seen = 0;
        for (size_t j = 0; j < k->n && !seen; j++)
            seen = k->f[j].name_len == (size_t)(c1 - p) &&
                   memcmp(k->f[j].name, p, k->f[j].name_len) == 0;
        if (!seen) {
            k->f[k->n] =
                (struct redis_field){dup_bytes(p, (size_t)(c1 - p)), dup_bytes(v, (size_t)(ve - v)),
                                     (size_t)(c1 - p), (size_t)(ve - v)};
            k->n++;
        }
        p = c2 ? c2 + 1 : end;
    }
    k->type = KV_HASH;
}

/* A score as Redis would answer it ("%.17g" of the double it holds; an
 * unparsable one is kept as sent: the module must refuse it). */
static double score_of(const struct redis_field *f)
{
    char buf[64];
    size_t n = f->value_len < sizeof buf - 1 ? f->value_len : sizeof buf - 1;
    memcpy(buf, f->value, n);
    buf[n] = '\0';
    return strtod(buf, NULL);
}

static int by_score(const void *a, const void *b)
{
    double x = score_of(a), y = score_of(b);
    return (x > y) - (x < y);
}

/* A raw key as the sorted set ZRANGE would answer, "member,score,...",
 * made the key's own (as make_hash; a member again dropped). */
static void make_zset(struct kv *k)
{
    make_hash(k);
    qsort(k->f, k->n, sizeof *k->f, by_score);
    k->type = KV_ZSET;
}

/* The sorted set under key for a command: 0, or -1 if another type is
 * there (WRONGTYPE); absent or raw, an empty or decoded one. */
static int zset_at(struct store *s, struct module_arg key, struct kv **out)
{
    struct kv *k = lookup(s, key);
    if (k->type == KV_STRING || k->type == KV_HASH)
        return -1;
    if (k->type == KV_RAW)
        make_zset(k);
    *out = k;
    return 0;
}

/* The members of k scored after `from`: [*first, k->n). */
static size_t zset_after(const struct kv *k, int64_t from)
{
    size_t i = 0;
    while (i < k->n && !(score_of(&k->f[i]) > (double)from))
        i++;
    return i;
}

struct zset_read {
    struct store *s;
    struct module_arg key;
};

static int zr_count(void *ctx, int64_t from, int64_t *n)
{
    struct zset_read *z = ctx;
    struct kv *k;
    if (zset_at(z->s, z->key, &k) < 0)
        return -1;
    *n = (int64_t)(k->n - zset_after(k, from));
    return 0;
}

static int zr_rank(struct zset_read *z, int64_t from, int64_t i, int newest, int64_t *score)
{
    struct kv *k;
    if (zset_at(z->s, z->key, &k) < 0)
        return -1;
    size_t first = zset_after(k, from);
    if (i < 0 || (size_t)i >= k->n - first)
        return -1; /* the module asked past the count it read */
    const struct redis_field *f = &k->f[newest ? k->n - 1 : first + (size_t)i];
    return redis_state_integer(f->value, f->value_len, score);
}

static int zr_newest(void *ctx, int64_t from, int64_t *score)
{
    return zr_rank(ctx, from, 0, 1, score);
}

static int zr_score(void *ctx, int64_t from, int64_t i, int64_t *score)
{
    return zr_rank(ctx, from, i, 0, score);
}

/* ZADD key score member (updating a member there), as Redis would. */
static void zadd(struct kv *k, int64_t score, const char *member, size_t len)
{
    char value[24];
    int vlen = snprintf(value, sizeof value, "%lld", (long long)score);
    size_t j = 0;
    while (j < k->n && !(k->f[j].name_len == len && memcmp(k->f[j].name, member, len) == 0))
        j++;
    if (j == k->n) {
        struct redis_field *f = realloc(k->f, (k->n + 1) * sizeof *f);
        if (!f)
            abort();
        k->f = f;
        k->f[k->n++] = (struct redis_field){dup_bytes(member, len), NULL, len, 0};
    } else {
        free((char *)k->f[j].value);
    }
    k->f[j].value = dup_bytes(value, (size_t)vlen);
    k->f[j].value_len = (size_t)vlen;
    qsort(k->f, k->n, sizeof *k->f, by_score);
}

/* ZREMRANGEBYSCORE key -inf upto. */
static void zrem_upto(struct kv *k, int64_t upto)
{
    size_t j = 0;
    for (size_t i = 0; i < k->n; i++) {
        if (score_of(&k->f[i]) <= (double)upto) {
            free((char *)k->f[i].name);
            free((char *)k->f[i].value);
        } else {
            k->f[j++] = k->f[i];
        }
    }
    k->n = j;
}

/* module.c's read_tier: -1 where it replies an error. */
static int read_tier(struct store *s, const struct module_arg *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now)
{
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_LOG) {
        struct zset_read z = {s, *key};
        struct redis_zset_reader r = {&z, zr_count, zr_newest, zr_score};
        return redis_state_read_log(x, &t->t, cost, &r, now);
    }
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_LEASES) {
        struct kv *k;
        if (zset_at(s, *key, &k) < 0)
            return -1;
        size_t first = zset_after(k, now);
        return redis_state_read_leases(x, &t->t, cost, s->nonce, k->f + first, k->n - first, now);
    }
    struct kv *k = lookup(s, *key);
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_HASH) {
        if (k->type == KV_STRING || k->type == KV_ZSET)
            return -1; /* WRONGTYPE */
        if (k->type == KV_RAW)
            make_hash(k);
        return redis_state_read_hash(x, &t->t, cost, k->f, k->n, now);
    }
    const char *val = k->type == KV_RAW ? k->name.p : k->type == KV_STRING ? k->buf : NULL;
    size_t len = k->type == KV_RAW ? k->name.len : k->type == KV_STRING ? k->len : 0;
    int allowed = redis_state_read(x, &t->t, t->calendar ? t->bounds : NULL, cost, val, len, now);
    if (allowed < 0 && (!t->calendar || (now >= t->bounds[0] && now < t->bounds[3])))
        abort(); /* -1 only for a now outside the bounds sent */
    return allowed;
}

/* HINCRBY's integer: Redis's string2ll, no leading zero. */
static int redis_int(const struct redis_field *f, int64_t *v)
{
    char buf[24];
    if (f->value_len == 0 || f->value_len >= sizeof buf)
        return -1;
    memcpy(buf, f->value, f->value_len);
    buf[f->value_len] = '\0';
    char *e;
    long long n = strtoll(buf, &e, 10);
    int len = snprintf(buf, sizeof buf, "%lld", n);
    if ((size_t)len != f->value_len || memcmp(buf, f->value, f->value_len) != 0)
        return -1;
    *v = n;
    return 0;
}

/* module.c's write_log: key[0] the set, key[1] its counter (INCRBY: an
 * integer string, or absent). */
static int write_log(struct store *s, const struct module_arg *key, const struct module_tier *t,
                     const struct redis_write *w)
{
    struct kv *z, *c;
    int64_t seq = 0;
    if (w->by < 1 || w->by > t->t.limit || w->field != w->score - t->t.window_us)
        abort(); /* 1..limit members, scored now, the window before trimmed */
    if (zset_at(s, key[0], &z) < 0)
        return -1;
    zrem_upto(z, w->field);
    c = lookup(s, key[1]);
    if (c->type == KV_HASH || c->type == KV_ZSET)
        return -1;
    const char *v = c->type == KV_RAW ? c->name.p : c->buf;
    size_t vlen = c->type == KV_RAW ? c->name.len : c->len;
    struct redis_field as = {"", v, 0, vlen};
    if (vlen > 0 && redis_int(&as, &seq) < 0)
        return -1; /* "value is not an integer" */
    if (seq > INT64_MAX - w->by)
        return -1; /* "increment or decrement would overflow" */
    seq += w->by;
    c->len = (size_t)snprintf(c->buf, sizeof c->buf, "%lld", (long long)seq);
    c->type = KV_STRING;
    /* The counter only grows: its members are new (appended, sorted once:
     * a cost of a million must not take the harness quadratic time). */
    struct redis_field *f = realloc(z->f, (z->n + (size_t)w->by) * sizeof *f);
    if (!f)
        abort();
    z->f = f;
    for (int64_t i = seq - w->by + 1; i <= seq; i++) {
        char member[48], value[24];
        int len = snprintf(member, sizeof member, "%lld-%lld", (long long)w->score, (long long)i);
        int slen = snprintf(value, sizeof value, "%lld", (long long)w->score);
        z->f[z->n++] =
            (struct redis_field){dup_bytes(member, (size_t)len), dup_bytes(value, (size_t)slen),
                                 (size_t)len, (size_t)slen};
    }
    qsort(z->f, z->n, sizeof *z->f, by_score);
    return 0;
}

/* module.c's write_state on the store, with the contract's checks of w;
 * -1 where Redis refuses a command. */
static int write_state(struct store *s, const struct module_arg *key, const struct module_tier *t,
                       const struct redis_write *w)
{
    if (w->ex.ms <= 0)
        abort(); /* SET and PEXPIRE take > 0 ms, PXAT an instant after 1970 */
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_LOG)
        return write_log(s, key, t, w);
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_LEASES) {
        struct kv *z;
        char member[64];
        if (!w->nonce || strlen(w->nonce) != 22 || w->by < 1 || w->by > t->t.limit ||
            w->score != w->field + 2 * t->t.lease_timeout_us)
            abort();
        if (zset_at(s, *key, &z) < 0)
            return -1;
        zrem_upto(z, w->field);
        int len = snprintf(member, sizeof member, "%lld:%s", (long long)w->by, w->nonce);
        zadd(z, w->score, member, (size_t)len);
        return 0;
    }
    struct kv *k = lookup(s, *key);
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_STRING) {
        if (w->len == 0 || w->len >= REDIS_STATE_BUF || memchr(w->buf, '\0', w->len))
            abort();
        for (size_t j = 0; j < k->n; j++) {
            free((char *)k->f[j].name);
            free((char *)k->f[j].value);
        }
        free(k->f);
        k->f = NULL, k->n = 0;
        memcpy(k->buf, w->buf, w->len);
        k->len = w->len;
        k->type = KV_STRING;
        return 0;
    }
    if (k->type == KV_STRING || k->type == KV_ZSET)
        return -1; /* WRONGTYPE */
    if (k->type == KV_RAW)
        make_hash(k);
    char name[24];
    int len = snprintf(name, sizeof name, "%lld", (long long)w->field);
    size_t j = 0;
    while (j < k->n &&
           !(k->f[j].name_len == (size_t)len && memcmp(k->f[j].name, name, (size_t)len) == 0))
        j++;
    int64_t v = 0;
    if (j < k->n && redis_int(&k->f[j], &v) < 0)
        return -1; /* "hash value is not an integer" */
    if ((w->by > 0 && v > INT64_MAX - w->by) || (w->by < 0 && v < INT64_MIN - w->by))
        return -1; /* "increment or decrement would overflow" */
    if (j == k->n) {
        struct redis_field *f = realloc(k->f, (k->n + 1) * sizeof *f);
        if (!f)
            abort();
        k->f = f;
        k->f[k->n++] = (struct redis_field){dup_bytes(name, (size_t)len), NULL, (size_t)len, 0};
    }
    char value[24];
    int vlen = snprintf(value, sizeof value, "%lld", (long long)(v + w->by));
    free((char *)k->f[j].value);
    k->f[j].value = dup_bytes(value, (size_t)vlen);
    k->f[j].value_len = (size_t)vlen;
    for (size_t d = 0; d < w->ndel; d++) {
        if (w->del[d] == w->field)
            abort(); /* HDEL of the bucket just counted */
        len = snprintf(name, sizeof name, "%lld", (long long)w->del[d]);
        for (j = 0; j < k->n; j++)
            if (k->f[j].name_len == (size_t)len && memcmp(k->f[j].name, name, (size_t)len) == 0) {
                free((char *)k->f[j].name);
                free((char *)k->f[j].value);
                k->f[j] = k->f[--k->n];
                break;
            }
    }
    return 0;
}

/* module.c's report(): every tier charged its cost (read with a cost of
 * 0, report, write), then read again for a unit, all figures as denied. */
static void report(struct store *s, const struct module_arg *keys, const struct module_request *req,
                   void *xs, int64_t now)
{
    int64_t fig[REDIS_STATE_FIGURES];
    for (size_t c = 0; c < req->nchecks; c++)
        for (size_t i = req->checks[c].first; i < req->checks[c].last; i++) {
            enum algorithm a = req->tiers[i].t.algorithm;
            if (!policy_algorithm_reports(a) ||
                (req->checks[c].cost < 0 && !policy_algorithm_refunds(a)))
                return;
        }
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        for (size_t i = chk->first; i < chk->last; i++) {
            const struct module_tier *t = &req->tiers[i];
            struct redis_tier *x = redis_state_tier_at(xs, i);
            if (chk->cost != 0) {
                struct redis_write w;
                if (read_tier(s, &keys[t->key], x, t, 0, now) < 0)
                    return;
                redis_state_report(x, chk->cost, now, req->server_clock, &w);
                if (write_state(s, &keys[t->key], t, &w) < 0)
                    return;
            }
            if (read_tier(s, &keys[t->key], x, t, 1, now) < 0)
                return;
        }
    }
    for (size_t i = 0; i < req->ntiers; i++) {
        struct zset_read z = {s, keys[req->tiers[i].key]};
        struct redis_zset_reader r = {&z, zr_count, zr_newest, zr_score};
        if (redis_state_layout(&req->tiers[i].t) == REDIS_LAYOUT_LOG &&
            redis_state_reread_log(redis_state_tier_at(xs, i), &r, now) < 0)
            return;
    }
    for (size_t i = 0; i < req->ntiers; i++)
        redis_state_figures(redis_state_tier_at(xs, i), now, 0, fig);
}

/* module.c's lease_ops: each key's lease, its timeout decoded as it comes. */
static void lease_ops(struct store *s, const struct module_arg *keys, size_t nk,
                      const struct module_arg *argv, size_t na, const struct module_request *req,
                      int64_t now)
{
    char err[MODULE_ERR_BUF];
    for (size_t i = 0; i < nk; i++) {
        int64_t timeout, status, expires, px;
        if (module_args_lease_timeout(argv, na, i, &timeout, err, sizeof err) < 0) {
            check_refusal(err, sizeof err);
            return;
        }
        struct kv *z = lookup(s, keys[i]);
        const struct redis_field *found = NULL;
        if (z->type == KV_RAW)
            make_zset(z);
        for (size_t j = 0; z->type == KV_ZSET && j < z->n; j++)
            if (z->f[j].name_len == argv[2 + 2 * i].len &&
                memcmp(z->f[j].name, argv[2 + 2 * i].p, argv[2 + 2 * i].len) == 0)
                found = &z->f[j];
        int write =
            redis_state_lease_op(found ? found->value : NULL, found ? found->value_len : 0,
                                 req->lease_op == 'n', timeout, now, &status, &expires, &px);
        if (status < 0 || status > 2 || (write != 0) != (status == 1) ||
            (write == 2) != (req->lease_op == 'n' && status == 1) ||
            (write == 2 && (expires < now || px <= 0)) || (write != 2 && expires != 0))
            abort();
        if (write == 1) {
            size_t j = (size_t)(found - z->f); /* ZREM */
            free((char *)z->f[j].name);
            free((char *)z->f[j].value);
            memmove(z->f + j, z->f + j + 1, (z->n - j - 1) * sizeof *z->f);
            z->n--;
        } else if (write == 2)
            zadd(z, expires, argv[2 + 2 * i].p, argv[2 + 2 * i].len);
    }
}

/* module.c's block(): "L" takes a block, "G" gives one back. */
static void block(struct store *s, const struct module_arg *keys, const struct module_request *req,
                  void *xs, int64_t now)
{
    size_t n = req->ntiers;
    int64_t units = req->checks[0].cost, fig[REDIS_STATE_FIGURES], until = 0, granted = 0;
    int allowed = 1;
    for (size_t i = 0; i < n; i++) {
        int a = read_tier(s, &keys[req->tiers[i].key], redis_state_tier_at(xs, i), &req->tiers[i],
                          req->block == 'L' ? units : 0, now);
        if (a < 0)
            return;
        allowed &= a;
    }
    if (req->block == 'L' && allowed) {
        granted = redis_state_take_block(xs, n, req->block_n, now, &until);
        /* until is capped at 2^53 µs (the script's exact integers), so a
         * block taken at that now ends at once: never before it. */
        if (granted < units || granted > (req->block_n > units ? req->block_n : units) ||
            until < now)
            abort();
    }
    if (req->block == 'G' && redis_state_lease_same(xs, n, req->block_n))
        for (size_t i = 0; i < n; i++) {
            struct redis_write w;
            redis_state_report(redis_state_tier_at(xs, i), -units, now, req->server_clock, &w);
            if (write_state(s, &keys[req->tiers[i].key], &req->tiers[i], &w) < 0)
                return;
        }
    for (size_t i = 0; req->block == 'G' && i < n; i++)
        if (read_tier(s, &keys[req->tiers[i].key], redis_state_tier_at(xs, i), &req->tiers[i], 1,
                      now) < 0)
            return;
    for (size_t i = 0; i < n; i++)
        redis_state_figures(redis_state_tier_at(xs, i), now, req->block == 'L' && allowed, fig);
    for (size_t i = 0; req->block == 'L' && allowed && i < n; i++) {
        struct redis_write w;
        redis_state_commit(redis_state_tier_at(xs, i), now, req->server_clock, &w);
        if (write_state(s, &keys[req->tiers[i].key], &req->tiers[i], &w) < 0)
            return;
    }
}

/* module.c's decide(), on the store: pass 1's reads (stopping at an
 * error, as module.c replies it), the figures (consumed iff the request
 * and the tier's check allow; never a denied shadow check's, whose cost
 * may exceed its capacity, where cost * window may pass int64), those as
 * if denied for "2", and the writes of the checks that allowed (a denied
 * shadow check writes nothing) of an allowed call that is no dry run. */
static void decide(const struct module_request *req, const struct module_arg *keys, size_t nk,
                   const struct module_arg *argv, size_t na, void *xs, int *allowed)
{
    int64_t now = req->server_clock ? SERVER_TIME : req->now, fig[REDIS_STATE_FIGURES];
    struct store s = {calloc(nk + 1, sizeof *s.kv), 0, req->has_nonce ? req->nonce : NULL};
    if (!s.kv)
        abort();
    if (req->lease_op || req->report || req->block) {
        if (req->lease_op)
            lease_ops(&s, keys, nk, argv, na, req, now);
        else if (req->report)
            report(&s, keys, req, xs, now);
        else
            block(&s, keys, req, xs, now);
        store_free(&s);
        return;
    }
    int all = 1;
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        allowed[c] = 1;
        for (size_t i = chk->first; i < chk->last; i++) {
            int a = read_tier(&s, &keys[req->tiers[i].key], redis_state_tier_at(xs, i),
                              &req->tiers[i], chk->cost, now);
            if (a < 0) {
                store_free(&s);
                return;
            }
            allowed[c] &= a;
        }
        if (!chk->shadow && !allowed[c])
            all = 0;
    }
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        for (size_t i = chk->first; i < chk->last; i++)
            redis_state_figures(redis_state_tier_at(xs, i), now, all && allowed[c], fig);
    }
    for (size_t i = 0; req->both && i < req->ntiers; i++)
        redis_state_figures(redis_state_tier_at(xs, i), now, 0, fig);
    for (size_t c = 0; all && !req->dry_run && c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        for (size_t i = chk->first; allowed[c] && chk->cost > 0 && i < chk->last; i++) {
            struct redis_write w;
            if (!redis_state_can_commit(redis_state_tier_at(xs, i))) {
                store_free(&s); /* the script's error: no nonce for a lease */
                return;
            }
            redis_state_commit(redis_state_tier_at(xs, i), now, req->server_clock, &w);
            if (write_state(&s, &keys[req->tiers[i].key], &req->tiers[i], &w) < 0) {
                store_free(&s);
                return;
            }
        }
    }
    store_free(&s);
}

/* module.c's one_request(), with exactly the sizes the header promises
 * (the tiers' array zeroed, as it says), every tier released after. */
static void one_request(const struct module_arg *keys, size_t nk, const struct module_arg *argv,
                        size_t na)
{
    char err[MODULE_ERR_BUF];
    struct module_request req;
    req.checks = malloc((na / 2) * sizeof *req.checks + 1);
    req.tiers = malloc(nk * sizeof *req.tiers + 1);
    void *xs = calloc(1, nk * redis_state_tier_size() + 1);
    int *allowed = malloc((na / 2) * sizeof *allowed + 1);
    if (!req.checks || !req.tiers || !xs || !allowed)
        abort();
    if (module_args_request(argv, na, nk, &req, err, sizeof err) < 0) {
        check_refusal(err, sizeof err);
    } else {
        check_request(&req, argv, na, nk);
        decide(&req, keys, nk, argv, na, xs, allowed);
    }
    for (size_t i = 0; i < nk; i++)
        redis_state_release(redis_state_tier_at(xs, i));
    free(allowed);
    free(xs);
    free(req.tiers);
    free(req.checks);
}

static void batch(const struct module_arg *keys, size_t nkeys, const struct module_arg *argv,
                  size_t na)
{
    char err[MODULE_ERR_BUF];
    size_t n;
    if (module_args_batch_count(argv, na, &n, err, sizeof err) < 0) {
        check_refusal(err, sizeof err);
        return;
    }
    if (n < 1 || 2 + 2 * n > na)
        abort();
    size_t *nk = malloc(2 * n * sizeof *nk), *nargs = nk + n;
    if (!nk)
        abort();
    if (module_args_batch_counts(argv, na, nkeys, n, nk, nargs, err, sizeof err) < 0) {
        check_refusal(err, sizeof err);
    } else {
        size_t ko = 0, ao = 2 + 2 * n;
        for (size_t r = 0; r < n; r++) {
            if (nk[r] > nkeys - ko || nargs[r] > na - ao)
                abort();
            one_request(keys + ko, nk[r], argv + ao, nargs[r]);
            ko += nk[r], ao += nargs[r];
        }
        if (ko != nkeys || ao != na)
            abort();
    }
    free(nk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct module_arg f[MAX_FIELDS]; /* scratch, rewritten per input */
    const char *p = (const char *)data, *end = p + size;
    size_t nf = 0;
    for (;;) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        if (nf == MAX_FIELDS)
            return 0;
        f[nf++] = (struct module_arg){p, (size_t)((bar ? bar : end) - p)};
        if (!bar)
            break;
        p = bar + 1;
    }
    /* numkeys as module.c's check_command reads it. */
    size_t numkeys = 0;
    if (f[0].len == 0 || f[0].len > 6)
        return 0;
    for (size_t i = 0; i < f[0].len; i++) {
        if (f[0].p[i] < '0' || f[0].p[i] > '9')
            return 0;
        numkeys = numkeys * 10 + (size_t)(f[0].p[i] - '0');
    }
    if (numkeys > nf - 1)
        return 0;
    const struct module_arg *keys = f + 1, *argv = f + 1 + numkeys;
    size_t na = nf - 1 - numkeys;
    if (na >= 1 && argv[0].len == 1 && argv[0].p[0] == 'B')
        batch(keys, numkeys, argv, na);
    else
        one_request(keys, numkeys, argv, na);
    return 0;
}
