/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_limiter_local.c: the in-memory algorithms, on chosen sequences whose
 * figures are worked out by hand from the rules in the lua/ files (window
 * boundaries, refill, cost 0, cost > capacity, dry run, shadow, multi-tier
 * and multi-check atomicity), and the store: LRU eviction at max_keys,
 * expiry (exact, lazy, incremental), an algorithm changing under a tier.
 * tests/integration/test_local_diff.py compares the same code with the
 * script itself on thousands of random requests.
 */
#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "limiter/limiter_local.h"
#include "tap.h"

#define SEC 1000000LL
#define MS 1000LL
/* A multiple of every window used below (1 min, 1 s, 250 ms...). */
#define T0 (1699999980LL * SEC)
#define PREFIX "rl:"

/* ----------------------------------------------------------------- helpers */

/* A policy of the given tiers, up to one with limit 0 (the end mark). */
static struct policy mkpol(const char *name, int shadow, const struct tier *tiers)
{
    struct policy p;
    memset(&p, 0, sizeof p);
    snprintf(p.name, sizeof p.name, "%s", name);
    p.shadow = shadow;
    for (size_t i = 0; tiers[i].limit > 0; i++) {
        p.ntiers = i + 1;
        char err[RL_ERRLEN];
        p.tiers[i] = tiers[i];
        if (policy_tier_validate(&p.tiers[i], err, sizeof err) < 0) {
            printf("Bail out! test tier %s.%s is invalid: %s\n", name, tiers[i].name, err);
            exit(1);
        }
    }
    return p;
}

#define TIERS(...) ((const struct tier[]){__VA_ARGS__, {.limit = 0}})

struct item {
    const struct policy *p;
    const char *key;
    int64_t cost;
};

static struct tier_result R[64];

/* The lease nonce of the requests run() makes (concurrency tiers). */
static const char *nonce = "";

/* Decides one request of n checks into R; returns request_allowed. */
static int run(struct local_store *s, int64_t now, int dry, size_t n, const struct item *items)
{
    struct check_item checks[8];
    struct check_request req = {.dry_run = dry, .nchecks = n, .checks = checks};
    snprintf(req.lease_nonce, sizeof req.lease_nonce, "%s", nonce);
    for (size_t i = 0; i < n; i++)
        checks[i] = (struct check_item){.policy = items[i].p,
                                        .key = (char *)items[i].key,
                                        .keylen = strlen(items[i].key),
                                        .cost = items[i].cost};
    memset(R, 0xAB, sizeof R); /* every field must be written */
    return local_decide(s, PREFIX, &req, now, R);
}

/* One check of one policy. */
static int one(struct local_store *s, const struct policy *p, const char *key, int64_t cost,
               int64_t now, int dry)
{
    struct item it = {p, key, cost};
    return run(s, now, dry, 1, &it);
}

/* One test point: every figure of a tier (retry -1 means cost_exceeds_limit). */
static void expect(const struct tier_result *r, int allowed, int64_t limit, int64_t remaining,
                   int64_t reset, int64_t retry, int64_t delay, const char *what)
{
    int exceeds = retry == -1;
    if (!ok(r->allowed == allowed && r->limit == limit && r->remaining == remaining &&
                r->reset_us == reset && r->retry_us == retry && r->delay_us == delay &&
                r->cost_exceeds_limit == exceeds,
            "%s", what))
        printf("#   got  allowed %d limit %lld remaining %lld reset %lld retry %lld delay %lld "
               "exceeds %d\n#   want allowed %d limit %lld remaining %lld reset %lld retry %lld "
               "delay %lld exceeds %d\n",
               r->allowed, (long long)r->limit, (long long)r->remaining, (long long)r->reset_us,
               (long long)r->retry_us, (long long)r->delay_us, r->cost_exceeds_limit, allowed,
               (long long)limit, (long long)remaining, (long long)reset, (long long)retry,
               (long long)delay, exceeds);
}

/* The store's expiry of one tier's key. */
static int64_t expiry(const struct local_store *s, const struct policy *p, const char *key,
                      size_t tier, int64_t now)
{
    char k[POLICY_KEY_BUF];
    int n =
        policy_redis_key(PREFIX, p->name, key, strlen(key), p->tiers[tier].name, NULL, k, sizeof k);
    return n < 0 ? -2 : local_store_expiry(s, k, (size_t)n, now);
}

/* ------------------------------------------------------------ algorithms */

static void test_fixed_window(void)
{
    struct policy p = mkpol(
        "fw", 0, TIERS({.name = "t", .algorithm = ALG_FIXED_WINDOW, .limit = 3, .window_us = SEC}));
    struct local_store *s = local_store_new(100, 1);

    is_int(one(s, &p, "k", 0, T0, 0), 1, "fixed_window: cost 0 on a fresh key is allowed");
    expect(&R[0], 1, 3, 3, 0, 0, 0, "fixed_window: cost 0, fresh: full, reset 0");
    is_int(local_store_size(s), 0, "fixed_window: cost 0 writes nothing");

    one(s, &p, "k", 1, T0, 0);
    expect(&R[0], 1, 3, 2, SEC, 0, 0, "fixed_window: first unit, reset at the window's end");
    is_int(expiry(s, &p, "k", 0, T0), T0 + 2 * SEC, "fixed_window: expires 1 s after the window");
    one(s, &p, "k", 2, T0 + 400 * MS, 0);
    expect(&R[0], 1, 3, 0, 600 * MS, 0, 0, "fixed_window: cost 2 fills the window");
    is_int(one(s, &p, "k", 1, T0 + 500 * MS, 0), 0, "fixed_window: full window denies");
    expect(&R[0], 0, 3, 0, 500 * MS, 500 * MS, 0, "fixed_window: retry at the window's end");
    one(s, &p, "k", 1, T0 + SEC - 1, 0);
    expect(&R[0], 0, 3, 0, 1, 1, 0, "fixed_window: 1 µs before the boundary: retry 1 µs");
    one(s, &p, "k", 3, T0 + SEC, 0);
    expect(&R[0], 1, 3, 0, SEC, 0, 0, "fixed_window: at the boundary the count starts over");
    one(s, &p, "k", 4, T0 + SEC, 0);
    expect(&R[0], 0, 3, 0, SEC, -1, 0, "fixed_window: cost > limit: cost_exceeds_limit, retry -1");
    one(s, &p, "k", 0, T0 + 1500 * MS, 0);
    expect(&R[0], 1, 3, 0, 500 * MS, 0, 0, "fixed_window: cost 0 on a full window is allowed");
    local_store_free(s);
}

static void test_sliding_window_log(void)
{
    struct policy p = mkpol(
        "log", 0,
        TIERS({.name = "t", .algorithm = ALG_SLIDING_WINDOW_LOG, .limit = 3, .window_us = SEC}));
    struct local_store *s = local_store_new(100, 2);

    one(s, &p, "k", 1, T0, 0);
    expect(&R[0], 1, 3, 2, SEC, 0, 0, "log: first unit");
    one(s, &p, "k", 2, T0 + 100 * MS, 0);
    expect(&R[0], 1, 3, 0, SEC, 0, 0, "log: cost 2, reset from the newest unit");
    one(s, &p, "k", 1, T0 + 200 * MS, 0);
    expect(&R[0], 0, 3, 0, 900 * MS, 800 * MS, 0,
           "log: denied until the oldest unit leaves the window");
    one(s, &p, "k", 1, T0 + SEC - 1, 0);
    expect(&R[0], 0, 3, 0, 100 * MS + 1, 1, 0, "log: 1 µs before the oldest leaves");
    one(s, &p, "k", 1, T0 + SEC, 0);
    expect(&R[0], 1, 3, 0, SEC, 0, 0,
           "log: a unit scored now - W has left (window is (now-W, now])");
    one(s, &p, "k", 2, T0 + SEC, 0);
    expect(&R[0], 0, 3, 0, SEC, 100 * MS, 0, "log: cost 2 waits for the 2nd oldest unit");
    one(s, &p, "k", 5, T0 + SEC, 0);
    expect(&R[0], 0, 3, 0, SEC, -1, 0, "log: cost > limit");
    is_int(expiry(s, &p, "k", 0, T0 + SEC), T0 + 3 * SEC, "log: expires W + 1 s after the newest");
    is_int(expiry(s, &p, "k", 0, T0 + 3 * SEC), T0 + 3 * SEC, "log: alive at its expiry");
    is_int(expiry(s, &p, "k", 0, T0 + 3 * SEC + 1), -1, "log: gone 1 µs later");

    /* A clock behind the one that wrote: members in the future count, and
     * reset runs from the newest of them. */
    one(s, &p, "b", 1, T0 + 500 * MS, 0);
    one(s, &p, "b", 1, T0 + 200 * MS, 0);
    expect(&R[0], 1, 3, 1, 1300 * MS, 0, 0, "log: clock behind: reset from a newer member");
    is_int(expiry(s, &p, "b", 0, T0), T0 + 2500 * MS,
           "log: clock behind: expiry from the newer member");
    one(s, &p, "b", 2, T0 + 300 * MS, 0);
    expect(&R[0], 0, 3, 1, 1200 * MS, 900 * MS, 0, "log: clock behind: retry from the oldest");
    local_store_free(s);
}

static void test_sliding_window_counter(void)
{
    struct policy p = mkpol(
        "swc", 0,
        TIERS(
            {.name = "t", .algorithm = ALG_SLIDING_WINDOW_COUNTER, .limit = 10, .window_us = SEC}));
    struct local_store *s = local_store_new(100, 3);

    one(s, &p, "k", 6, T0, 0);
    expect(&R[0], 1, 10, 4, 2 * SEC, 0, 0, "counter: reset at the end of the next window");
    is_int(expiry(s, &p, "k", 0, T0), T0 + 3 * SEC, "counter: expires 1 s after the next window");
    one(s, &p, "k", 5, T0 + 1250 * MS, 0);
    expect(&R[0], 1, 10, 0, 1750 * MS, 0, 0, "counter: 6 * 3/4 + 5 <= 10 is allowed");
    one(s, &p, "k", 1, T0 + 1500 * MS, 0);
    expect(&R[0], 1, 10, 1, 1500 * MS, 0, 0, "counter: 6 * 1/2 + 6 <= 10, remaining floor(1)");
    one(s, &p, "k", 2, T0 + 1500 * MS, 0);
    expect(&R[0], 0, 10, 1, 1500 * MS, 166667, 0,
           "counter: retry at the first µs the weighted previous window allows");
    one(s, &p, "k", 5, T0 + 1500 * MS, 0);
    expect(&R[0], 0, 10, 1, 1500 * MS, 666667, 0, "counter: retry in the next window");
    one(s, &p, "k", 2, T0 + 1666667, 0);
    is_int(R[0].allowed, 1, "counter: allowed exactly at retry");
    one(s, &p, "k", 0, T0 + 3 * SEC + 1, 0);
    expect(&R[0], 1, 10, 10, 0, 0, 0, "counter: two windows later everything has decayed");
    local_store_free(s);
}

static void test_sliding_window_buckets(void)
{
    struct policy p = mkpol("swb", 0,
                            TIERS({.name = "t",
                                   .algorithm = ALG_SLIDING_WINDOW_BUCKETS,
                                   .limit = 4,
                                   .window_us = SEC,
                                   .precision_us = 250 * MS}));
    struct local_store *s = local_store_new(100, 4);

    one(s, &p, "k", 2, T0, 0);
    expect(&R[0], 1, 4, 2, SEC, 0, 0, "buckets: reset when the bucket leaves");
    one(s, &p, "k", 2, T0 + 600 * MS, 0);
    expect(&R[0], 1, 4, 0, 900 * MS, 0, 0, "buckets: a second bucket");
    one(s, &p, "k", 1, T0 + 900 * MS, 0);
    expect(&R[0], 0, 4, 0, 600 * MS, 100 * MS, 0, "buckets: retry when the oldest bucket leaves");
    one(s, &p, "k", 3, T0 + 900 * MS, 0);
    expect(&R[0], 0, 4, 0, 600 * MS, 600 * MS, 0, "buckets: cost 3 waits for both buckets");
    one(s, &p, "k", 1, T0 + SEC, 0);
    expect(&R[0], 1, 4, 1, SEC, 0, 0, "buckets: at the boundary the oldest bucket has left");
    is_int(expiry(s, &p, "k", 0, T0 + SEC), T0 + 3 * SEC, "buckets: expiry from the newest");
    one(s, &p, "k", 9, T0 + SEC, 0);
    expect(&R[0], 0, 4, 1, SEC, -1, 0, "buckets: cost > limit");
    local_store_free(s);
}

static void test_token_bucket_and_gcra(void)
{
    for (int g = 0; g < 2; g++) {
        const char *name = g ? "gcra" : "token_bucket";
        enum algorithm a = g ? ALG_GCRA : ALG_TOKEN_BUCKET;
        struct policy p =
            mkpol(name, 0,
                  TIERS({.name = "t", .algorithm = a, .limit = 5, .window_us = SEC, .burst = 10}));
        struct local_store *s = local_store_new(100, 5);
        char what[128];
#define W(msg) (snprintf(what, sizeof what, "%s: %s", name, msg), what)
        one(s, &p, "k", 3, T0, 0);
        expect(&R[0], 1, 10, 7, 600 * MS, 0, 0, W("3 of 10 taken, full again in 3/5 s"));
        is_int(expiry(s, &p, "k", 0, T0), T0 + 1600 * MS, "%s", W("expires 1 s after full again"));
        one(s, &p, "k", 8, T0, 0);
        expect(&R[0], 0, 10, 7, 600 * MS, 200 * MS, 0, W("8 > 7 tokens: retry in 1/5 s"));
        one(s, &p, "k", 11, T0, 0);
        expect(&R[0], 0, 10, 7, 600 * MS, -1, 0, W("cost > burst"));
        one(s, &p, "k", 8, T0 + 200 * MS - 1, 0);
        is_int(R[0].allowed, 0, "%s", W("1 µs before retry: denied"));
        one(s, &p, "k", 1, T0 + 200 * MS, 1);
        expect(&R[0], 1, 10, 7, 600 * MS, 0, 0, W("dry run reports as if taken"));
        one(s, &p, "k", 8, T0 + 200 * MS, 0);
        expect(&R[0], 1, 10, 0, 2 * SEC, 0, 0, W("at retry: allowed (the dry run took nothing)"));
        one(s, &p, "k", 0, T0 + 100 * SEC, 0);
        expect(&R[0], 1, 10, 10, 0, 0, 0, W("long idle: full"));

        /* Exactly at refill: ceil((C*W - S) / limit) µs later the bucket is
         * full, not one unit over. */
        struct policy q = mkpol(
            name, 0, TIERS({.name = "q", .algorithm = a, .limit = 3, .window_us = MS, .burst = 1}));
        one(s, &q, "k", 1, T0, 0);
        expect(&R[0], 1, 1, 0, 334, 0, 0, W("1 of 1 taken: full in ceil(1000/3) µs"));
        one(s, &q, "k", 1, T0 + 333, 0);
        expect(&R[0], 0, 1, 0, 1, 1, 0, W("1 µs short of full: retry 1"));
        one(s, &q, "k", 1, T0 + 334, 0);
        expect(&R[0], 1, 1, 0, 334, 0, 0, W("exactly full: allowed, nothing carried over"));
        one(s, &q, "k", 1, T0 + 667, 0);
        expect(&R[0], 0, 1, 0, 1, 1, 0, W("again 1 µs short"));

        /* Large: capacity 10^6 over 1 h; a long idle must not overflow. */
        struct policy big =
            mkpol(name, 0,
                  TIERS({.name = "b", .algorithm = a, .limit = 1000000, .window_us = 3600 * SEC}));
        one(s, &big, "k", 1000000, T0, 0);
        expect(&R[0], 1, 1000000, 0, 3600 * SEC, 0, 0, W("10^6 taken at once"));
        one(s, &big, "k", 1, T0 + 3600, 0);
        expect(&R[0], 1, 1000000, 0, 3600 * SEC, 0, 0, W("one unit back per 3600 µs"));
        one(s, &big, "k", 1, T0 + 3600, 0);
        expect(&R[0], 0, 1000000, 0, 3600 * SEC, 3600, 0, W("the next in 3600 µs"));
        one(s, &big, "k", 0, T0 + 400LL * 86400 * SEC, 0);
        expect(&R[0], 1, 1000000, 1000000, 0, 0, 0, W("after 400 days: full"));
#undef W
        local_store_free(s);
    }
}

/* gcra and token_bucket: the same figures for the same random requests. */
static void test_gcra_equals_token_bucket(void)
{
    struct policy tb = mkpol("eq", 0,
                             TIERS({.name = "t",
                                    .algorithm = ALG_TOKEN_BUCKET,
                                    .limit = 7,
                                    .window_us = 3 * MS,
                                    .burst = 4}));
    struct policy gc = mkpol(
        "eq", 0,
        TIERS({.name = "g", .algorithm = ALG_GCRA, .limit = 7, .window_us = 3 * MS, .burst = 4}));
    struct local_store *s = local_store_new(100, 6);
    unsigned rng = 12345;
    int64_t now = T0;
    int same = 1, n;
    for (n = 0; n < 3000 && same; n++) {
        rng = rng * 1103515245u + 12345u;
        now += (rng >> 8) % 1200;
        int64_t cost = (rng >> 20) % 6;
        struct tier_result a;
        one(s, &tb, "k", cost, now, (rng >> 28) == 0);
        a = R[0];
        one(s, &gc, "k", cost, now, (rng >> 28) == 0);
        same = memcmp(&a, &R[0], sizeof a) == 0;
    }
    ok(same, "gcra == token_bucket on %d random requests", n);
    local_store_free(s);
}

static void test_leaky_bucket(void)
{
    struct policy p = mkpol("lb", 0,
                            TIERS({.name = "t",
                                   .algorithm = ALG_LEAKY_BUCKET,
                                   .limit = 10,
                                   .window_us = SEC,
                                   .burst = 3}));
    struct local_store *s = local_store_new(100, 7);
    one(s, &p, "k", 1, T0, 0);
    expect(&R[0], 1, 4, 3, 100 * MS, 0, 0, "leaky: the first passes at once");
    one(s, &p, "k", 1, T0, 0);
    expect(&R[0], 1, 4, 2, 200 * MS, 0, 100 * MS, "leaky: the next waits one interval");
    one(s, &p, "k", 2, T0, 0);
    expect(&R[0], 1, 4, 0, 400 * MS, 0, 300 * MS, "leaky: cost 2: its last unit waits 3 intervals");
    one(s, &p, "k", 1, T0, 0);
    expect(&R[0], 0, 4, 0, 400 * MS, 100 * MS, 0, "leaky: queue full: denied, no delay");
    one(s, &p, "k", 5, T0, 0);
    expect(&R[0], 0, 4, 0, 400 * MS, -1, 0, "leaky: cost > burst + 1");
    one(s, &p, "k", 1, T0 + 100 * MS, 0);
    expect(&R[0], 1, 4, 0, 400 * MS, 0, 300 * MS, "leaky: one left, one more may queue");
    one(s, &p, "k", 0, T0 + 100 * MS, 0);
    expect(&R[0], 1, 4, 0, 400 * MS, 0, 0, "leaky: cost 0 has no delay");
    local_store_free(s);
}

/* A clock far behind the one that wrote a gcra state: exact (the script,
 * in doubles, rounds here), and no overflow. */
static void test_gcra_clock_behind(void)
{
    struct policy p =
        mkpol("gb", 0,
              TIERS({.name = "t", .algorithm = ALG_GCRA, .limit = 1000000000, .window_us = SEC}));
    struct local_store *s = local_store_new(100, 8);
    one(s, &p, "k", 1, T0, 0);
    one(s, &p, "k", 1, T0 - 100 * SEC, 0);
    expect(&R[0], 0, 1000000000, 0, 100000001, 99000001, 0,
           "gcra: 100 s behind a limit of 10^9/s: exact figures");
    local_store_free(s);
}

/* --------------------------------------------------------------- requests */

static void test_dry_run(void)
{
    struct policy p = mkpol(
        "dry", 0,
        TIERS({.name = "a", .algorithm = ALG_FIXED_WINDOW, .limit = 2, .window_us = SEC},
              {.name = "b", .algorithm = ALG_SLIDING_WINDOW_LOG, .limit = 2, .window_us = SEC}));
    struct local_store *s = local_store_new(100, 9);
    is_int(one(s, &p, "k", 1, T0, 1), 1, "dry run: allowed");
    expect(&R[0], 1, 2, 1, SEC, 0, 0, "dry run: figures as if taken (fixed_window)");
    expect(&R[1], 1, 2, 1, SEC, 0, 0, "dry run: figures as if taken (log)");
    is_int(local_store_size(s), 0, "dry run: writes nothing");
    one(s, &p, "k", 2, T0, 0);
    one(s, &p, "k", 1, T0, 1);
    expect(&R[0], 0, 2, 0, SEC, SEC, 0, "dry run of a denied request: the same denial");
    local_store_free(s);
}

static void test_multi_tier_atomicity(void)
{
    struct policy p =
        mkpol("mt", 0,
              TIERS({.name = "fw", .algorithm = ALG_FIXED_WINDOW, .limit = 5, .window_us = SEC},
                    {.name = "tb",
                     .algorithm = ALG_TOKEN_BUCKET,
                     .limit = 1,
                     .window_us = SEC,
                     .burst = 2}));
    struct local_store *s = local_store_new(100, 10);
    one(s, &p, "k", 1, T0, 0);
    one(s, &p, "k", 1, T0, 0);
    is_int(one(s, &p, "k", 1, T0, 0), 0, "multi-tier: denied by the bucket");
    expect(&R[0], 1, 5, 3, SEC, 0, 0, "multi-tier: the allowing tier reports nothing taken");
    expect(&R[1], 0, 2, 0, 2 * SEC, SEC, 0, "multi-tier: the denying tier");
    one(s, &p, "k", 0, T0, 0);
    expect(&R[0], 1, 5, 3, SEC, 0, 0, "multi-tier: and the allowing tier took nothing");

    /* Two checks: one denies, the other takes nothing. */
    struct policy q = mkpol(
        "mc", 0,
        TIERS({.name = "t", .algorithm = ALG_SLIDING_WINDOW_LOG, .limit = 5, .window_us = SEC}));
    struct item both[] = {{&q, "x", 2}, {&p, "k", 1}};
    is_int(run(s, T0, 0, 2, both), 0, "multi-check: denied as a whole");
    expect(&R[0], 1, 5, 5, 0, 0, 0, "multi-check: the allowing check reports nothing taken");
    is_int(expiry(s, &q, "x", 0, T0), -1, "multi-check: and wrote nothing");
    struct item ok2[] = {{&q, "x", 2}, {&p, "k", 0}};
    is_int(run(s, T0, 0, 2, ok2), 1, "multi-check: allowed when all allow");
    expect(&R[0], 1, 5, 3, SEC, 0, 0, "multi-check: first check taken");
    expect(&R[1], 1, 5, 3, SEC, 0, 0, "multi-check: cost 0 check");
    local_store_free(s);
}

static void test_shadow(void)
{
    struct policy sh = mkpol(
        "sh", 1, TIERS({.name = "t", .algorithm = ALG_FIXED_WINDOW, .limit = 1, .window_us = SEC}));
    struct policy pl = mkpol(
        "pl", 0, TIERS({.name = "t", .algorithm = ALG_FIXED_WINDOW, .limit = 5, .window_us = SEC}));
    struct local_store *s = local_store_new(100, 11);
    struct item req[] = {{&pl, "k", 1}, {&sh, "k", 1}};
    is_int(run(s, T0, 0, 2, req), 1, "shadow: both allow");
    expect(&R[1], 1, 1, 0, SEC, 0, 0, "shadow: taken when it allows");
    is_int(run(s, T0, 0, 2, req), 1, "shadow: a denying shadow check does not deny");
    expect(&R[0], 1, 5, 3, SEC, 0, 0, "shadow: the real check is taken");
    expect(&R[1], 0, 1, 0, SEC, SEC, 0, "shadow: the shadow check reports its denial");
    struct item zero[] = {{&pl, "k", 0}, {&sh, "k", 0}};
    run(s, T0, 0, 2, zero);
    expect(&R[1], 1, 1, 0, SEC, 0, 0, "shadow: the denied shadow check took nothing");
    struct item big[] = {{&pl, "k", 4}, {&sh, "k2", 1}};
    is_int(run(s, T0, 0, 2, big), 0, "shadow: a denying real check denies");
    expect(&R[1], 1, 1, 1, 0, 0, 0, "shadow: then the shadow check is not taken either");
    is_int(expiry(s, &sh, "k2", 0, T0), -1, "shadow: nothing written for it");
    local_store_free(s);
}

/* ------------------------------------------------------------------ store */

static void test_lru_eviction(void)
{
    struct policy p = mkpol(
        "lru", 0,
        TIERS({.name = "t", .algorithm = ALG_FIXED_WINDOW, .limit = 1, .window_us = 60 * SEC}));
    struct local_store *s = local_store_new(3, 12);
    one(s, &p, "a", 1, T0, 0);
    one(s, &p, "b", 1, T0, 0);
    one(s, &p, "c", 1, T0, 0);
    is_int(local_store_size(s), 3, "lru: three keys");
    one(s, &p, "a", 0, T0, 0); /* a lookup is a use: b is now the oldest */
    one(s, &p, "d", 1, T0, 0);
    is_int(local_store_size(s), 3, "lru: never more than max_keys");
    is_int(one(s, &p, "a", 1, T0, 0), 0, "lru: a recently used key keeps its state");
    is_int(expiry(s, &p, "b", 0, T0), -1, "lru: the least recently used key was evicted");
    is_int(one(s, &p, "b", 1, T0, 0), 1, "lru: an evicted key starts over (allowed again)");
    is_int(one(s, &p, "d", 1, T0, 0), 0, "lru: the new key kept its state");
    is_int(expiry(s, &p, "c", 0, T0), -1, "lru: writing b evicted c, then the oldest");
    local_store_free(s);

    /* max_keys below one request's keys: its later tiers evict its own
     * earlier ones while committing; no harm beyond the lost state. */
    struct policy m = mkpol(
        "lru2", 0,
        TIERS({.name = "x", .algorithm = ALG_SLIDING_WINDOW_LOG, .limit = 3, .window_us = SEC},
              {.name = "y",
               .algorithm = ALG_SLIDING_WINDOW_BUCKETS,
               .limit = 3,
               .window_us = SEC,
               .precision_us = 100 * MS},
              {.name = "z", .algorithm = ALG_GCRA, .limit = 3, .window_us = SEC}));
    s = local_store_new(1, 13);
    for (int i = 0; i < 3; i++)
        is_int(one(s, &m, "k", 1, T0 + i, 0), 1, "lru: max_keys 1, 3 tiers: request %d", i);
    is_int(local_store_size(s), 1, "lru: max_keys 1 with a 3-tier policy holds 1");
    is_int(one(s, &m, "k", 1, T0 + 3, 0), 0, "lru: the last tier kept its state and denies");
    expect(&R[0], 1, 3, 3, 0, 0, 0, "lru: the earlier tiers' states were evicted");
    expect(&R[1], 1, 3, 3, 0, 0, 0, "lru: (both of them)");
    local_store_free(s);
}

static void test_expiry(void)
{
    struct policy p =
        mkpol("exp", 0,
              TIERS({.name = "t", .algorithm = ALG_FIXED_WINDOW, .limit = 1, .window_us = SEC}));
    struct local_store *s = local_store_new(1000, 14);
    one(s, &p, "k", 1, T0 + 999 * MS + 1, 0);
    /* window end 1 ms - 1 µs away: rounded up to 1 ms, plus 1 s */
    is_int(expiry(s, &p, "k", 0, T0), T0 + 999 * MS + 1 + 1001 * MS,
           "expiry: PEXPIRE's rounding up to the ms, plus 1 s");
    one(s, &p, "k", 1, T0 + 1999 * MS, 0);
    is_int(R[0].allowed, 1, "expiry: next window");
    int64_t e = expiry(s, &p, "k", 0, T0 + 1999 * MS);
    is_int(e, T0 + 1999 * MS + 1001 * MS, "expiry: set again by the write");
    one(s, &p, "k", 0, e, 0);
    is_int(local_store_size(s), 1, "expiry: alive at its expiry time");
    one(s, &p, "k", 0, e + 1, 0);
    is_int(local_store_size(s), 0, "expiry: freed when a lookup finds it expired");

    /* Incremental: expired keys nobody asks about are reclaimed. */
    char key[32];
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "k%d", i);
        one(s, &p, key, 1, T0, 0);
    }
    is_int(local_store_size(s), 300, "expiry: 300 keys");
    int calls = 0;
    while (local_store_size(s) > 0 && calls < 1000) {
        one(s, &p, "other", 0, T0 + 10 * SEC, 0);
        calls++;
    }
    is_int(local_store_size(s), 0, "expiry: all reclaimed by the sweep without lookups");
    ok(calls <= 512 / 4 + 1, "expiry: within one sweep of the table (%d calls)", calls);
    local_store_free(s);
}

static void test_algorithm_change(void)
{
    struct policy fw =
        mkpol("chg", 0,
              TIERS({.name = "t", .algorithm = ALG_FIXED_WINDOW, .limit = 1, .window_us = SEC}));
    struct policy tb =
        mkpol("chg", 0,
              TIERS({.name = "t", .algorithm = ALG_TOKEN_BUCKET, .limit = 1, .window_us = SEC}));
    struct policy gc =
        mkpol("chg", 0, TIERS({.name = "t", .algorithm = ALG_GCRA, .limit = 2, .window_us = SEC}));
    struct policy lb = mkpol("chg", 0,
                             TIERS({.name = "t",
                                    .algorithm = ALG_LEAKY_BUCKET,
                                    .limit = 2,
                                    .window_us = SEC,
                                    .burst = 1}));
    struct local_store *s = local_store_new(10, 15);
    one(s, &fw, "k", 1, T0, 0);
    is_int(one(s, &tb, "k", 1, T0, 0), 1, "reload: another algorithm's state reads as absent");
    is_int(one(s, &tb, "k", 1, T0, 0), 0, "reload: and is replaced on write");
    one(s, &gc, "k2", 1, T0, 0);
    one(s, &lb, "k2", 0, T0, 0);
    expect(&R[0], 1, 2, 1, 500 * MS, 0, 0, "reload: gcra -> leaky_bucket keeps the TAT");
    local_store_free(s);
}

static void test_hostile_keys(void)
{
    struct policy p =
        mkpol("host", 0,
              TIERS({.name = "t", .algorithm = ALG_FIXED_WINDOW, .limit = 1, .window_us = SEC}));
    static const char *const keys[] = {"a", "a}", "{a", "a%7D", "a:t", "a\r\n", "*", "A"};
    struct local_store *s = local_store_new(100, 16);
    int all = 1;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        all &= one(s, &p, keys[i], 1, T0, 0);
    ok(all, "distinct keys never share state, whatever bytes they hold");
    local_store_free(s);
    local_store_free(NULL);
    ok(1, "local_store_free(NULL) is a no-op");
}

/* -------------------------------------------------------------- reloads */

/* A tier of the algorithm per minute (buckets of 5 s; burst only where the
 * algorithm takes one). */
static struct tier reload_tier(enum algorithm a, int64_t limit, int64_t burst)
{
    int bucket = a == ALG_TOKEN_BUCKET || a == ALG_GCRA || a == ALG_LEAKY_BUCKET;
    struct tier t = {.algorithm = a,
                     .limit = limit,
                     .window_us = 60 * SEC,
                     .burst = bucket ? burst : 0,
                     .precision_us = a == ALG_SLIDING_WINDOW_BUCKETS ? 5 * SEC : 0};
    snprintf(t.name, sizeof t.name, "t");
    return t;
}

/* Is b no worse for the caller than a: allowed if a was, no less remaining
 * before the request, no longer retry (both denied) or delay (both allowed)? */
static int no_worse(const struct tier_result *a, const struct tier_result *b, int64_t cost)
{
    if (a->allowed && !b->allowed)
        return 0;
    if (b->remaining + b->allowed * cost < a->remaining + a->allowed * cost)
        return 0;
    if (!a->allowed && !b->allowed && !a->cost_exceeds_limit && !b->cost_exceeds_limit &&
        b->retry_us > a->retry_us)
        return 0;
    return !(a->allowed && b->allowed && b->delay_us > a->delay_us);
}

/* Cost-1 requests at start, start + step, ...: how many were allowed. */
static int greedy(struct local_store *s, const struct policy *p, const char *key, int64_t start,
                  int64_t step, int n)
{
    int allowed = 0;
    for (int i = 0; i < n; i++)
        allowed += one(s, p, key, 1, start + i * step, 0);
    return allowed;
}

/* As test_reload in tests/integration/test_scripts.py: 10/min burst 5,
 * used up by cost-1 requests 100 ms apart, settings changed 1.5 s in. */
static void test_reload(void)
{
    static const int64_t probes[] = {0,       1,        999,      2999999,      3000000, 5999999,
                                     6000000, 11000000, 29000000, 60000000 - 1, 60000001};
    static const struct {
        int64_t limit, burst;
    } raises[] = {{20, 5}, {20, 10}}, cuts[] = {{4, 5}, {4, 2}, {10, 2}};
    const int64_t r = T0 + 1500 * MS;

    for (int a = 0; a < ALG__COUNT; a++) {
        if (a == ALG_CONCURRENCY)
            continue; /* no window to change: test_concurrency */
        const char *name = policy_algorithm_name((enum algorithm)a);
        struct policy old = mkpol("r", 0, TIERS(reload_tier((enum algorithm)a, 10, 5)));
        for (size_t i = 0; i < sizeof raises / sizeof raises[0]; i++) {
            struct policy new = mkpol(
                "r", 0, TIERS(reload_tier((enum algorithm)a, raises[i].limit, raises[i].burst)));
            struct local_store *s = local_store_new(100, 1);
            for (int k = 0; k < 12; k++)
                one(s, &old, "k", 1, T0 + k * 100 * MS, 0);
            int bad = 0;
            for (size_t j = 0; j < sizeof probes / sizeof probes[0]; j++) {
                for (int64_t cost = 1; cost <= 2; cost++) {
                    one(s, &old, "k", cost, r + probes[j], 1);
                    struct tier_result before = R[0];
                    one(s, &new, "k", cost, r + probes[j], 1);
                    if (!no_worse(&before, &R[0], cost) && bad++ == 0)
                        printf("#   at reload + %lld us, cost %lld: retry %lld -> %lld, remaining "
                               "%lld -> %lld\n",
                               (long long)probes[j], (long long)cost, (long long)before.retry_us,
                               (long long)R[0].retry_us, (long long)before.remaining,
                               (long long)R[0].remaining);
                }
            }
            ok(bad == 0, "reload %s: limit 10 -> %lld, burst 5 -> %lld: no caller worse off", name,
               (long long)raises[i].limit, (long long)raises[i].burst);
            local_store_free(s);
        }
        for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            if (old.tiers[0].burst == 0 && cuts[i].limit == 10)
                continue; /* a burst cut, for an algorithm without one */
            struct policy new =
                mkpol("r", 0, TIERS(reload_tier((enum algorithm)a, cuts[i].limit, cuts[i].burst)));
            for (int partly = 3; partly <= 12; partly += 9) {
                struct local_store *s = local_store_new(100, 1);
                for (int k = 0; k < partly; k++)
                    one(s, &old, "k", 1, T0 + k * 100 * MS, 0);
                int got = greedy(s, &new, "k", r, 250 * MS, 480);
                int idle = greedy(s, &new, "idle", r, 250 * MS, 480);
                ok(got > 0 && got <= idle,
                   "reload %s: limit 10 -> %lld, burst 5 -> %lld, %d used: %d allowed in two "
                   "windows, %d on an idle key",
                   name, (long long)cuts[i].limit, (long long)cuts[i].burst, partly, got, idle);
                local_store_free(s);
            }
        }
    }

    /* The case reported: 10/min burst 5 used up, limit doubled. 5 taken by
     * 400 ms; at 1.5 s 0.25 token (4.5 s to go at 10/min); at 20/min the
     * 1.1 s since the last take refill 0.37 token: 1.7 s to go. */
    enum algorithm both[] = {ALG_TOKEN_BUCKET, ALG_GCRA};
    for (int i = 0; i < 2; i++) {
        struct policy old = mkpol("u", 0, TIERS(reload_tier(both[i], 10, 5)));
        struct policy new = mkpol("u", 0, TIERS(reload_tier(both[i], 20, 5)));
        struct local_store *s = local_store_new(100, 1);
        for (int k = 0; k < 12; k++)
            one(s, &old, "k", 1, T0 + k * 100 * MS, 0);
        one(s, &old, "k", 1, r, 1);
        expect(&R[0], 0, 5, 0, 28500000, 4500000, 0, "reload: 10/min burst 5 used up: retry 4.5 s");
        one(s, &new, "k", 1, r, 1);
        expect(&R[0], 0, 5, 0, 13700000, 1700000, 0,
               "reload: limit doubled: retry 1.7 s (token_bucket, then gcra)");
        local_store_free(s);
    }

    /* A change of window: 2 taken, 1 more 3 s later (2.5 tokens short),
     * window 1 min -> 2 min: 3 whole tokens short, so cost 1 leaves 4 short,
     * reset 4 * 12 s. */
    enum algorithm three[] = {ALG_TOKEN_BUCKET, ALG_GCRA, ALG_LEAKY_BUCKET};
    for (int i = 0; i < 3; i++) {
        struct tier longer = reload_tier(three[i], 10, 5);
        longer.window_us = 120 * SEC;
        struct policy old = mkpol("w", 0, TIERS(reload_tier(three[i], 10, 5)));
        struct policy new = mkpol("w", 0, TIERS(longer));
        struct local_store *s = local_store_new(100, 1);
        one(s, &old, "k", 2, T0, 0);
        one(s, &old, "k", 1, T0 + 3 * SEC, 0);
        one(s, &new, "k", 1, T0 + 3 * SEC, 1);
        int64_t cap = three[i] == ALG_LEAKY_BUCKET ? 6 : 5;
        expect(&R[0], 1, cap, cap - 4, 48 * SEC, 0, three[i] == ALG_LEAKY_BUCKET ? 36 * SEC : 0,
               "reload: window 1 min -> 2 min, 2.5 tokens short rounded to 3");
        local_store_free(s);
    }
}

/* A lease of the request whose nonce was n, holding units. */
static struct lease_ref ref(const struct policy *p, const char *key, int64_t units, const char *n,
                            int64_t timeout)
{
    struct lease_ref r = {.units = units, .timeout_us = timeout};
    snprintf(r.policy, sizeof r.policy, "%s", p->name);
    snprintf(r.tier, sizeof r.tier, "%s", p->tiers[0].name);
    snprintf(r.key, sizeof r.key, "%s", key);
    r.keylen = strlen(key);
    snprintf(r.nonce, sizeof r.nonce, "%s", n);
    return r;
}

/* As lua/concurrency.lua (test_scripts.py's test_concurrency, same times). */
static void test_concurrency(void)
{
    struct policy p = mkpol(
        "c", 0,
        TIERS({.name = "t", .algorithm = ALG_CONCURRENCY, .limit = 3, .lease_timeout_us = SEC}));
    struct local_store *s = local_store_new(100, 1);
    struct lease_outcome o[2];

    nonce = "AAAAAAAAAAAAAAAAAAAAAA";
    one(s, &p, "k", 1, T0, 0);
    expect(&R[0], 1, 3, 2, SEC, 0, 0, "concurrency: first lease, reset at its expiry");
    ok(R[0].now_us == T0, "the result carries the decider's now");
    nonce = "BBBBBBBBBBBBBBBBBBBBBB";
    one(s, &p, "k", 2, T0 + 100 * MS, 0);
    expect(&R[0], 1, 3, 0, SEC, 0, 0, "a cost of 2 holds two units; reset: the last expiry");
    nonce = "CCCCCCCCCCCCCCCCCCCCCC";
    one(s, &p, "k", 1, T0 + 200 * MS, 0);
    expect(&R[0], 0, 3, 0, 900 * MS, 800 * MS, 0, "full: retry when the earliest lease expires");
    one(s, &p, "k", 3, T0 + 200 * MS, 0);
    expect(&R[0], 0, 3, 0, 900 * MS, 900 * MS, 0, "cost 3: retry when both have expired");
    one(s, &p, "k", 4, T0 + 200 * MS, 0);
    expect(&R[0], 0, 3, 0, 900 * MS, -1, 0, "cost over the limit: never");

    struct lease_ref a = ref(&p, "k", 1, "AAAAAAAAAAAAAAAAAAAAAA", SEC);
    struct lease_ref forged = ref(&p, "k", 2, "AAAAAAAAAAAAAAAAAAAAAA", SEC);
    struct lease_ref two[] = {a, a};
    local_store_lease(s, PREFIX, 0, &forged, 1, T0 + 300 * MS, o);
    ok(o[0].status == LEASE_UNKNOWN, "another cost with the same nonce is unknown");
    local_store_lease(s, PREFIX, 0, two, 2, T0 + 300 * MS, o);
    ok(o[0].status == LEASE_DONE && o[1].status == LEASE_UNKNOWN,
       "release: freed once, then unknown (no double free)");
    one(s, &p, "k", 1, T0 + 300 * MS, 0);
    expect(&R[0], 1, 3, 0, SEC, 0, 0, "its unit is free again");

    struct lease_ref b = ref(&p, "k", 2, "BBBBBBBBBBBBBBBBBBBBBB", SEC);
    local_store_lease(s, PREFIX, 1, &b, 1, T0 + 500 * MS, o);
    ok(o[0].status == LEASE_DONE && o[0].expires_us == T0 + 1500 * MS,
       "renew: a lease timeout from now");
    one(s, &p, "k", 1, T0 + 1200 * MS, 0);
    expect(&R[0], 0, 3, 0, 300 * MS, 100 * MS, 0, "before the first lease expires: still full");
    one(s, &p, "k", 1, T0 + 1350 * MS, 0);
    expect(&R[0], 1, 3, 0, SEC, 0, 0, "the lease taken at 300 ms has expired; the renewed holds");
    local_store_lease(s, PREFIX, 0, &b, 1, T0 + 1600 * MS, o);
    ok(o[0].status == LEASE_EXPIRED, "release after expiry: expired, nothing freed");
    local_store_lease(s, PREFIX, 1, &b, 1, T0 + 1600 * MS, o);
    ok(o[0].status == LEASE_EXPIRED, "renew after expiry: expired, not renewed");
    ok(expiry(s, &p, "k", 0, T0 + 1400 * MS) == T0 + 4350 * MS,
       "the key lives a lease timeout past its last lease, plus slack");
    one(s, &p, "k", 1, T0 + 5 * SEC, 1);
    expect(&R[0], 1, 3, 2, SEC, 0, 0, "all expired: a dry run sees everything free");
    nonce = "";
    local_store_free(s);
}

int main(void)
{
    test_concurrency();
    test_fixed_window();
    test_sliding_window_log();
    test_sliding_window_counter();
    test_sliding_window_buckets();
    test_token_bucket_and_gcra();
    test_gcra_equals_token_bucket();
    test_leaky_bucket();
    test_gcra_clock_behind();
    test_dry_run();
    test_multi_tier_atomicity();
    test_shadow();
    test_lru_eviction();
    test_expiry();
    test_algorithm_change();
    test_hostile_keys();
    test_reload();
    return tap_done();
}
