/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_module_args.c: libFuzzer harness for the Redis module's argument
 * decoder (module/module_args.c) and the decision it feeds
 * (limiter/redis_state.c), taken the way module.c takes them. The input
 * is one `ratelimitd.check` call as '|'-separated fields: numkeys, the
 * keys, then ARGV (a single request, or "B" and a batch). A key's bytes
 * are also its stored state, so hostile states meet hostile tiers: a
 * string tier's GET answers them, a sliding_window_buckets tier's HGETALL
 * reads them as "field,value,field,value". What a call writes (SET, or
 * HINCRBY, HDEL, PEXPIRE) is kept per key name for the rest of the call,
 * so that a report's second read, and a key two tiers name, see it.
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
 * and never HDELs the bucket it counts.
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
    if (pairs < 1 || req->nchecks != pairs - 1 || req->ntiers != nk)
        abort();
    /* mode: "0", "1", "2" (both) or "3" (a report, never decided) */
    if (argv[1].len != 1 || argv[1].p[0] < '0' || argv[1].p[0] > '3' ||
        req->dry_run != (argv[1].p[0] != '0') || req->both != (argv[1].p[0] == '2') ||
        req->report != (argv[1].p[0] == '3'))
        abort();
    if (req->server_clock != (argv[0].len == 0) ||
        (!req->server_clock && (req->now < 0 || req->now > EXACT_MAX)))
        abort();
    size_t next = 0;
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
            if (mt->key != i || !redis_state_supports(t->algorithm) || a.len != strlen(name) ||
                memcmp(a.p, name, a.len) != 0 || !word_is_int(nth_word(policy, w + 1), t->limit) ||
                !word_is_int(nth_word(policy, w + 3), t->burst) ||
                !word_is_int(nth_word(policy, w + 4), t->precision_us))
                abort();
            if (t->window_us < 1 || t->limit < 0 || t->burst < 0 || t->precision_us < 0 ||
                (t->limit == 0 && t->algorithm != ALG_FIXED_WINDOW))
                abort();
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
            int64_t cap = policy_tier_capacity(t);
            if ((t->limit > cap ? t->limit : cap) > EXACT_MAX / t->window_us)
                abort();
        }
        if (nth_word(policy, 1 + 5 * (chk->last - chk->first)).len != 0)
            abort(); /* a word the decoder did not take */
        next = chk->last;
    }
    if (next != nk)
        abort();
}

/* Redis, as far as one call sees it: each key (by name: two keys of the
 * same bytes are one) raw until written, then a string or a hash. A raw
 * key is the bytes of its name: a string of them to GET, or to HGETALL a
 * hash of "field,value,field,value" (an odd last word dropped, a field
 * again dropped, as a hash holds each once). */
enum kv_type { KV_RAW, KV_STRING, KV_HASH };

struct kv {
    struct module_arg name;
    enum kv_type type;
    char buf[REDIS_STATE_BUF];
    size_t len;
    struct redis_field *f; /* KV_HASH: n fields, each's bytes malloc'd */
    size_t n;
};

struct store {
    struct kv *kv;
    size_t n;
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

/* module.c's read_tier: -1 where it replies an error. */
static int read_tier(struct store *s, const struct module_arg *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now)
{
    struct kv *k = lookup(s, *key);
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_HASH) {
        if (k->type == KV_STRING)
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

/* module.c's write_state on the store, with the contract's checks of w;
 * -1 where Redis refuses a command. */
static int write_state(struct store *s, const struct module_arg *key, const struct module_tier *t,
                       const struct redis_write *w)
{
    struct kv *k = lookup(s, *key);
    if (w->ex.ms <= 0)
        abort(); /* SET and PEXPIRE take > 0 ms, PXAT an instant after 1970 */
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
    if (k->type == KV_STRING)
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
    for (size_t i = 0; i < req->ntiers; i++)
        redis_state_figures(redis_state_tier_at(xs, i), now, 0, fig);
}

/* module.c's decide(), on the store: pass 1's reads (stopping at an
 * error, as module.c replies it), the figures (consumed iff the request
 * and the tier's check allow; never a denied shadow check's, whose cost
 * may exceed its capacity, where cost * window may pass int64), those as
 * if denied for "2", and the writes of the checks that allowed (a denied
 * shadow check writes nothing) of an allowed call that is no dry run. */
static void decide(const struct module_request *req, const struct module_arg *keys, void *xs,
                   int *allowed)
{
    int64_t now = req->server_clock ? SERVER_TIME : req->now, fig[REDIS_STATE_FIGURES];
    struct store s = {calloc(req->ntiers + 1, sizeof *s.kv), 0};
    if (!s.kv)
        abort();
    if (req->report) {
        report(&s, keys, req, xs, now);
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
        decide(&req, keys, xs, allowed);
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
