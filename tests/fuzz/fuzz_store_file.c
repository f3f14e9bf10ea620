/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_store_file.c: libFuzzer harness for the state file's reader
 * (limiter/store_file.c): a file on disk is input like any other, and its
 * loader must never crash, nor load state an algorithm then trips on.
 *
 * The input is an image without its checksum: the harness appends the
 * right one (else nearly every input would stop at the checksum and the
 * entries would go unexplored), and also decodes the input as it is. An
 * accepted image is loaded into a small store, which then decides a check
 * of every algorithm on the keys the seeds use (rl:p<algorithm>:...: the
 * seeds are images of such a store) at a few times, under ASan and UBSan.
 *
 * Beyond what the sanitizers catch, the harness aborts when a contract
 * breaks: a refusal leaves the store empty and says why; an accepted
 * image accounts for its entries (loaded + expired) and keeps the store's
 * bound; what is loaded encodes to an image that decodes again, to the
 * same bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "limiter/limiter_local.h"
#include "limiter/store_file.h"

#define SEC 1000000LL
#define T0 (1699999980LL * SEC)

static struct policy pols[ALG__COUNT];

/* The seeds' policies: p<a>, one tier "t" of algorithm a, as
 * tests/unit/test_store_file.c fills its store. */
static void make_policies(void)
{
    for (int a = 0; a < ALG__COUNT; a++) {
        struct policy *p = &pols[a];
        snprintf(p->name, sizeof p->name, "p%d", a);
        p->ntiers = 1;
        struct tier *t = &p->tiers[0];
        snprintf(t->name, sizeof t->name, "t");
        t->algorithm = (enum algorithm)a;
        t->limit = 50;
        t->window_us = a == ALG_CONCURRENCY ? 0 : 60 * SEC;
        t->lease_timeout_us = a == ALG_CONCURRENCY ? 3600 * SEC : 0;
        t->precision_us = a == ALG_SLIDING_WINDOW_BUCKETS ? SEC : 0;
        char err[RL_ERRLEN];
        if (policy_tier_validate(t, err, sizeof err) < 0)
            abort();
    }
}

/* Every algorithm decides on the loaded store, so that a state no
 * algorithm could have written shows here, not in production. */
static void decide_all(struct local_store *s, int64_t now)
{
    static const char *const keys[] = {"a", "b", "c"};
    for (int a = 0; a < ALG__COUNT; a++)
        for (size_t k = 0; k < 3; k++) {
            struct check_item c = {
                .policy = &pols[a], .key = (char *)keys[k], .keylen = 1, .cost = 1 + (int64_t)k};
            struct check_request req = {.nchecks = 1, .checks = &c};
            memcpy(req.lease_nonce, "FUZZFUZZFUZZFUZZFUZZFU", LEASE_NONCE_LEN + 1);
            struct tier_result r;
            local_decide(s, "rl:", &req, now, &r);
        }
}

/* Decodes len bytes at data into a fresh store at now, and checks it. */
static void one(const uint8_t *data, size_t len, int64_t now)
{
    struct local_store *s = local_store_new(16, 1);
    struct store_file_counts c;
    char err[RL_ERRLEN] = "";
    if (store_file_decode(s, data, len, now, &c, err, sizeof err) < 0) {
        if (!err[0] || local_store_size(s) != 0)
            abort();
        local_store_free(s);
        return;
    }
    if (local_store_size(s) > 16 || (c.loaded > 0 && local_store_size(s) == 0))
        abort();
    struct buf a = {0}, b = {0};
    store_file_encode(s, now, &a);
    struct local_store *t = local_store_new(16, 2);
    if (store_file_decode(t, a.data, a.len, now, &c, err, sizeof err) < 0)
        abort();
    store_file_encode(t, now, &b);
    if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0)
        abort();
    decide_all(s, now);
    decide_all(s, now + 90 * SEC);
    buf_free(&a), buf_free(&b);
    local_store_free(s), local_store_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready)
        make_policies(), ready = 1;
    one(data, size, T0);
    uint8_t *signed_copy = malloc(size + 8);
    if (!signed_copy)
        return 0;
    if (size)
        memcpy(signed_copy, data, size);
    uint64_t sum = store_file_sum(data, size);
    for (int i = 0; i < 8; i++)
        signed_copy[size + (size_t)i] = (uint8_t)(sum >> (8 * i));
    one(signed_copy, size + 8, T0);
    one(signed_copy, size + 8, T0 + 3600 * SEC);
    free(signed_copy);
    return 0;
}
