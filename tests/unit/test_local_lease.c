/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_local_lease.c: the table of local leases (local_lease.c), its rules
 * with time as a parameter: a key is leased only once hot, a block is spent
 * down to nothing and never past its time, one call in flight per key, the
 * next block asked below a quarter and topped up to the block size, auto
 * sizing from the rate and its cap, stale tickets after a drop, expired and
 * dropped blocks spilled with what they held, the LRU bound.
 */
#include <stdio.h>
#include <string.h>

#include "config/policy.h"
#include "core/local_lease.h"
#include "tap.h"

#define SEED 0x1ea5e
#define MS 1000

static const struct tier_result took = {
    .allowed = 1, .limit = 1000, .remaining = 500, .reset_us = 10000 * MS, .now_us = 77};

struct spilled {
    int64_t units;
    int n, expired;
};

static void on_spill(void *arg, const struct local_lease_block *b)
{
    struct spilled *s = arg;
    s->units += b->units;
    s->n++;
    s->expired += b->expired;
}

/* One check of cost 1 on key at now; lease 20 (units), cap 100. */
static enum local_lease_step check(struct local_lease_table *t, const char *key, int64_t now,
                                   int64_t lease, int64_t *want, uint64_t *ticket,
                                   struct spilled *s)
{
    struct tier_result out[1];
    return local_lease_check(t, "p", key, strlen(key), 1, lease, 100, 1, now, out, want, ticket,
                             on_spill, s);
}

/* Checks until the key asks; returns the check's index (or -1). */
static int until_ask(struct local_lease_table *t, const char *key, int64_t now, int64_t lease,
                     int64_t *want, uint64_t *ticket, struct spilled *s)
{
    for (int i = 0; i < 100; i++)
        if (check(t, key, now, lease, want, ticket, s) == LOCAL_LEASE_ASK)
            return i;
    return -1;
}

static void test_hot_and_spend(void)
{
    struct local_lease_table *t = local_lease_new(SEED);
    struct spilled s = {0};
    int64_t want = 0;
    uint64_t ticket = 0;
    is_int(until_ask(t, "k", 0, 20, &want, &ticket, &s), LOCAL_LEASE_HOT_HITS - 1,
           "a key asks on its HOT_HITS-th check in one span");
    is_int(want, 20, "it asks for the block size");
    ok(check(t, "k", 0, 20, &want, &ticket, &s) == LOCAL_LEASE_WAIT,
       "with a call in flight and no block: wait for it");
    ok(local_lease_install(t, "p", "k", 1, ticket, 20, 1, 50 * MS, 77, &took, 1, 0, on_spill, &s),
       "the grant is installed");
    int served = 0;
    struct tier_result out[1];
    for (int i = 0; i < 40; i++) {
        if (local_lease_check(t, "p", "k", 1, 1, 20, 100, 1, MS, out, &want, &ticket, on_spill,
                              &s) != LOCAL_LEASE_SERVED)
            break;
        served++;
        if (i == 0)
            ok(out[0].allowed && out[0].remaining == 500 + 18 && out[0].reset_us == 10000 * MS - MS,
               "served: figures moved forward, remaining counts the block (%lld)",
               (long long)out[0].remaining);
    }
    /* 19 were left after the asking check; below a quarter (5) it asks. */
    is_int(served, 15, "served down to a quarter of the block, then asks");
    is_int(want, 16, "the next ask tops the block up to its size");
    ok(check(t, "k", MS, 20, &want, &ticket, &s) == LOCAL_LEASE_SERVED,
       "while the next call is in flight the rest is spent");
    local_lease_abandon(t, "p", "k", 1, ticket);
    ok(check(t, "k", 60 * MS, 20, &want, &ticket, &s) == LOCAL_LEASE_ASK,
       "past its time the block is spilled and a new one asked");
    ok(s.n == 1 && s.expired == 1 && s.units == 3, "the expired block spilled its 3 units");
    local_lease_free(t, on_spill, &s);
}

static void test_auto_and_cap(void)
{
    struct local_lease_table *t = local_lease_new(SEED);
    struct spilled s = {0};
    int64_t want = 0;
    uint64_t ticket = 0;
    /* 60 checks in one span, none leased (every ask abandoned). */
    for (int i = 0; i < 60; i++)
        if (check(t, "a", i * MS, POLICY_LEASE_AUTO, &want, &ticket, &s) == LOCAL_LEASE_ASK)
            local_lease_abandon(t, "p", "a", 1, ticket);
    ok(check(t, "a", 150 * MS, POLICY_LEASE_AUTO, &want, &ticket, &s) == LOCAL_LEASE_ASK,
       "auto: the next span asks");
    is_int(want, 60, "auto: the block is the checks of the last span");
    local_lease_abandon(t, "p", "a", 1, ticket);
    ok(check(t, "a", 151 * MS, 500, &want, &ticket, &s) == LOCAL_LEASE_ASK && want == 100,
       "a block never exceeds the cap");
    local_lease_free(t, on_spill, &s);
}

static void test_drop_and_stale(void)
{
    struct local_lease_table *t = local_lease_new(SEED);
    struct spilled s = {0};
    int64_t want = 0;
    uint64_t ticket = 0, first;
    until_ask(t, "x", 0, 20, &want, &ticket, &s);
    ok(local_lease_install(t, "p", "x", 1, ticket, 20, 1, 50 * MS, 77, &took, 1, 0, on_spill, &s),
       "drop: a block held");
    until_ask(t, "y", 0, 20, &want, &ticket, &s);
    first = ticket;
    local_lease_drop(t, "p", "y", 1, 0, on_spill, &s);
    ok(!local_lease_install(t, "p", "y", 1, first, 20, 1, 50 * MS, 77, &took, 1, 0, on_spill, &s),
       "drop: a call in flight finds its ticket stale");
    local_lease_drop(t, "p", NULL, 0, MS, on_spill, &s);
    ok(s.n == 1 && s.units == 19 && s.expired == 0, "drop: the valid block spilled, 19 units");
    is_int(local_lease_size(t), 0, "drop: every entry of the policy gone");
    local_lease_free(t, on_spill, &s);
}

static void test_bound(void)
{
    struct local_lease_table *t = local_lease_new(SEED);
    struct spilled s = {0};
    int64_t want;
    uint64_t ticket;
    char key[32];
    for (int i = 0; i < LOCAL_LEASE_MAX_KEYS + 10; i++) {
        int n = snprintf(key, sizeof key, "k%d", i);
        struct tier_result out[1];
        (void)local_lease_check(t, "p", key, (size_t)n, 1, 20, 100, 1, 0, out, &want, &ticket,
                                on_spill, &s);
    }
    is_int(local_lease_size(t), LOCAL_LEASE_MAX_KEYS, "bound: at most MAX_KEYS entries");
    local_lease_free(t, on_spill, &s);
    local_lease_free(NULL, NULL, NULL);
}

int main(void)
{
    test_hot_and_spend();
    test_auto_and_cap();
    test_drop_and_stale();
    test_bound();
    return tap_done();
}
