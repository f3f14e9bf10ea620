/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_policies.h: the policies whose store the state file's tests fill
 * and read (tests/unit/test_store_file.c, tests/fuzz/fuzz_store_file.c,
 * whose seeds are images of such a store): p<a>, one tier "t" of every
 * algorithm a, limit 50 in 60 s (buckets of 1 s; concurrency leases of 1 h).
 */
#ifndef RATELIMITD_TEST_STORE_POLICIES_H
#define RATELIMITD_TEST_STORE_POLICIES_H

#include <stdio.h>
#include <stdlib.h>

#include "config/policy.h"

#define STORE_SEC 1000000LL

/* Fills pols[ALG__COUNT]; a tier that does not validate is a broken test. */
static void store_policies(struct policy *pols)
{
    for (int a = 0; a < ALG__COUNT; a++) {
        struct policy *p = &pols[a];
        snprintf(p->name, sizeof p->name, "p%d", a);
        p->ntiers = 1;
        struct tier *t = &p->tiers[0];
        snprintf(t->name, sizeof t->name, "t");
        t->algorithm = (enum algorithm)a;
        t->limit = 50;
        t->window_us = a == ALG_CONCURRENCY ? 0 : 60 * STORE_SEC;
        t->lease_timeout_us = a == ALG_CONCURRENCY ? 3600 * STORE_SEC : 0;
        t->precision_us = a == ALG_SLIDING_WINDOW_BUCKETS ? STORE_SEC : 0;
        char err[RL_ERRLEN];
        if (policy_tier_validate(t, err, sizeof err) < 0) {
            printf("Bail out! tier %d: %s\n", a, err);
            abort();
        }
    }
}

#endif
