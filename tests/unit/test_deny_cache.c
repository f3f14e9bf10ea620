/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_deny_cache.c: the local deny cache (deny_cache.c) and the hash it is
 * keyed with (siphash.c): hits and misses by cost, expiry at the exact
 * boundary, figures moved forward by elapsed time, the LRU bound and its
 * eviction order, clear, hostile keys, a changed number of tiers.
 */
#include <stdlib.h>
#include <string.h>

#include "core/deny_cache.h"
#include "lib/siphash.h"
#include "tap.h"

#define SEED 0x5eed

/* Two tiers: the first allowed, the second denying with a 5 s wait. */
static const struct tier_result denial[2] = {
    {.allowed = 1, .limit = 100, .remaining = 40, .reset_us = 3000000, .retry_us = 0},
    {.allowed = 0, .limit = 10, .remaining = 2, .reset_us = 8000000, .retry_us = 5000000},
};

static void put(struct deny_cache *dc, const char *key, int64_t cost, int64_t sent)
{
    deny_cache_put(dc, "login", key, strlen(key), cost, denial, 2, 5000000, sent);
}

static int get(struct deny_cache *dc, const char *key, int64_t cost, int64_t now)
{
    struct tier_result out[2];
    return deny_cache_get(dc, "login", key, strlen(key), cost, 2, now, out);
}

static void test_siphash(void)
{
    /* The reference vectors (SipHash paper, appendix A; vectors.h of the
     * reference code): key 00 01 .. 0f, messages 00 01 .. (n-1). */
    struct siphash_key k = {0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
    unsigned char msg[64];
    for (int i = 0; i < 64; i++)
        msg[i] = (unsigned char)i;
    ok(siphash24(&k, msg, 0) == 0x726fdb47dd0e0e31ULL, "siphash: empty message vector");
    ok(siphash24(&k, msg, 15) == 0xa129ca6149be45e5ULL, "siphash: 15-byte vector (the paper's)");
    struct siphash_key a = siphash_key_from_seed(1), b = siphash_key_from_seed(2);
    ok(a.k0 != b.k0 && a.k1 != b.k1 && a.k0 != a.k1, "siphash: seeds give distinct key halves");
    ok(siphash24(&a, "x", 1) != siphash24(&b, "x", 1), "siphash: the seed changes the hash");
}

static void test_cost(void)
{
    struct deny_cache *dc = deny_cache_new(10, SEED);
    ok(!get(dc, "alice", 3, 0), "cost: empty cache misses");
    put(dc, "alice", 3, 1000);
    is_int(deny_cache_size(dc), 1, "cost: one entry stored");
    ok(get(dc, "alice", 3, 2000), "cost: same cost hits");
    ok(get(dc, "alice", 1000, 2000), "cost: larger cost hits");
    ok(!get(dc, "alice", 2, 2000), "cost: smaller cost misses (it may pass)");
    is_int(deny_cache_size(dc), 1, "cost: a miss by cost keeps the entry");
    ok(!get(dc, "bob", 3, 2000), "cost: another key misses");
    struct tier_result out[2];
    ok(!deny_cache_get(dc, "signup", "alice", 5, 3, 2, 2000, out),
       "cost: same key under another policy misses");
    /* A denial at a lower cost replaces the entry: now cost 2 hits too. */
    put(dc, "alice", 2, 3000);
    is_int(deny_cache_size(dc), 1, "cost: a second denial replaces the entry");
    ok(get(dc, "alice", 2, 4000), "cost: the replacement's cost hits");
    deny_cache_free(dc);
}

static void test_expiry(void)
{
    struct deny_cache *dc = deny_cache_new(10, SEED);
    /* Sent at 1000 with a 5 s wait: denied while now < 5001000. */
    put(dc, "k", 1, 1000);
    ok(get(dc, "k", 1, 1000), "expiry: hit at the send time");
    ok(get(dc, "k", 1, 5000999), "expiry: hit 1 µs before the retry time");
    ok(!get(dc, "k", 1, 5001000), "expiry: miss exactly at the retry time");
    is_int(deny_cache_size(dc), 0, "expiry: the expired entry is freed");
    ok(!get(dc, "k", 1, 1000), "expiry: gone, even for an earlier clock reading");

    /* Nothing to cache without a positive finite wait. */
    deny_cache_put(dc, "login", "k", 1, 1, denial, 2, -1, 1000);
    deny_cache_put(dc, "login", "k", 1, 1, denial, 2, 0, 1000);
    deny_cache_put(dc, "login", "k", 1, 1, denial, 0, 5000000, 1000);
    is_int(deny_cache_size(dc), 0, "expiry: retry -1, retry 0 and 0 tiers are not stored");

    /* A wait near INT64_MAX must not wrap into the past. */
    deny_cache_put(dc, "login", "k", 1, 1, denial, 2, INT64_MAX - 10, 1000);
    ok(get(dc, "k", 1, INT64_MAX - 1), "expiry: a huge wait saturates instead of wrapping");
    deny_cache_free(dc);
}

static void test_figures(void)
{
    struct deny_cache *dc = deny_cache_new(10, SEED);
    struct tier_result in[3] = {
        {.allowed = 1, .limit = 100, .remaining = 40, .reset_us = 3000000, .delay_us = 700000},
        {.allowed = 0, .limit = 10, .remaining = 2, .reset_us = 8000000, .retry_us = 5000000},
        {.allowed = 0, .limit = 50, .remaining = 7, .reset_us = 900000, .retry_us = 600000},
    };
    struct tier_result out[3], canary = {.limit = -42};
    for (int i = 0; i < 3; i++)
        out[i] = canary;
    deny_cache_put(dc, "api", "key", 3, 4, in, 3, 5000000, 10000000);
    ok(!deny_cache_get(dc, "api", "key", 3, 1, 3, 10000000, out), "figures: miss by cost");
    is_int(out[0].limit, -42, "figures: a miss leaves out untouched");

    ok(deny_cache_get(dc, "api", "key", 3, 4, 3, 10000000, out), "figures: hit at elapsed 0");
    is_int(out[0].reset_us, 3000000, "figures: elapsed 0 keeps reset");
    is_int(out[1].retry_us, 5000000, "figures: elapsed 0 keeps retry");
    is_int(out[1].remaining, 0, "figures: a denying tier reports remaining 0");
    is_int(out[2].remaining, 0, "figures: every denying tier reports remaining 0");
    is_int(out[0].remaining, 40, "figures: an allowed tier keeps its remaining");

    /* Copies, not pointers: the caller's array may change after the put. */
    in[1].limit = 999;
    ok(deny_cache_get(dc, "api", "key", 3, 4, 3, 11000000, out), "figures: hit after 1 s");
    is_int(out[1].limit, 10, "figures: the results were copied at put");
    is_int(out[0].allowed, 1, "figures: allowed kept");
    is_int(out[1].allowed, 0, "figures: denied kept");
    is_int(out[0].limit, 100, "figures: limit kept");
    is_int(out[0].reset_us, 2000000, "figures: reset 3 s - 1 s");
    is_int(out[0].delay_us, 0, "figures: delay 0.7 s - 1 s floors at 0");
    is_int(out[0].retry_us, 0, "figures: an allowed tier's retry 0 stays 0");
    is_int(out[1].reset_us, 7000000, "figures: reset 8 s - 1 s");
    is_int(out[1].retry_us, 4000000, "figures: retry 5 s - 1 s");
    is_int(out[2].reset_us, 0, "figures: reset 0.9 s - 1 s floors at 0");
    is_int(out[2].retry_us, 1, "figures: a denying tier's retry floors at 1 µs");

    ok(deny_cache_get(dc, "api", "key", 3, 4, 3, 14999999, out), "figures: hit 1 µs before expiry");
    is_int(out[1].retry_us, 1, "figures: the binding retry is 1 µs at the last µs");

    /* A clock reading before the send counts as nothing elapsed. */
    ok(deny_cache_get(dc, "api", "key", 3, 4, 3, 9000000, out), "figures: earlier clock hits");
    is_int(out[1].retry_us, 5000000, "figures: earlier clock: nothing elapsed");
    deny_cache_free(dc);
}

static void test_ntiers(void)
{
    struct deny_cache *dc = deny_cache_new(10, SEED);
    struct tier_result out[3];
    put(dc, "k", 1, 0);
    ok(!deny_cache_get(dc, "login", "k", 1, 1, 3, 10, out), "ntiers: 3 asked, 2 stored: miss");
    is_int(deny_cache_size(dc), 0, "ntiers: the stale entry is freed");
    put(dc, "k", 1, 0);
    ok(!deny_cache_get(dc, "login", "k", 1, 1, 1, 10, out), "ntiers: 1 asked, 2 stored: miss");
    put(dc, "k", 1, 0);
    ok(deny_cache_get(dc, "login", "k", 1, 1, 2, 10, out), "ntiers: 2 asked, 2 stored: hit");
    deny_cache_free(dc);
}

static void test_lru(void)
{
    struct deny_cache *dc = deny_cache_new(3, SEED);
    put(dc, "a", 1, 0);
    put(dc, "b", 1, 0);
    put(dc, "c", 1, 0);
    is_int(deny_cache_size(dc), 3, "lru: three stored");
    ok(get(dc, "a", 1, 10), "lru: a used (now the newest; b the oldest)");
    put(dc, "d", 1, 0);
    is_int(deny_cache_size(dc), 3, "lru: the bound holds");
    ok(!get(dc, "b", 1, 10), "lru: b, the least recently used, was evicted");
    ok(get(dc, "a", 1, 10) && get(dc, "c", 1, 10) && get(dc, "d", 1, 10), "lru: a, c, d kept");
    /* Order now, oldest first: a c d. Replacing a makes it the newest. */
    put(dc, "a", 1, 0);
    put(dc, "e", 1, 0);
    ok(!get(dc, "c", 1, 10), "lru: c evicted after a was replaced");
    ok(get(dc, "a", 1, 10) && get(dc, "d", 1, 10) && get(dc, "e", 1, 10), "lru: a, d, e kept");
    deny_cache_free(dc);

    /* Many keys through a small cache, and a large one that must grow. */
    dc = deny_cache_new(100, SEED);
    char key[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "user-%d", i);
        put(dc, key, 1, 0);
    }
    is_int(deny_cache_size(dc), 100, "lru: 1000 puts, 100 kept");
    int kept = 0, old_kept = 0;
    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "user-%d", i);
        if (get(dc, key, 1, 10))
            *(i >= 900 ? &kept : &old_kept) += 1;
    }
    is_int(kept, 100, "lru: the last 100 keys are kept");
    is_int(old_kept, 0, "lru: none of the first 900 is");
    deny_cache_free(dc);

    dc = deny_cache_new(5000, SEED);
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "user-%d", i);
        put(dc, key, 1, 0);
    }
    kept = 0;
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "user-%d", i);
        kept += get(dc, key, 1, 10);
    }
    is_int(kept, 5000, "lru: 5000 keys found after the table grew");
    deny_cache_free(dc);
}

static void test_clear_and_disabled(void)
{
    struct deny_cache *dc = deny_cache_new(10, SEED);
    put(dc, "a", 1, 0);
    put(dc, "b", 1, 0);
    deny_cache_clear(dc);
    is_int(deny_cache_size(dc), 0, "clear: empty");
    ok(!get(dc, "a", 1, 10) && !get(dc, "b", 1, 10), "clear: nothing hits");
    put(dc, "a", 1, 0);
    ok(get(dc, "a", 1, 10), "clear: usable afterwards");
    deny_cache_free(dc);
    deny_cache_free(NULL);
    ok(1, "deny_cache_free(NULL) is a no-op");

    dc = deny_cache_new(0, SEED);
    put(dc, "a", 1, 0);
    is_int(deny_cache_size(dc), 0, "disabled: max_entries 0 stores nothing");
    ok(!get(dc, "a", 1, 10), "disabled: never hits");
    deny_cache_free(dc);
}

static void test_hostile_keys(void)
{
    struct deny_cache *dc = deny_cache_new(10, SEED);
    struct tier_result out[2];
    /* Keys that differ only after a NUL, or only in a trailing NUL. */
    deny_cache_put(dc, "login", "a\0b", 3, 1, denial, 2, 5000000, 0);
    ok(deny_cache_get(dc, "login", "a\0b", 3, 1, 2, 10, out), "nul: the same bytes hit");
    ok(!deny_cache_get(dc, "login", "a\0c", 3, 1, 2, 10, out), "nul: a byte after the NUL counts");
    ok(!deny_cache_get(dc, "login", "a", 1, 1, 2, 10, out), "nul: a prefix misses");
    ok(!deny_cache_get(dc, "login", "a\0b\0", 4, 1, 2, 10, out), "nul: a trailing NUL counts");
    /* (policy "a", key "b") and (policy "a\0b", ...) cannot be told apart
     * only if a policy name held a NUL, which names cannot; but ("ab", "")
     * and ("a", "b") must differ. */
    deny_cache_put(dc, "a", "b", 1, 1, denial, 2, 5000000, 0);
    ok(!deny_cache_get(dc, "ab", "", 0, 1, 2, 10, out), "nul: (a, b) is not (ab, \"\")");
    deny_cache_put(dc, "p", "", 0, 1, denial, 2, 5000000, 0);
    ok(deny_cache_get(dc, "p", "", 0, 1, 2, 10, out), "empty key: stored and found");

    size_t n = 1 << 20;
    char *big = malloc(n);
    memset(big, 'x', n);
    big[n / 2] = '\0';
    deny_cache_put(dc, "login", big, n, 1, denial, 2, 5000000, 0);
    ok(deny_cache_get(dc, "login", big, n, 1, 2, 10, out), "long: a 1 MiB key with a NUL hits");
    big[n - 1] = 'y';
    ok(!deny_cache_get(dc, "login", big, n, 1, 2, 10, out), "long: its last byte counts");
    free(big);
    deny_cache_free(dc);
}

static void test_del(void)
{
    struct deny_cache *dc = deny_cache_new(10, SEED);
    ok(!deny_cache_del(dc, "login", "alice", 5), "del: an empty cache holds nothing to delete");
    put(dc, "alice", 3, 1000);
    put(dc, "bob", 3, 1000);
    /* The same key bytes under another policy are another entry. */
    ok(!deny_cache_del(dc, "signup", "alice", 5), "del: another policy's key is not deleted");
    ok(!deny_cache_del(dc, "login", "alic", 4), "del: a prefix of the key is not deleted");
    is_int(deny_cache_size(dc), 2, "del: misses keep every entry");
    ok(deny_cache_del(dc, "login", "alice", 5), "del: the entry is deleted");
    ok(!get(dc, "alice", 3, 2000), "del: a deleted key no longer hits");
    ok(get(dc, "bob", 3, 2000), "del: the other key still hits");
    is_int(deny_cache_size(dc), 1, "del: one entry left");
    ok(!deny_cache_del(dc, "login", "alice", 5), "del: a second delete finds nothing");
    /* Keys with NUL bytes: exactly those bytes. */
    deny_cache_put(dc, "login", "a\0b", 3, 1, denial, 2, 5000000, 1000);
    ok(!deny_cache_del(dc, "login", "a", 1), "del: a key cut at its NUL is another key");
    ok(deny_cache_del(dc, "login", "a\0b", 3), "del: a key holding a NUL is deleted");
    deny_cache_free(dc);
}

int main(void)
{
    test_siphash();
    test_cost();
    test_expiry();
    test_figures();
    test_ntiers();
    test_lru();
    test_clear_and_disabled();
    test_hostile_keys();
    test_del();
    return tap_done();
}
