/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store_file.c: the store's image (src/limiter/store_file.c): a store
 * holding every algorithm's state (a log of many runs, buckets, leases)
 * survives encode and decode byte for byte and decides the same; every
 * truncation and every flipped byte is refused and changes nothing; a
 * foreign version, and values no algorithm writes (a zero scale, unsorted
 * runs), are refused even under a good checksum; expired entries are
 * dropped; a store smaller than the image evicts as decisions do; the
 * atomic file write and read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/policy.h"
#include "limiter/limiter_local.h"
#include "limiter/store_file.h"
#include "store_policies.h"
#include "tap.h"

#define SEC 1000000LL
#define T0 (1699999980LL * SEC)
#define PREFIX "rl:"

static struct policy pols[ALG__COUNT];

/* One check of cost on policy a's key at now; the figures into *r. */
static int decide(struct local_store *s, int a, const char *key, int64_t cost, int64_t now, int dry,
                  struct tier_result *r)
{
    struct check_item c = {
        .policy = &pols[a], .key = (char *)key, .keylen = strlen(key), .cost = cost};
    struct check_request req = {.dry_run = dry, .nchecks = 1, .checks = &c};
    snprintf(req.lease_nonce, sizeof req.lease_nonce, "N%021lld", (long long)now);
    return local_decide(s, PREFIX, &req, now, r);
}

/* Every algorithm on three keys, spent at many distinct µs (the log's
 * runs, the buckets, one lease per call). */
static struct local_store *filled(void)
{
    struct local_store *s = local_store_new(1000, 1);
    struct tier_result r;
    for (int i = 0; i < 30; i++)
        for (int a = 0; a < ALG__COUNT; a++)
            for (int k = 0; k < 3; k++)
                decide(s, a, k == 0 ? "a" : k == 1 ? "b" : "c", 1 + k, T0 + i * 700000LL, 0, &r);
    return s;
}

/* The image of s at now; *n the entries in it (those written and live). */
static struct buf image_of(const struct local_store *s, int64_t now, size_t *n)
{
    struct buf b = {0};
    size_t got = store_file_encode(s, now, &b);
    if (n)
        *n = got;
    return b;
}

static void test_round_trip(void)
{
    struct local_store *s = filled();
    int64_t now = T0 + 30 * SEC;
    size_t n;
    struct buf a = image_of(s, now, &n);
    struct local_store *t = local_store_new(1000, 99);
    struct store_file_counts c;
    char err[RL_ERRLEN] = "";
    is_int(store_file_decode(t, a.data, a.len, now, &c, err, sizeof err), 0, "decodes: %s", err);
    ok(c.loaded == n && n >= 3 * ALG__COUNT - 3, "every entry loaded (%zu)", n);
    struct buf b = image_of(t, now, NULL);
    ok(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
       "re-encoded byte for byte (every field of every kind, the LRU order)");
    int same = 1;
    for (int a2 = 0; a2 < ALG__COUNT; a2++) {
        struct tier_result x, y;
        decide(s, a2, "b", 3, now + SEC, 0, &x);
        decide(t, a2, "b", 3, now + SEC, 0, &y);
        same &= x.allowed == y.allowed && x.remaining == y.remaining && x.reset_us == y.reset_us &&
                x.retry_us == y.retry_us;
    }
    ok(same, "every algorithm decides the same on the loaded store");
    buf_free(&a), buf_free(&b);
    local_store_free(s), local_store_free(t);
}

static void test_damage(void)
{
    struct local_store *s = filled();
    struct buf a = image_of(s, T0 + 30 * SEC, NULL);
    struct local_store *t = local_store_new(1000, 1);
    struct store_file_counts c;
    char err[RL_ERRLEN];
    int refused = 0;
    for (size_t n = 0; n < a.len; n++)
        refused += store_file_decode(t, a.data, n, T0, &c, err, sizeof err) < 0;
    is_int(refused, a.len, "every truncation refused (%zu)", a.len);
    refused = 0;
    for (size_t i = 0; i < a.len; i++) {
        a.data[i] ^= 0x10;
        refused += store_file_decode(t, a.data, a.len, T0, &c, err, sizeof err) < 0;
        a.data[i] ^= 0x10;
    }
    is_int(refused, a.len, "every flipped byte refused");
    is_int(local_store_size(t), 0, "and the store left empty");
    buf_free(&a);
    local_store_free(s), local_store_free(t);
}

/* An image of one entry under key "k" whose state is the n bytes of
 * state, with a good checksum, of the given version. */
static struct buf forged(unsigned version, int kind, const void *state, size_t n)
{
    struct buf b = {0};
    buf_append(&b, "RLDSTATE", 8);
    unsigned char hdr[24] = {0};
    for (int i = 0; i < 4; i++)
        hdr[i] = (unsigned char)(version >> (8 * i));
    hdr[16] = 1; /* one entry */
    buf_append(&b, hdr, sizeof hdr);
    unsigned char e[4 + 1 + 16 + 1] = {1, 0, 0, 0, 'k'};
    int64_t exp = T0 + 3600 * SEC;
    memcpy(e + 5, &exp, 8); /* the tests run little-endian, as the format */
    e[21] = (unsigned char)kind;
    buf_append(&b, e, sizeof e);
    buf_append(&b, state, n);
    if (version >= 2) { /* an empty extra section */
        uint32_t none = 0;
        buf_append(&b, &none, 4);
    }
    uint64_t sum = store_file_sum(b.data, b.len);
    buf_append(&b, &sum, 8);
    return b;
}

static void test_forged(void)
{
    struct local_store *t = local_store_new(10, 1);
    struct store_file_counts c;
    char err[RL_ERRLEN] = "";
    int64_t tb[3] = {10, T0, 60 * SEC};
    struct buf b = forged(STORE_FILE_VERSION, 3 /* KIND_TOKEN */, tb, sizeof tb);
    is_int(store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err), 0,
           "a forged token bucket is read: %s", err);
    buf_free(&b);
    b = forged(1, 3, tb, sizeof tb);
    is_int(store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err), 0,
           "a version 1 image (no extra section) is still read: %s", err);
    buf_free(&b);
    b = forged(STORE_FILE_VERSION + 1, 3, tb, sizeof tb);
    ok(store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err) < 0 && strstr(err, "version"),
       "another version is refused, checksum good: %s", err);
    buf_free(&b);
    tb[2] = 0;
    b = forged(STORE_FILE_VERSION, 3, tb, sizeof tb);
    ok(store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err) < 0,
       "a token bucket of scale 0 (a division by zero) is refused: %s", err);
    buf_free(&b);
    unsigned char log[4 + 48] = {2};
    int64_t runs[6] = {T0, 1, 0, T0 - 1, 1, 1}; /* scores going back */
    memcpy(log + 4, runs, sizeof runs);
    b = forged(STORE_FILE_VERSION, 5 /* KIND_LOG */, log, sizeof log);
    ok(store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err) < 0,
       "a log out of order is refused: %s", err);
    buf_free(&b);
    unsigned char many[4] = {0xff, 0xff, 0xff, 0xff};
    b = forged(STORE_FILE_VERSION, 7 /* KIND_LEASES */, many, sizeof many);
    ok(store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err) < 0,
       "a count past the image's end is refused: %s", err);
    buf_free(&b);
    is_int(local_store_size(t), 1, "only the good image's entry was ever loaded");
    local_store_free(t);
}

static void test_expiry_and_bounds(void)
{
    struct local_store *s = filled();
    size_t n;
    struct buf a = image_of(s, T0 + 30 * SEC, &n);
    struct local_store *t = local_store_new(1000, 1);
    struct store_file_counts c;
    char err[RL_ERRLEN] = "";
    is_int(store_file_decode(t, a.data, a.len, T0 + 7200 * SEC, &c, err, sizeof err), 0,
           "an old image decodes");
    ok(c.expired > 0 && c.loaded + c.expired == n && local_store_size(t) == c.loaded,
       "entries whose windows ended are dropped (%zu), leases held live on (%zu)", c.expired,
       c.loaded);
    local_store_free(t);
    t = local_store_new(5, 1);
    is_int(store_file_decode(t, a.data, a.len, T0 + 30 * SEC, &c, err, sizeof err), 0,
           "an image larger than the store decodes");
    is_int(local_store_size(t), 5, "the store keeps its bound (the most recently used)");
    buf_free(&a);
    local_store_free(s), local_store_free(t);
}

static void test_file(void)
{
    char dir[] = "/tmp/rl-store-file-XXXXXX";
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp\n");
        exit(1);
    }
    char path[256], err[RL_ERRLEN] = "";
    snprintf(path, sizeof path, "%s/state", dir);
    struct buf b = {0};
    is_int(store_file_read(path, &b, err, sizeof err), 1, "no file: 1");
    is_int(store_file_probe(path, err, sizeof err), 0, "the directory takes a file");
    is_int(store_file_write(path, "one", 3, err, sizeof err), 0, "written: %s", err);
    is_int(store_file_write(path, "second", 6, err, sizeof err), 0, "replaced");
    struct stat st;
    ok(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "mode 0600");
    is_int(store_file_read(path, &b, err, sizeof err), 0, "read");
    ok(b.len == 6 && memcmp(b.data, "second", 6) == 0, "the last write, whole");
    buf_free(&b);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/state/x", dir);
    ok(store_file_probe(bad, err, sizeof err) < 0 &&
           store_file_write(bad, "x", 1, err, sizeof err) < 0,
       "a path under a file takes nothing: %s", err);
    unlink(path);
    rmdir(dir);
}

/* The caller's extra section (the run-time overrides of backend: memory)
 * comes back as written, and an image without one reports none. */
static void test_extra(void)
{
    struct local_store *t = local_store_new(10, 1);
    struct buf b = {0};
    size_t n = store_file_snapshot(t, T0, &b);
    store_file_seal(&b, 0, "{\"x\":1}\n", 8);
    struct store_file_counts c;
    char err[RL_ERRLEN] = "";
    ok(n == 0 && store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err) == 0 &&
           c.extra_len == 8 && memcmp(c.extra, "{\"x\":1}\n", 8) == 0,
       "the extra section comes back as written: %s", err);
    b.len = 0;
    store_file_encode(t, T0, &b);
    ok(store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err) == 0 && c.extra_len == 0,
       "no extra section: none reported: %s", err);
    uint32_t version;
    memcpy(&version, b.data + 8, 4);
    is_int(version, 1, "nothing extra: written as version 1, which the previous release reads");
    b.len = 0;
    store_file_snapshot(t, T0, &b);
    store_file_seal(&b, 0, "x", 1);
    memcpy(&version, b.data + 8, 4);
    is_int(version, STORE_FILE_VERSION, "an extra section: version %d", STORE_FILE_VERSION);
    b.len = 0;
    store_file_snapshot(t, T0, &b);
    store_file_seal(&b, 0, "abc", 3);
    b.data[b.len - 8 - 3 - 4] = 200; /* the length past the image's end */
    uint64_t sum = store_file_sum(b.data, b.len - 8);
    memcpy(b.data + b.len - 8, &sum, 8);
    ok(store_file_decode(t, b.data, b.len, T0, &c, err, sizeof err) < 0,
       "an extra section longer than the image is refused: %s", err);
    buf_free(&b);
    local_store_free(t);
}

int main(void)
{
    store_policies(pols);
    test_round_trip();
    test_damage();
    test_forged();
    test_extra();
    test_expiry_and_bounds();
    test_file();
    return tap_done();
}
