/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy.c: algorithm names, name validation, capacities, the tier
 * rules of policy_tier_validate, the Redis key encoding (exact format,
 * buffer bounds, and injectivity over hostile keys), and per-key overrides
 * (policy_for_key against a brute-force reference).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "tap.h"

#define MS 1000LL
#define S (1000 * MS)
#define H (3600 * S)
#define D (24 * H)

static void test_algorithms(void)
{
    static const struct {
        enum algorithm a;
        const char *name;
        int nkeys;
        int has_delay;
    } algs[] = {
        {ALG_FIXED_WINDOW, "fixed_window", 1, 0},
        {ALG_SLIDING_WINDOW_LOG, "sliding_window_log", 2, 0},
        {ALG_SLIDING_WINDOW_COUNTER, "sliding_window_counter", 1, 0},
        {ALG_SLIDING_WINDOW_BUCKETS, "sliding_window_buckets", 1, 0},
        {ALG_TOKEN_BUCKET, "token_bucket", 1, 0},
        {ALG_GCRA, "gcra", 1, 0},
        {ALG_LEAKY_BUCKET, "leaky_bucket", 1, 1},
        {ALG_CONCURRENCY, "concurrency", 1, 0},
    };
    static const char *const unknown[] = {"", "FIXED_WINDOW", "fixed_window ", "fixed",
                                          "token-bucket"};
    enum algorithm a;
    size_t i;

    is_int(sizeof algs / sizeof algs[0], ALG__COUNT, "every algorithm is tested");
    for (i = 0; i < sizeof algs / sizeof algs[0]; i++) {
        is_str(policy_algorithm_name(algs[i].a), algs[i].name, "name of algorithm %zu", i);
        a = ALG__COUNT;
        ok(policy_algorithm_from_name(algs[i].name, &a) == 0 && a == algs[i].a, "%s by name",
           algs[i].name);
        is_int(policy_algorithm_nkeys(algs[i].a), algs[i].nkeys, "%s uses %d keys", algs[i].name,
               algs[i].nkeys);
        is_int(policy_algorithm_has_delay(algs[i].a), algs[i].has_delay, "%s has_delay %d",
               algs[i].name, algs[i].has_delay);
    }
    for (i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        is_int(policy_algorithm_from_name(unknown[i], &a), -1, "\"%s\" is no algorithm",
               unknown[i]);
    is_int(policy_algorithm_from_name(NULL, &a), -1, "NULL is no algorithm");
}

static void test_names(void)
{
    static const struct {
        const char *s;
        int valid;
    } cases[] = {
        {"a", 1},
        {"login", 1},
        {"A-Z_a.z-0_9", 1},
        {"1234567890123456789012345678901234567890123456789012345678901234", 1},  /* 64 */
        {"12345678901234567890123456789012345678901234567890123456789012345", 0}, /* 65 */
        {"", 0},
        {"a b", 0},
        {"a:b", 0},
        {"a{b", 0},
        {"a}b", 0},
        {"a/b", 0},
        {"a*", 0},
        {"caf\xc3\xa9", 0},
        {"a\n", 0},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
        is_int(policy_name_valid(cases[i].s), cases[i].valid, "name case %zu is %s", i,
               cases[i].valid ? "valid" : "invalid");
    is_int(policy_name_valid(NULL), 0, "NULL is no name");
}

static void test_capacity(void)
{
    static const struct {
        enum algorithm a;
        int64_t limit, burst, want;
    } cases[] = {
        {ALG_TOKEN_BUCKET, 5, 0, 5},
        {ALG_TOKEN_BUCKET, 5, 10, 10},
        {ALG_GCRA, 7, 0, 7},
        {ALG_GCRA, 7, 3, 3},
        {ALG_LEAKY_BUCKET, 50, 0, 1},
        {ALG_LEAKY_BUCKET, 50, 20, 21},
        {ALG_FIXED_WINDOW, 100, 0, 100},
        {ALG_SLIDING_WINDOW_LOG, 9, 0, 9},
        {ALG_SLIDING_WINDOW_COUNTER, 9, 0, 9},
        {ALG_SLIDING_WINDOW_BUCKETS, 9, 0, 9},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tier t = {.algorithm = cases[i].a, .limit = cases[i].limit, .burst = cases[i].burst};
        is_int(policy_tier_capacity(&t), cases[i].want, "capacity of %s limit %lld burst %lld",
               policy_algorithm_name(cases[i].a), (long long)cases[i].limit,
               (long long)cases[i].burst);
    }
}

static void test_validate(void)
{
    /* 2^20 * 2^33 = 2^53 exactly: the largest product the scripts can use. */
    const int64_t cap = 1LL << 20, win = 1LL << 33;
    const struct {
        enum algorithm a;
        int64_t limit, window, burst, precision;
        const char *want; /* NULL: valid; else the message, or its start if it ends in '*' */
    } cases[] = {
        /* every algorithm, plainly valid */
        {ALG_FIXED_WINDOW, 100, 60 * S, 0, 0, NULL},
        {ALG_SLIDING_WINDOW_LOG, 100, H, 0, 0, NULL},
        {ALG_SLIDING_WINDOW_COUNTER, 100, H, 0, 0, NULL},
        {ALG_SLIDING_WINDOW_BUCKETS, 300, 60 * S, 0, S, NULL},
        {ALG_TOKEN_BUCKET, 5, S, 10, 0, NULL},
        {ALG_TOKEN_BUCKET, 5, S, 0, 0, NULL},
        {ALG_GCRA, 10, 60 * S, 3, 0, NULL},
        {ALG_LEAKY_BUCKET, 50, S, 20, 0, NULL},
        {ALG_LEAKY_BUCKET, 50, S, 0, 0, NULL},
        /* limit */
        {ALG_FIXED_WINDOW, 0, S, 0, 0,
         "limit: must be between 1 and 1000000000 for fixed_window, got 0"},
        {ALG_FIXED_WINDOW, -1, S, 0, 0, "limit: must be between 1 and 1000000000*"},
        {ALG_FIXED_WINDOW, 1000000000, S, 0, 0, NULL},
        {ALG_FIXED_WINDOW, 1000000001, S, 0, 0, "limit: must be between 1 and 1000000000*"},
        {ALG_SLIDING_WINDOW_LOG, 1000000, S, 0, 0, NULL},
        {ALG_SLIDING_WINDOW_LOG, 1000001, S, 0, 0,
         "limit: must be between 1 and 1000000 for sliding_window_log, got 1000001"},
        /* window */
        {ALG_FIXED_WINDOW, 1, MS, 0, 0, NULL},
        {ALG_FIXED_WINDOW, 1, MS - 1, 0, 0, "window: must be between 1ms and 366d, got 999us"},
        {ALG_FIXED_WINDOW, 1, 0, 0, 0, "window: must be between 1ms and 366d, got 0us"},
        {ALG_FIXED_WINDOW, 1, -S, 0, 0, "window: *"},
        {ALG_FIXED_WINDOW, 1, 366 * D, 0, 0, NULL},
        {ALG_FIXED_WINDOW, 1, 366 * D + MS, 0, 0,
         "window: must be between 1ms and 366d, got 31622400001ms"},
        /* burst */
        {ALG_FIXED_WINDOW, 10, S, 5, 0, "burst: not allowed for fixed_window*"},
        {ALG_SLIDING_WINDOW_LOG, 10, S, 5, 0, "burst: not allowed for sliding_window_log*"},
        {ALG_SLIDING_WINDOW_COUNTER, 10, S, 5, 0, "burst: not allowed*"},
        {ALG_SLIDING_WINDOW_BUCKETS, 10, S, 5, 100 * MS, "burst: not allowed*"},
        {ALG_FIXED_WINDOW, 10, S, -1, 0, "burst: not allowed*"},
        {ALG_TOKEN_BUCKET, 10, S, 1, 0, NULL},
        {ALG_TOKEN_BUCKET, 10, S, -1, 0, "burst: must be at least 1, got -1"},
        {ALG_GCRA, 10, S, -5, 0, "burst: must be at least 1, got -5"},
        {ALG_LEAKY_BUCKET, 10, S, -1, 0, "burst: must be at least 0, got -1"},
        {ALG_LEAKY_BUCKET, 10, MS, INT64_MAX, 0, "burst: must be at most 2^53*"},
        {ALG_TOKEN_BUCKET, 10, MS, INT64_MAX, 0, "burst: must be at most 2^53*"},
        /* precision */
        {ALG_FIXED_WINDOW, 10, 60 * S, 0, S, "precision: not allowed for fixed_window*"},
        {ALG_TOKEN_BUCKET, 10, 60 * S, 0, S, "precision: not allowed for token_bucket*"},
        {ALG_SLIDING_WINDOW_BUCKETS, 10, 60 * S, 0, 0,
         "precision: required for sliding_window_buckets"},
        {ALG_SLIDING_WINDOW_BUCKETS, 10, 60 * S, 0, -S,
         "precision: must be greater than zero, got -1s"},
        {ALG_SLIDING_WINDOW_BUCKETS, 10, 60 * S, 0, 7 * S,
         "precision: 7s does not divide window 1m"},
        {ALG_SLIDING_WINDOW_BUCKETS, 10, 60 * S, 0, 60 * S, NULL},
        {ALG_SLIDING_WINDOW_BUCKETS, 10, 60 * S, 0, 120 * S,
         "precision: 2m does not divide window 1m"},
        {ALG_SLIDING_WINDOW_BUCKETS, 10, 60 * S, 0, 60 * MS, NULL}, /* 1000 buckets */
        {ALG_SLIDING_WINDOW_BUCKETS, 10, 60 * S, 0, 50 * MS,
         "precision: 50ms splits window 1m into 1200 buckets (at most 1000)"},
        {ALG_SLIDING_WINDOW_BUCKETS, 10, 1001 * MS, 0, MS,
         "precision: 1ms splits window 1001ms into 1001 buckets*"},
        /* exact arithmetic in Lua doubles */
        {ALG_TOKEN_BUCKET, cap, win, 0, 0, NULL},
        {ALG_TOKEN_BUCKET, cap, win + 1, 0, 0,
         "limit: capacity 1048576 per 8589934593us is too large*"},
        {ALG_TOKEN_BUCKET, 1, win, cap, 0, NULL},
        {ALG_TOKEN_BUCKET, 1, win, cap + 1, 0,
         "burst: capacity 1048577 per 8589934592us is too large*"},
        {ALG_GCRA, 1000, 366 * D, 0, 0, "limit: capacity 1000 per 366d is too large*"},
        {ALG_GCRA, 100, 366 * D, 0, 0, NULL},
        {ALG_LEAKY_BUCKET, 1, win, cap - 1, 0, NULL},
        {ALG_LEAKY_BUCKET, 1, win, cap, 0,
         "burst: capacity 1048577 per 8589934592us is too large*"},
        {ALG_SLIDING_WINDOW_COUNTER, cap, win, 0, 0, NULL},
        {ALG_SLIDING_WINDOW_COUNTER, cap, win + 1, 0, 0,
         "limit: limit 1048576 per 8589934593us is too large for exact arithmetic (limit times*"},
        {ALG_FIXED_WINDOW, cap, win + 1, 0, 0, NULL}, /* no products in fixed_window */
        {ALG_SLIDING_WINDOW_LOG, 1000000, 366 * D, 0, 0, NULL},
        /* not an algorithm */
        {ALG__COUNT, 10, S, 0, 0, "algorithm: *"},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tier t = {.algorithm = cases[i].a,
                         .limit = cases[i].limit,
                         .window_us = cases[i].window,
                         .burst = cases[i].burst,
                         .precision_us = cases[i].precision};
        char err[RL_ERRLEN] = "";
        int rc = policy_tier_validate(&t, err, sizeof err);
        const char *want = cases[i].want;

        if (want == NULL) {
            if (!ok(rc == 0, "case %zu (%s) is valid", i, policy_algorithm_name(t.algorithm)))
                printf("#   %s\n", err);
        } else if (want[strlen(want) - 1] == '*') {
            if (!ok(rc == -1 && strncmp(err, want, strlen(want) - 1) == 0, "case %zu (%s): %s", i,
                    policy_algorithm_name(t.algorithm), want))
                printf("#   got %d \"%s\"\n", rc, err);
        } else {
            is_int(rc, -1, "case %zu (%s) is refused", i, policy_algorithm_name(t.algorithm));
            is_str(err, want, "case %zu message", i);
        }
    }
}

static void test_key_format(void)
{
    static const struct {
        const char *prefix, *policy, *key;
        size_t keylen;
        const char *tier, *suffix, *want;
    } cases[] = {
        {"rl:", "login", "alice", 5, "burst", NULL, "rl:{login:alice}:burst"},
        {"rl:", "login", "alice", 5, "hourly", "seq", "rl:{login:alice}:hourly:seq"},
        {"", "p", "k", 1, "t", NULL, "{p:k}:t"},
        {"rl:", "p", "", 0, "t", NULL, "rl:{p:}:t"},
        {"rl:", "p", "AZaz09-._~:@/+=,!;", 18, "t", NULL, "rl:{p:AZaz09-._~:@/+=,!;}:t"},
        {"rl:", "p", "{x}", 3, "t", NULL, "rl:{p:%7Bx%7D}:t"},
        {"rl:", "p", "%41", 3, "t", NULL, "rl:{p:%2541}:t"},
        {"rl:", "p", "a b", 3, "t", NULL, "rl:{p:a%20b}:t"},
        {"rl:", "p", "*?[]", 4, "t", NULL, "rl:{p:%2A%3F%5B%5D}:t"},
        {"rl:", "p", "\r\n", 2, "t", NULL, "rl:{p:%0D%0A}:t"},
        {"rl:", "p", "\"'\\`", 4, "t", NULL, "rl:{p:%22%27%5C%60}:t"},
        {"rl:", "p", "caf\xc3\xa9", 5, "t", NULL, "rl:{p:caf%C3%A9}:t"},
        {"rl:", "p", "a\0b", 3, "t", NULL, "rl:{p:a%00b}:t"},
        {"rl:", "p", "#$&^|<>()\x7f\xff", 11, "t", NULL,
         "rl:{p:%23%24%26%5E%7C%3C%3E%28%29%7F%FF}:t"},
        {"rl:", "p", "alice", 3, "t", NULL, "rl:{p:ali}:t"}, /* keylen, not strlen */
    };
    char out[POLICY_KEY_BUF];
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = policy_redis_key(cases[i].prefix, cases[i].policy, cases[i].key, cases[i].keylen,
                                 cases[i].tier, cases[i].suffix, out, sizeof out);
        is_str(n >= 0 ? out : NULL, cases[i].want, "key %zu", i);
        is_int(n, strlen(cases[i].want), "key %zu length", i);
    }
}

static int key_byte_safe(int c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c != 0 && strchr("-._~:@/+=,!;", c) != NULL);
}

/* Every byte value, alone: itself if in the safe set, %XX (upper case) if not. */
static void test_key_bytes(void)
{
    char out[64], want[64];
    int c, bad = 0;

    for (c = 0; c < 256; c++) {
        char k = (char)c;
        if (key_byte_safe(c))
            snprintf(want, sizeof want, "{p:%c}:t", c);
        else
            snprintf(want, sizeof want, "{p:%%%02X}:t", c);
        if (policy_redis_key("", "p", &k, 1, "t", NULL, out, sizeof out) < 0 ||
            strcmp(out, want) != 0) {
            printf("#   byte 0x%02x: got \"%s\", want \"%s\"\n", c, out, want);
            bad++;
        }
    }
    is_int(bad, 0, "each of the 256 bytes is encoded as specified");
}

static void test_key_bounds(void)
{
    char out[64], prefix[129], policy[65], tier[65], *key, *big;
    const char *want = "rl:{login:a%20b}:burst:seq";
    size_t len = strlen(want), size, j;
    int n, bad = 0;

    for (size = 0; size <= len + 1; size++) {
        memset(out, '#', sizeof out);
        n = policy_redis_key("rl:", "login", "a b", 3, "burst", "seq", out, size);
        if (size <= len ? n != -1 : (n != (int)len || strcmp(out, want) != 0))
            bad++, printf("#   size %zu: got %d\n", size, n);
        for (j = size; j < sizeof out; j++)
            if (out[j] != '#') {
                bad++, printf("#   size %zu: wrote past the end\n", size);
                break;
            }
    }
    is_int(bad, 0, "-1 when out is too small, never a byte past outlen");
    n = policy_redis_key("rl:", "login", "a b", 3, "burst", "seq", NULL, 0);
    is_int(n, -1, "outlen 0 with NULL out");

    /* The largest key the daemon accepts fits POLICY_KEY_BUF. */
    memset(prefix, 'r', 128), prefix[128] = '\0';
    memset(policy, 'p', 64), policy[64] = '\0';
    memset(tier, 't', 64), tier[64] = '\0';
    key = malloc(POLICY_KEY_MAX);
    big = malloc(POLICY_KEY_BUF);
    memset(key, 0xff, POLICY_KEY_MAX);
    n = policy_redis_key(prefix, policy, key, POLICY_KEY_MAX, tier, "seq", big, POLICY_KEY_BUF);
    is_int(n, 128 + 1 + 64 + 1 + 3 * POLICY_KEY_MAX + 2 + 64 + 4,
           "the largest key fits POLICY_KEY_BUF");
    free(big);
    free(key);
}

/* Reverses the encoding of the key part; -1 if it is not a well-formed
 * encoding (a '%' not followed by two upper-case hex digits, or an unsafe
 * byte left as is). */
static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Reverses the encoding of the key part; -1 if it is not a well-formed
 * encoding (a '%' not followed by two upper-case hex digits, or an unsafe
 * byte left as is). */
static int decode(const char *s, size_t n, char *out, size_t *outlen)
{
    size_t i, o = 0;

    for (i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n || hex_value(s[i + 1]) < 0 || hex_value(s[i + 2]) < 0)
                return -1;
            out[o++] = (char)(hex_value(s[i + 1]) << 4 | hex_value(s[i + 2]));
            i += 2;
        } else if (key_byte_safe((unsigned char)s[i])) {
            out[o++] = s[i];
        } else {
            return -1;
        }
    }
    *outlen = o;
    return 0;
}

struct made {
    char key[256];
};

static int made_cmp(const void *a, const void *b)
{
    return strcmp(((const struct made *)a)->key, ((const struct made *)b)->key);
}

/*
 * Hostile keys: braces, the prefix and whole Redis keys as a caller's key,
 * separators, an escape against its decoded form, globs, CRLF, NUL, UTF-8
 * and invalid UTF-8. Every (policy, key, tier, suffix) must give a distinct
 * Redis key whose hash tag is exactly {policy:encoded key}, and the encoded
 * key must decode back to the caller's key.
 */
static void test_key_injective(void)
{
    static const struct {
        const char *s;
        size_t len;
    } keys[] = {
        {"", 0},
        {"a", 1},
        {"A", 1},
        {"%41", 3},
        {"%2541", 5},
        {"%", 1},
        {"%%", 2},
        {"{", 1},
        {"}", 1},
        {"{a}", 3},
        {"}:t", 3},
        {"a}:t:seq", 8},
        {"rl:", 3},
        {"rl:{p:a}:t", 10},
        {"{p:a}", 5},
        {":", 1},
        {"::", 2},
        {"a:b", 3},
        {"a%3Ab", 5},
        {"*", 1},
        {"?", 1},
        {"[a]", 3},
        {"\r\n", 2},
        {"a\r\nb", 4},
        {" ", 1},
        {"\t", 1},
        {"caf\xc3\xa9", 5},
        {"cafe\xcc\x81", 6},
        {"\xff", 1},
        {"\xc3", 1},
        {"\0", 1},
        {"a\0", 2},
        {"a\0b", 3},
        {"\xe2\x80\xae", 3},
        {"p:a", 3},
        {"a:t", 3},
        {"%20", 3},
        {"%7B", 3},
    };
    static const char *const policies[] = {"p", "p.1", "rl"};
    static const char *const tiers[] = {"t", "seq", "t.1"};
    static const char *const suffixes[] = {NULL, "seq", "t"};
    const size_t nk = sizeof keys / sizeof keys[0], np = 3, nt = 3, ns = 3;
    struct made *all = calloc(np * nk * nt * ns, sizeof *all);
    size_t n = 0, i, j, k, s, dups = 0, badtag = 0, badenc = 0;

    for (i = 0; i < np; i++) {
        for (j = 0; j < nk; j++) {
            for (k = 0; k < nt; k++) {
                for (s = 0; s < ns; s++) {
                    char want_tag[128], dec[64];
                    const char *open, *close;
                    size_t plen = strlen(policies[i]), declen;
                    struct made *m = &all[n++];

                    if (policy_redis_key("rl:", policies[i], keys[j].s, keys[j].len, tiers[k],
                                         suffixes[s], m->key, sizeof m->key) < 0) {
                        badenc++;
                        continue;
                    }
                    /* Cluster hashes what lies between the first '{' and the
                     * first '}' after it. */
                    open = strchr(m->key, '{');
                    close = open ? strchr(open, '}') : NULL;
                    snprintf(want_tag, sizeof want_tag, "%s:", policies[i]);
                    if (open == NULL || close == NULL || open != m->key + 3 ||
                        strncmp(open + 1, want_tag, plen + 1) != 0 ||
                        strpbrk(close + 1, "{}") != NULL)
                        badtag++;
                    else if (decode(open + 2 + plen, (size_t)(close - open - 2 - plen), dec,
                                    &declen) < 0 ||
                             declen != keys[j].len || memcmp(dec, keys[j].s, declen) != 0)
                        badenc++;
                }
            }
        }
    }
    qsort(all, n, sizeof *all, made_cmp);
    for (i = 1; i < n; i++)
        if (strcmp(all[i].key, all[i - 1].key) == 0)
            dups++, printf("#   duplicate: %s\n", all[i].key);
    is_int(n, np * nk * nt * ns, "made every key");
    is_int(dups, 0, "%zu hostile combinations give %zu distinct Redis keys", n, n);
    is_int(badtag, 0, "each hash tag is exactly {policy:encoded key}");
    is_int(badenc, 0, "each encoded key decodes back to the caller's bytes");
    free(all);
}

/* ---- per-key overrides ---- */

/* A one-tier policy "p" whose tier's limit tells which override matched. */
static struct policy base_policy(void)
{
    struct policy p;
    memset(&p, 0, sizeof p);
    strcpy(p.name, "p");
    p.failure_mode = FAILURE_LOCAL;
    p.shadow = 1;
    p.deny_cache = 0;
    p.ntiers = 1;
    p.tiers[0] =
        (struct tier){.name = "t", .algorithm = ALG_FIXED_WINDOW, .limit = 1, .window_us = S};
    return p;
}

static void add(struct policy_overrides *o, int is_prefix, const char *text, size_t len,
                int64_t limit)
{
    struct tier t = {.name = "o", .algorithm = ALG_GCRA, .limit = limit, .window_us = S};
    policy_overrides_add(o, is_prefix, text, len, &t, 1);
}

static const struct lookup_case {
    const char *key;
    size_t len;
    int64_t want; /* the matched tier's limit; 1: the policy itself */
    const char *why;
} lookups[] = {
    {"tenant:acme", 11, 100, "an exact key beats every prefix"},
    {"tenant:acme2", 12, 20, "the longest prefix (tenant:a) beats a shorter one"},
    {"tenant:b", 8, 10, "a shorter prefix when the longer does not match"},
    {"tenant:", 7, 10, "a key equal to a prefix matches it"},
    {"tenant", 6, 1, "a key shorter than every prefix: the policy"},
    {"", 0, 1, "the empty key: the policy"},
    {"zzz", 3, 1, "no match: the policy"},
    {"vip:", 4, 60, "an exact key with the same text as a prefix wins"},
    {"vip:9", 5, 30, "and the prefix serves the longer keys"},
    {"a\0b", 3, 40, "an exact key with a NUL byte"},
    {"a", 1, 1, "its part before the NUL does not match"},
    {"a\0c", 3, 1, "nor another byte after the NUL"},
    {"a\0bc", 4, 1, "nor a longer key"},
    {"x\0y", 3, 50, "a prefix ending in a NUL byte"},
    {"x", 1, 1, "which a key without it does not match"},
};

static void test_override_lookup(void)
{
    struct policy p = base_policy(), plain = base_policy();
    size_t first = 99, second = 99;

    ok(policy_for_key(&plain, "tenant:acme", 11) == &plain, "no overrides: the policy itself");
    ok(policy_overrides_index(NULL, &first, &second) == 0, "indexing no overrides is a no-op");
    policy_overrides_inherit(&plain);

    p.overrides = policy_overrides_new();
    add(p.overrides, 1, "tenant:", 7, 10);
    add(p.overrides, 0, "tenant:acme", 11, 100);
    add(p.overrides, 1, "vip:", 4, 30);
    add(p.overrides, 1, "tenant:a", 8, 20);
    add(p.overrides, 0, "a\0b", 3, 40);
    add(p.overrides, 1, "x\0", 2, 50);
    add(p.overrides, 0, "vip:", 4, 60);
    is_int(policy_overrides_count(p.overrides), 7, "seven overrides added");
    if (!ok(policy_overrides_index(p.overrides, &first, &second) == 0,
            "a key and a prefix with the same text are not ambiguous"))
        return;
    /* Settings changed after the overrides were read reach the variants. */
    p.failure_mode = FAILURE_CLOSED;
    policy_overrides_inherit(&p);
    for (size_t i = 0; i < sizeof lookups / sizeof lookups[0]; i++) {
        const struct lookup_case *c = &lookups[i];
        is_int(policy_for_key(&p, c->key, c->len)->tiers[0].limit, c->want, "%s", c->why);
    }

    const struct policy *v = policy_for_key(&p, "tenant:acme", 11);
    ok(v != &p && strcmp(v->name, "p") == 0 && v->failure_mode == FAILURE_CLOSED && v->shadow &&
           !v->deny_cache && v->ntiers == 1 && strcmp(v->tiers[0].name, "o") == 0 &&
           v->tiers[0].algorithm == ALG_GCRA,
       "a variant: the policy's name and settings, the override's tiers");
    ok(v->overrides == NULL && policy_for_key(v, "vip:1", 5) == v,
       "a variant has no overrides of its own");
    policy_overrides_free(p.overrides);
    policy_overrides_free(NULL);
}

static void test_override_duplicates(void)
{
    struct policy p = base_policy();
    size_t first = 99, second = 99;

    p.overrides = policy_overrides_new();
    add(p.overrides, 1, "b", 1, 2);
    add(p.overrides, 0, "k", 1, 2);
    add(p.overrides, 1, "k", 1, 2);
    add(p.overrides, 1, "b", 1, 2);
    add(p.overrides, 0, "k", 1, 2);
    add(p.overrides, 1, "b", 1, 2);
    ok(policy_overrides_index(p.overrides, &first, &second) < 0, "a duplicate prefix is refused");
    ok(first == 0 && second == 3, "the first one in file order: 0 and 3 (got %zu and %zu)", first,
       second);
    policy_overrides_free(p.overrides);

    p.overrides = policy_overrides_new();
    add(p.overrides, 0, "a\0", 2, 2);
    add(p.overrides, 0, "a", 1, 2);
    add(p.overrides, 0, "a\0", 2, 2);
    ok(policy_overrides_index(p.overrides, &first, &second) < 0 && first == 0 && second == 2,
       "a duplicate key, NUL bytes and all");
    policy_overrides_free(p.overrides);
}

/* Many overrides of many lengths against the obvious linear search. */
static int64_t reference(char keys[][8], const size_t *lens, const int *prefix, size_t n,
                         const char *key, size_t keylen)
{
    int64_t best = 1;
    size_t best_len = 0;
    for (size_t i = 0; i < n; i++)
        if (!prefix[i] && lens[i] == keylen && memcmp(keys[i], key, keylen) == 0)
            return (int64_t)i + 2;
    for (size_t i = 0; i < n; i++)
        if (prefix[i] && lens[i] <= keylen && lens[i] > best_len &&
            memcmp(keys[i], key, lens[i]) == 0)
            best = (int64_t)i + 2, best_len = lens[i];
    return best;
}

static void test_override_reference(void)
{
    enum { N = 3000, LOOKUPS = 20000 };
    static char keys[N][8];
    static size_t lens[N];
    static int prefix[N];
    struct policy p = base_policy();
    size_t n = 0, first, second, bad = 0, matched = 0;
    uint32_t seed = 12345;
#define NEXT() (seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff)

    p.overrides = policy_overrides_new();
    while (n < N) {
        size_t len = 1 + NEXT() % 6, j;
        int is_prefix = NEXT() % 4 == 0;
        for (j = 0; j < len; j++)
            keys[n][j] = "ab\0:"[NEXT() % 4];
        /* Skip what would be a duplicate: ambiguity is tested above. */
        for (j = 0; j < n; j++)
            if (prefix[j] == is_prefix && lens[j] == len && memcmp(keys[j], keys[n], len) == 0)
                break;
        if (j < n)
            continue;
        lens[n] = len;
        prefix[n] = is_prefix;
        add(p.overrides, is_prefix, keys[n], len, (int64_t)n + 2);
        n++;
    }
    if (!ok(policy_overrides_index(p.overrides, &first, &second) == 0, "%d distinct overrides", N))
        return;
    policy_overrides_inherit(&p);
    for (int i = 0; i < LOOKUPS; i++) {
        char key[10];
        size_t len = NEXT() % 10;
        for (size_t j = 0; j < len; j++)
            key[j] = "ab\0:"[NEXT() % 4];
        int64_t want = reference(keys, lens, prefix, n, key, len);
        bad += policy_for_key(&p, key, len)->tiers[0].limit != want;
        matched += want != 1;
    }
#undef NEXT
    is_int(bad, 0, "%d random keys match as a linear search says (%zu matched one)", LOOKUPS,
           matched);
    policy_overrides_free(p.overrides);
}

int main(void)
{
    test_algorithms();
    test_names();
    test_capacity();
    test_validate();
    test_key_format();
    test_key_bytes();
    test_key_bounds();
    test_key_injective();
    test_override_lookup();
    test_override_duplicates();
    test_override_reference();
    return tap_done();
}
