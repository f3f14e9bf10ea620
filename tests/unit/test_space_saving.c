/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_space_saving.c: the Space-Saving sketch (lib/space_saving.h) against
 * an exact oracle: random streams (skewed and flat, weights 1 and 1..9),
 * every counter within its error bound of the true weight, every key heavier
 * than total / cap reported, the counts summing to the total; the text read
 * back as written; the merge of sketches fed parts of one stream, bounded
 * the same way; long keys named apart.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/space_saving.h"
#include "tap.h"

#define UNIVERSE 5000
#define CAP 64

static uint64_t rng = 88172645463325252ULL;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A Zipf(s) draw over [0, n) by inverting the cumulative weights. */
static size_t zipf_draw(const double *cdf, size_t n)
{
    double u = (double)(next_rand() >> 11) / 9007199254740992.0 * cdf[n - 1];
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t key_of(size_t k, char *out)
{
    return (size_t)snprintf(out, 32, "k%zu", k);
}

/* The oracle's number of an entry's key "k<n>". */
static size_t index_of(const struct space_saving_entry *e)
{
    char name[40];
    memcpy(name, e->key, e->len);
    name[e->len] = '\0';
    return strtoul(name + 1, NULL, 10);
}

/* Every counter's bound holds, every heavy key is there. Returns the
 * number of failures (reported once). */
static int check_bounds(const char *what, const struct space_saving_entry *e, size_t n,
                        const uint64_t *truth, uint64_t total, size_t cap)
{
    int bad = 0;
    char seen[UNIVERSE] = {0};
    for (size_t i = 0; i < n; i++) {
        uint64_t t = truth[index_of(&e[i])];
        seen[index_of(&e[i])] = 1;
        if (!(e[i].count >= t && e[i].count - e[i].err <= t)) {
            if (!bad)
                printf("# %s: %.*s count %llu err %llu true %llu\n", what, (int)e[i].len, e[i].key,
                       (unsigned long long)e[i].count, (unsigned long long)e[i].err,
                       (unsigned long long)t);
            bad++;
        }
    }
    for (size_t k = 0; k < UNIVERSE; k++)
        if (truth[k] * cap > total && !seen[k]) {
            if (!bad)
                printf("# %s: k%zu (true %llu > total/cap) missing\n", what, k,
                       (unsigned long long)truth[k]);
            bad++;
        }
    return bad;
}

static void one_stream(double s, uint64_t maxw, size_t len, size_t parts)
{
    static double cdf[UNIVERSE];
    double acc = 0;
    for (size_t k = 0; k < UNIVERSE; k++)
        cdf[k] = acc += s > 0 ? 1.0 / pow((double)(k + 1), s) : 1.0;
    uint64_t *truth = calloc(UNIVERSE, sizeof *truth);
    struct space_saving *sk[4];
    for (size_t i = 0; i < parts; i++)
        sk[i] = space_saving_new(CAP, 7 + i);
    uint64_t total = 0;
    for (size_t i = 0; i < len; i++) {
        size_t k = zipf_draw(cdf, UNIVERSE);
        uint64_t w = 1 + next_rand() % maxw;
        char name[32];
        space_saving_add(sk[next_rand() % parts], name, key_of(k, name), w);
        truth[k] += w;
        total += w;
    }
    char what[96];
    snprintf(what, sizeof what, "s=%.1f weights 1..%llu, %zu sketch(es)", s,
             (unsigned long long)maxw, parts);
    struct space_saving_summary sum[4];
    struct buf text[4];
    uint64_t counted = 0;
    for (size_t i = 0; i < parts; i++) {
        memset(&text[i], 0, sizeof text[i]);
        space_saving_write(sk[i], &text[i]);
        const char *p = text[i].data, *end = p + text[i].len;
        ok(space_saving_read(&p, end, &sum[i]) == 0 && p == end, "%s: sketch %zu read back", what,
           i);
        uint64_t in = 0;
        for (size_t j = 0; j < sum[i].n; j++)
            in += sum[i].e[j].count;
        counted += sum[i].total;
        is_int(in, sum[i].total, "%s: sketch %zu's counts sum to its total", what, i);
        if (parts == 1) {
            ok(check_bounds(what, sum[i].e, sum[i].n, truth, total, CAP) == 0,
               "%s: every count within its bound, every key over total/cap there", what);
            ok(sum[i].min == space_saving_min(sk[i]) && sum[i].min * CAP <= total,
               "%s: min %llu <= total/cap", what, (unsigned long long)sum[i].min);
        }
    }
    is_int(counted, total, "%s: totals add up", what);
    if (parts > 1) {
        struct space_saving_entry *m;
        size_t n = space_saving_merge(sum, parts, &m);
        ok(check_bounds(what, m, n, truth, total, CAP) == 0,
           "%s: merged, every count within its bound, every key over total/cap there", what);
        int sorted = 1;
        for (size_t i = 1; i < n; i++)
            sorted &= m[i - 1].count >= m[i].count;
        ok(sorted, "%s: merged counts sorted descending", what);
        free(m);
    }
    for (size_t i = 0; i < parts; i++) {
        free(sum[i].e);
        buf_free(&text[i]);
        space_saving_free(sk[i]);
    }
    free(truth);
}

static void long_keys(void)
{
    char a[200], b[200], na[SPACE_SAVING_KEY_MAX], nb[SPACE_SAVING_KEY_MAX];
    memset(a, 'x', sizeof a);
    memcpy(b, a, sizeof b);
    b[199] = 'y';
    size_t la = space_saving_name(a, sizeof a, na), lb = space_saving_name(b, sizeof b, nb);
    ok(la == SPACE_SAVING_KEY_MAX && lb == la && memcmp(na, nb, la) != 0 &&
           memcmp(na, a, SPACE_SAVING_KEY_MAX - 17) == 0 && na[SPACE_SAVING_KEY_MAX - 17] == '~',
       "keys over %d bytes: their head, '~' and a hash, two alike heads named apart",
       SPACE_SAVING_KEY_MAX);
    struct space_saving *s = space_saving_new(4, 1);
    space_saving_add(s, a, sizeof a, 3);
    space_saving_add(s, b, sizeof b, 2);
    struct space_saving_entry e[4];
    size_t n = space_saving_entries(s, e);
    ok(n == 2 && e[0].len == SPACE_SAVING_KEY_MAX, "two long keys, two counters");
    space_saving_clear(s);
    is_int(space_saving_entries(s, e) + space_saving_total(s), 0, "cleared: empty");
    space_saving_free(s);
    const char *bad[] = {"x", "1 0 1\n5 0 9 short\n", "1 0 1\n5 0 3 abcd", "1 0 2\n1 0 1 a\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct space_saving_summary sum;
        const char *p = bad[i];
        ok(space_saving_read(&p, p + strlen(p), &sum) < 0, "not a sketch (case %zu): refused", i);
    }
}

int main(void)
{
    one_stream(1.1, 1, 200000, 1);
    one_stream(1.1, 9, 200000, 1);
    one_stream(0.0, 1, 100000, 1);
    one_stream(0.8, 3, 200000, 1);
    one_stream(1.1, 1, 200000, 3);
    one_stream(0.8, 5, 200000, 4);
    one_stream(0.0, 1, 50000, 3);
    long_keys();
    printf("# a sketch of %d counters: %zu bytes\n", 256, space_saving_bytes(256));
    return tap_done();
}
