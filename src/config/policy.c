/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.c: what a valid tier is, the algorithms' names and shapes, the
 * per-key overrides and their lookup, and the encoding of Redis keys. No
 * I/O and no state.
 *
 * Parsing the policy file is config_policies.c's job; it hands each tier here to be
 * judged, so every numeric rule lives in this one file. Messages start with
 * the name of the offending field ("precision: ...") so that config_policies.c can
 * point at that field's line.
 */
#include "config/policy.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIMIT_MAX 1000000000LL
#define WINDOW_MIN_US 1000LL                    /* 1ms */
#define WINDOW_MAX_US (366LL * 86400 * 1000000) /* 366d */
#define EXACT_MAX (1LL << 53)                   /* largest exact integer in a Lua double */
#define MAX_BUCKETS 1000                        /* sliding_window_buckets: window/precision */
#define LOG_LIMIT_MAX 1000000                   /* sliding_window_log: sorted-set members */
#define CONCURRENCY_LIMIT_MAX 100000            /* concurrency: units held per key */

enum burst_rule {
    BURST_NONE,     /* burst must be 0 */
    BURST_CAPACITY, /* burst is the capacity; 0 means limit */
    BURST_QUEUE,    /* burst is a queue length; 0 means no queue */
};

/* What the Lua script multiplies, and so must stay within EXACT_MAX. */
enum product_rule {
    PRODUCT_NONE,
    PRODUCT_CAPACITY_WINDOW, /* capacity * window_us */
    PRODUCT_LIMIT_WINDOW,    /* limit * window_us */
};

/* One row per algorithm, indexed by enum algorithm: the only place that
 * says how the algorithms differ. */
static const struct algorithm_info {
    const char *name;
    int nkeys;
    enum burst_rule burst;
    int precision; /* 1: required, 0: forbidden */
    enum product_rule product;
    int64_t limit_max;
    int has_delay; /* allowed requests may be told to wait (delay_us) */
} algorithms[ALG__COUNT] = {
    [ALG_FIXED_WINDOW] = {"fixed_window", 1, BURST_NONE, 0, PRODUCT_NONE, LIMIT_MAX, 0},
    [ALG_SLIDING_WINDOW_LOG] = {"sliding_window_log", 2, BURST_NONE, 0, PRODUCT_NONE, LOG_LIMIT_MAX,
                                0},
    [ALG_SLIDING_WINDOW_COUNTER] = {"sliding_window_counter", 1, BURST_NONE, 0,
                                    PRODUCT_LIMIT_WINDOW, LIMIT_MAX, 0},
    [ALG_SLIDING_WINDOW_BUCKETS] = {"sliding_window_buckets", 1, BURST_NONE, 1, PRODUCT_NONE,
                                    LIMIT_MAX, 0},
    [ALG_TOKEN_BUCKET] = {"token_bucket", 1, BURST_CAPACITY, 0, PRODUCT_CAPACITY_WINDOW, LIMIT_MAX,
                          0},
    [ALG_GCRA] = {"gcra", 1, BURST_CAPACITY, 0, PRODUCT_CAPACITY_WINDOW, LIMIT_MAX, 0},
    [ALG_LEAKY_BUCKET] = {"leaky_bucket", 1, BURST_QUEUE, 0, PRODUCT_CAPACITY_WINDOW, LIMIT_MAX, 1},
    /* window_us is the lease timeout here (policy_tier_span_us); the limit
     * bounds the leases one key holds, each a sorted-set member. */
    [ALG_CONCURRENCY] = {"concurrency", 1, BURST_NONE, 0, PRODUCT_NONE, CONCURRENCY_LIMIT_MAX, 0},
};

static const struct algorithm_info *info(enum algorithm a)
{
    return (unsigned)a < ALG__COUNT ? &algorithms[a] : NULL;
}

/* Only a queue length has a 0 of its own (no queue): for the other burst
 * rules 0 is what "no burst" is stored as. */
int policy_burst_zero_meaningful(enum algorithm a)
{
    return info(a) != NULL && info(a)->burst == BURST_QUEUE;
}

const char *policy_algorithm_name(enum algorithm a)
{
    return info(a) ? info(a)->name : "unknown";
}

int policy_algorithm_from_name(const char *name, enum algorithm *out)
{
    int i;

    for (i = 0; name != NULL && i < ALG__COUNT; i++) {
        if (strcmp(name, algorithms[i].name) == 0) {
            *out = (enum algorithm)i;
            return 0;
        }
    }
    return -1;
}

int policy_algorithm_nkeys(enum algorithm a)
{
    return info(a) ? info(a)->nkeys : 0;
}

int policy_algorithm_has_delay(enum algorithm a)
{
    return info(a) ? info(a)->has_delay : 0;
}

/* What a report (POST /report) may do to each algorithm: 2 charge and give
 * back, 1 charge only, 0 (an algorithm without a row) nothing. A table of
 * its own beside `algorithms`: lua/<algorithm>.lua's `report` and
 * `refunds` and src/limiter/<algorithm>.c's report step say the same. */
static const int report_rule[ALG__COUNT] = {
    [ALG_FIXED_WINDOW] = 2,           [ALG_SLIDING_WINDOW_LOG] = 1,
    [ALG_SLIDING_WINDOW_COUNTER] = 1, [ALG_SLIDING_WINDOW_BUCKETS] = 1,
    [ALG_TOKEN_BUCKET] = 2,           [ALG_GCRA] = 2,
    [ALG_LEAKY_BUCKET] = 2,
};

int policy_algorithm_reports(enum algorithm a)
{
    return info(a) ? report_rule[a] >= 1 : 0;
}

int policy_algorithm_refunds(enum algorithm a)
{
    return info(a) ? report_rule[a] >= 2 : 0;
}

int64_t policy_tier_span_us(const struct tier *t)
{
    return t->algorithm == ALG_CONCURRENCY ? t->lease_timeout_us : t->window_us;
}

int policy_algorithm_leases(enum algorithm a)
{
    return a == ALG_FIXED_WINDOW || a == ALG_TOKEN_BUCKET || a == ALG_GCRA;
}

int policy_leases(const struct policy *p)
{
    for (size_t j = 0; j < p->ntiers; j++)
        if (!policy_algorithm_leases(p->tiers[j].algorithm))
            return 0;
    return p->ntiers > 0;
}

int policy_has_concurrency(const struct policy *p)
{
    for (size_t j = 0; j < p->ntiers; j++)
        if (p->tiers[j].algorithm == ALG_CONCURRENCY)
            return 1;
    return 0;
}

int policy_name_valid(const char *s)
{
    size_t n;

    for (n = 0; s != NULL && s[n] != '\0'; n++) {
        char c = s[n];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return n >= 1 && n <= POLICY_NAME_MAX;
}

int64_t policy_tier_capacity(const struct tier *t)
{
    switch (info(t->algorithm) ? info(t->algorithm)->burst : BURST_NONE) {
    case BURST_CAPACITY:
        return t->burst > 0 ? t->burst : t->limit;
    case BURST_QUEUE:
        return t->burst + 1;
    case BURST_NONE:
        break;
    }
    return t->limit;
}

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), -1)

/* The burst and precision rules of the tier's algorithm. */
static int check_shape(const struct tier *t, const struct algorithm_info *a, char *err,
                       size_t errlen)
{
    char p[UTIL_DURATION_BUF], w[UTIL_DURATION_BUF];

    if (a->burst == BURST_NONE && t->burst != 0)
        return FAIL("burst: not allowed for %s (only token_bucket, gcra and leaky_bucket take one)",
                    a->name);
    if (a->burst == BURST_CAPACITY && t->burst < 0)
        return FAIL("burst: must be at least 1, got %" PRId64, t->burst);
    if (a->burst == BURST_QUEUE && t->burst < 0)
        return FAIL("burst: must be at least 0, got %" PRId64, t->burst);
    /* Keeps capacity (burst + 1 for a queue) and the products below exact. */
    if (t->burst > EXACT_MAX)
        return FAIL("burst: must be at most 2^53, got %" PRId64, t->burst);

    if (!a->precision && t->precision_us != 0)
        return FAIL("precision: not allowed for %s (only sliding_window_buckets takes one)",
                    a->name);
    if (!a->precision)
        return 0;
    if (t->precision_us == 0)
        return FAIL("precision: required for %s", a->name);
    util_format_duration(t->precision_us, p, sizeof p);
    util_format_duration(t->window_us, w, sizeof w);
    if (t->precision_us < 0)
        return FAIL("precision: must be greater than zero, got %s", p);
    if (t->window_us % t->precision_us != 0)
        return FAIL("precision: %s does not divide window %s", p, w);
    if (t->window_us / t->precision_us > MAX_BUCKETS)
        return FAIL("precision: %s splits window %s into %" PRId64 " buckets (at most %d)", p, w,
                    t->window_us / t->precision_us, MAX_BUCKETS);
    return 0;
}

int64_t policy_tier_window_factor(const struct tier *t)
{
    switch (info(t->algorithm) ? info(t->algorithm)->product : PRODUCT_NONE) {
    case PRODUCT_CAPACITY_WINDOW:
        return policy_tier_capacity(t);
    case PRODUCT_LIMIT_WINDOW:
        return t->limit;
    case PRODUCT_NONE:
        break;
    }
    return 0;
}

int policy_tier_validate(const struct tier *t, char *err, size_t errlen)
{
    const struct algorithm_info *a = info(t->algorithm);
    char w[UTIL_DURATION_BUF];
    int64_t factor;
    const char *field, *what;

    if (a == NULL)
        return FAIL("algorithm: unknown algorithm %d", (int)t->algorithm);
    if (t->limit < 1 || t->limit > a->limit_max)
        return FAIL("limit: must be between 1 and %" PRId64 " for %s, got %" PRId64, a->limit_max,
                    a->name, t->limit);
    if (t->algorithm == ALG_CONCURRENCY) {
        if (t->window_us != 0)
            return FAIL("window: not allowed for concurrency (a lease lives lease_timeout)");
        if (t->lease_timeout_us == 0)
            return FAIL("lease_timeout: required for concurrency");
        if (t->lease_timeout_us < WINDOW_MIN_US || t->lease_timeout_us > WINDOW_MAX_US)
            return FAIL("lease_timeout: must be between 1ms and 366d, got %s",
                        util_format_duration(t->lease_timeout_us, w, sizeof w));
    } else if (t->lease_timeout_us != 0) {
        return FAIL("lease_timeout: not allowed for %s (only concurrency takes one)", a->name);
    } else if (t->window_us < WINDOW_MIN_US || t->window_us > WINDOW_MAX_US) {
        return FAIL("window: must be between 1ms and 366d, got %s",
                    util_format_duration(t->window_us, w, sizeof w));
    }
    if (check_shape(t, a, err, errlen) < 0)
        return -1;
    if (t->calendar.unit != CALENDAR_NONE && t->algorithm != ALG_FIXED_WINDOW)
        return FAIL("calendar: only fixed_window takes one, not %s", a->name);

    /* The scripts compute with these products in Lua doubles, which are only
     * exact up to 2^53. */
    factor = policy_tier_window_factor(t);
    if (factor == 0)
        return 0;
    what = a->product == PRODUCT_CAPACITY_WINDOW ? "capacity" : "limit";
    field = a->product == PRODUCT_CAPACITY_WINDOW && t->burst > 0 ? "burst" : "limit";
    if (factor > EXACT_MAX / t->window_us)
        return FAIL("%s: %s %" PRId64 " per %s is too large for exact arithmetic (%s times window "
                    "in microseconds must be at most 2^53)",
                    field, what, factor, util_format_duration(t->window_us, w, sizeof w), what);
    return 0;
}

/* ---- per-key overrides ---------------------------------------------------- */

struct override {
    char *text; /* owned; len bytes (no terminator is relied on) */
    size_t len;
    int is_prefix;
    size_t order;          /* its index in the order added, for messages */
    struct policy variant; /* only its tiers until policy_overrides_inherit */
};

/* The prefixes of one length: a run of the sorted array. */
struct prefix_run {
    size_t len, start, count;
};

/*
 * After policy_overrides_index, items holds the exact keys first, sorted
 * by (length, bytes) for a binary search, then the prefixes sorted by
 * length, longest first, then bytes: one run per length. A lookup tries
 * the exact keys, then each run whose length fits the key, longest first,
 * with a binary search of the key's first run.len bytes: O(log n) per
 * distinct prefix length, and the first hit is the longest prefix.
 */
struct policy_overrides {
    struct override *items;
    size_t n, cap;
    size_t nexact;
    struct prefix_run *runs; /* longest first */
    size_t nruns;
};

struct policy_overrides *policy_overrides_new(void)
{
    return xcalloc(1, sizeof(struct policy_overrides));
}

void policy_overrides_add(struct policy_overrides *o, int is_prefix, const char *text, size_t len,
                          const struct tier *tiers, size_t ntiers)
{
    struct override *it;

    if (ntiers == 0 || ntiers > POLICY_MAX_TIERS)
        abort(); /* config_policies.c validated the tiers: a broken invariant */
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 8;
        o->items = xrealloc(o->items, o->cap * sizeof *o->items);
    }
    it = &o->items[o->n];
    memset(it, 0, sizeof *it);
    it->text = xmalloc(len + 1);
    memcpy(it->text, text, len);
    it->text[len] = '\0';
    it->len = len;
    it->is_prefix = is_prefix != 0;
    it->order = o->n++;
    it->variant.ntiers = ntiers;
    memcpy(it->variant.tiers, tiers, ntiers * sizeof *tiers);
}

size_t policy_overrides_count(const struct policy_overrides *o)
{
    return o ? o->n : 0;
}

/* Two calendars alike: the same unit, zone (by name), anchor and week. */
static int calendar_equal(const struct calendar_spec *a, const struct calendar_spec *b)
{
    if (a->unit != b->unit)
        return 0;
    if (a->unit == CALENDAR_NONE)
        return 1;
    return strcmp(tzif_name(a->zone), tzif_name(b->zone)) == 0 && a->anchor_day == b->anchor_day &&
           a->week_start == b->week_start;
}

static int tiers_equal(const struct tier *a, const struct tier *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(a[i].name, b[i].name) != 0 || a[i].algorithm != b[i].algorithm ||
            a[i].limit != b[i].limit || a[i].window_us != b[i].window_us ||
            a[i].burst != b[i].burst || a[i].precision_us != b[i].precision_us ||
            a[i].lease_timeout_us != b[i].lease_timeout_us ||
            !calendar_equal(&a[i].calendar, &b[i].calendar))
            return 0;
    return 1;
}

/* Field by field: the structs hold arrays with bytes past their strings'
 * ends, which memcmp would read. Overrides are compared in their indexed
 * (sorted) order, so two files listing them differently are equal. */
int policy_equal(const struct policy *a, const struct policy *b)
{
    if (strcmp(a->name, b->name) != 0 || a->failure_mode != b->failure_mode ||
        a->shadow != b->shadow || a->deny_cache != b->deny_cache || a->lease != b->lease ||
        a->headers != b->headers || strcmp(a->key.source, b->key.source) != 0 ||
        a->missing_key != b->missing_key || a->deny_status != b->deny_status ||
        a->ntiers != b->ntiers || !tiers_equal(a->tiers, b->tiers, a->ntiers))
        return 0;
    size_t n = policy_overrides_count(a->overrides);
    if (n != policy_overrides_count(b->overrides))
        return 0;
    for (size_t i = 0; i < n; i++) {
        const struct override *x = &a->overrides->items[i], *y = &b->overrides->items[i];
        if (x->len != y->len || x->is_prefix != y->is_prefix || memcmp(x->text, y->text, x->len) ||
            x->variant.ntiers != y->variant.ntiers ||
            !tiers_equal(x->variant.tiers, y->variant.tiers, x->variant.ntiers))
            return 0;
    }
    return 1;
}

void policy_overrides_free(struct policy_overrides *o)
{
    size_t i;

    if (o == NULL)
        return;
    for (i = 0; i < o->n; i++)
        free(o->items[i].text);
    free(o->items);
    free(o->runs);
    free(o);
}

int policy_may_lease(const struct policy *p)
{
    if (policy_has_concurrency(p))
        return 1;
    for (size_t i = 0; i < policy_overrides_count(p->overrides); i++)
        if (policy_has_concurrency(&p->overrides->items[i].variant))
            return 1;
    return 0;
}

/* Exact keys by (length, bytes); prefixes, after them, by (length
 * descending, bytes); equal texts by the order added. */
static int override_cmp(const void *a, const void *b)
{
    const struct override *x = a, *y = b;
    int c;

    if (x->is_prefix != y->is_prefix)
        return x->is_prefix - y->is_prefix;
    if (x->len != y->len)
        return (x->len < y->len) == !x->is_prefix ? -1 : 1;
    if ((c = memcmp(x->text, y->text, x->len)) != 0)
        return c;
    return (x->order > y->order) - (x->order < y->order);
}

static int same_match(const struct override *x, const struct override *y)
{
    return x->is_prefix == y->is_prefix && x->len == y->len &&
           memcmp(x->text, y->text, x->len) == 0;
}

/* The first ambiguity in the order added: the equal pair whose later
 * member came earliest. Sorting put equal texts side by side, each group
 * in the order added. Returns 0 if there is none. */
static int find_duplicate(const struct policy_overrides *o, size_t *first, size_t *second)
{
    size_t i, group = 0;
    int found = 0;

    for (i = 1; i < o->n; i++) {
        if (!same_match(&o->items[group], &o->items[i])) {
            group = i;
            continue;
        }
        if (i == group + 1 && (!found || o->items[i].order < *second)) {
            *first = o->items[group].order;
            *second = o->items[i].order;
            found = 1;
        }
    }
    return found;
}

/* A variant is p with the override's tiers: every per-policy setting,
 * present or added later, follows p without being listed here. */
static void make_variant(struct policy *v, const struct policy *p)
{
    struct tier tiers[POLICY_MAX_TIERS];
    size_t n = v->ntiers;

    memcpy(tiers, v->tiers, n * sizeof tiers[0]);
    *v = *p;
    memset(v->tiers, 0, sizeof v->tiers);
    memcpy(v->tiers, tiers, n * sizeof tiers[0]);
    v->ntiers = n;
    v->overrides = NULL;
}

int policy_overrides_index(struct policy_overrides *o, size_t *first, size_t *second)
{
    size_t i;

    if (o == NULL)
        return 0;
    qsort(o->items, o->n, sizeof *o->items, override_cmp);
    if (find_duplicate(o, first, second))
        return -1;
    for (o->nexact = 0; o->nexact < o->n && !o->items[o->nexact].is_prefix; o->nexact++)
        ;
    free(o->runs);
    o->runs = xcalloc(o->n - o->nexact + 1, sizeof *o->runs);
    o->nruns = 0;
    for (i = o->nexact; i < o->n; i++) {
        if (o->nruns == 0 || o->runs[o->nruns - 1].len != o->items[i].len)
            o->runs[o->nruns++] = (struct prefix_run){o->items[i].len, i, 0};
        o->runs[o->nruns - 1].count++;
    }
    return 0;
}

void policy_overrides_inherit(const struct policy *p)
{
    size_t i;

    for (i = 0; p->overrides != NULL && i < p->overrides->n; i++)
        make_variant(&p->overrides->items[i].variant, p);
}

/* The item among items[lo, hi), sorted by (length, bytes), that is len
 * bytes long and whose bytes equal key's first len; NULL if none. Every
 * item of a prefix run has the same length, so one search serves both. */
static const struct override *search(const struct override *items, size_t lo, size_t hi,
                                     const char *key, size_t len)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct override *m = &items[mid];
        int c = len != m->len ? (len < m->len ? -1 : 1) : memcmp(key, m->text, len);
        if (c == 0)
            return m;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

static const struct override *lookup(const struct policy_overrides *o, const char *key,
                                     size_t keylen)
{
    const struct override *hit = search(o->items, 0, o->nexact, key, keylen);
    size_t i;

    for (i = 0; hit == NULL && i < o->nruns; i++) {
        const struct prefix_run *r = &o->runs[i];
        if (r->len <= keylen)
            hit = search(o->items, r->start, r->start + r->count, key, r->len);
    }
    return hit;
}

const struct policy *policy_for_key(const struct policy *p, const char *key, size_t keylen)
{
    const struct override *hit;

    if (p->overrides == NULL)
        return p;
    hit = lookup(p->overrides, key, keylen);
    return hit ? &hit->variant : p;
}

/* Bytes that stand for themselves in an encoded key. Everything else,
 * notably '%' (the escape), '{' and '}' (the Cluster hash tag), the glob
 * characters * ? [ ] (KEYS and SCAN patterns), spaces, quotes, backslash,
 * control bytes and non-ASCII, becomes %XX. ':' is safe: the key is closed
 * by '}', which it can never contain. */
static int key_byte_safe(unsigned char c)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
        return 1;
    /* A switch, not strchr over the list: every byte of every key of every
     * check comes here (bench/instructions.py showed the strchr). */
    switch (c) {
    case '-':
    case '.':
    case '_':
    case '~':
    case ':':
    case '@':
    case '/':
    case '+':
    case '=':
    case ',':
    case '!':
    case ';':
        return 1;
    default:
        return 0;
    }
}

int policy_redis_key(const char *prefix, const char *policy, const char *key, size_t keylen,
                     const char *tier, const char *suffix, char *out, size_t outlen)
{
    static const char hex[] = "0123456789ABCDEF";
    const char *parts[] = {prefix, "{", policy, ":"};
    size_t n = 0, i;

#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (n + 1 >= outlen)                                                                       \
            return -1;                                                                             \
        out[n++] = (c);                                                                            \
    } while (0)
#define PUTS(s)                                                                                    \
    do {                                                                                           \
        const char *s_ = (s);                                                                      \
        while (*s_)                                                                                \
            PUT(*s_++);                                                                            \
    } while (0)

    for (i = 0; i < sizeof parts / sizeof parts[0]; i++)
        PUTS(parts[i]);
    for (i = 0; i < keylen; i++) {
        unsigned char c = (unsigned char)key[i];
        if (key_byte_safe(c)) {
            PUT((char)c);
        } else {
            PUT('%');
            PUT(hex[c >> 4]);
            PUT(hex[c & 15]);
        }
    }
    PUTS("}:");
    PUTS(tier);
    if (suffix != NULL) {
        PUT(':');
        PUTS(suffix);
    }
    out[n] = '\0';
    return (int)n;
#undef PUT
#undef PUTS
}

int policy_tier_key(const char *prefix, const char *policy, const char *key, size_t keylen,
                    const struct tier *t, int k, char *out, size_t outlen)
{
    static const char *const suffix[] = {NULL, "seq"};
    if (k < 0 || k >= policy_algorithm_nkeys(t->algorithm))
        return -1;
    return policy_redis_key(prefix, policy, key, keylen, t->name, suffix[k], out, outlen);
}
