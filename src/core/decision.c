/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decision.c: the neutral request's helpers and the binding-tier rule
 * (decision.h). Pure: no I/O, no clock, no front or backend type.
 */
#include <stdlib.h>

#include "core/decision.h"

void request_free(struct check_request *r)
{
    for (size_t i = 0; i < r->nchecks; i++) {
        free(r->checks[i].key);
        free(r->checks[i].owned);
    }
    free(r->checks);
    r->checks = NULL;
    r->nchecks = 0;
}

size_t request_tiers(const struct check_request *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nchecks; i++)
        n += r->checks[i].policy->ntiers;
    return n;
}

enum failure_mode request_failure_mode(const struct check_request *r)
{
    enum failure_mode mode = FAILURE_OPEN;
    for (size_t i = 0; i < r->nchecks; i++) {
        enum failure_mode m = r->checks[i].policy->failure_mode;
        if (m == FAILURE_CLOSED)
            return FAILURE_CLOSED;
        if (m == FAILURE_LOCAL)
            mode = FAILURE_LOCAL;
    }
    return mode;
}

/* True if a beats b as the binding tier under the rule for `allowed`. */
static int binds_before(const struct tier_result *a, const struct tier_result *b, int allowed)
{
    if (!allowed) {
        if (a->allowed != b->allowed)
            return !a->allowed;
        if (b->retry_us < 0)
            return 0;
        return a->retry_us < 0 || a->retry_us > b->retry_us;
    }
    if (a->remaining != b->remaining)
        return a->remaining < b->remaining;
    return a->reset_us > b->reset_us;
}

void decision_summarize_allowed(const struct check_request *req, const struct tier_result *results,
                                struct decision_summary *out)
{
    *out = (struct decision_summary){.allowed = 1};
    const struct tier_result *r = results;
    /* Shadow checks never deny the request. */
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct policy *p = req->checks[i].policy;
        int check_allowed = 1;
        for (size_t j = 0; j < p->ntiers; j++, r++)
            check_allowed &= r->allowed != 0;
        out->check_allowed |= (uint64_t)check_allowed << i;
        if (check_allowed)
            continue;
        if (p->shadow)
            out->shadow_denied = 1;
        else
            out->allowed = 0;
    }
    if (!out->allowed)
        out->shadow_denied = 0;
}

void decision_summarize(const struct check_request *req, const struct tier_result *results,
                        struct decision_summary *out)
{
    decision_summarize_allowed(req, results, out);
    /* Then the binding tier and the delay. */
    const struct tier_result *bind = NULL, *bind_any = NULL;
    const struct tier_result *r = results;
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct policy *p = req->checks[i].policy;
        for (size_t j = 0; j < p->ntiers; j++, r++) {
            if (!p->shadow && (!bind || binds_before(r, bind, out->allowed)))
                bind = r;
            if (!bind_any || binds_before(r, bind_any, out->allowed))
                bind_any = r;
            if (policy_algorithm_has_delay(p->tiers[j].algorithm)) {
                out->any_leaky = 1;
                if (out->allowed && r->allowed && r->delay_us > out->delay_us)
                    out->delay_us = r->delay_us;
            }
        }
    }
    out->binding = bind ? bind : bind_any;
    out->retry_us = out->allowed ? 0 : out->binding->retry_us;
}

const struct check_item *decision_check_of(const struct check_request *req,
                                           const struct tier_result *results,
                                           const struct tier_result *r)
{
    size_t idx = (size_t)(r - results);
    for (size_t i = 0; i < req->nchecks; i++) {
        size_t n = req->checks[i].policy->ntiers;
        if (idx < n)
            return &req->checks[i];
        idx -= n;
    }
    return &req->checks[req->nchecks - 1];
}

/* True if a allows fewer requests per unit of time than b: a.limit/a.window
 * < b.limit/b.window, cross-multiplied. The products (limits below 2^63,
 * windows below 2^45 us) pass int64_t, so they are exact in 128 bits. */
static int slower(const struct tier *a, const struct tier *b)
{
    __extension__ typedef unsigned __int128 u128;
    return (u128)a->limit * (u128)b->window_us < (u128)b->limit * (u128)a->window_us;
}

const struct check_item *decision_unknown_binding(const struct check_request *req,
                                                  const struct tier **tier)
{
    const struct check_item *best = NULL;
    *tier = NULL;
    for (int pass = 0; pass < 2 && !best; pass++) {
        /* pass 0: non-shadow checks only; pass 1: every check */
        for (size_t i = 0; i < req->nchecks; i++) {
            const struct policy *p = req->checks[i].policy;
            if (pass == 0 && p->shadow)
                continue;
            for (size_t j = 0; j < p->ntiers; j++)
                if (!*tier || slower(&p->tiers[j], *tier)) {
                    *tier = &p->tiers[j];
                    best = &req->checks[i];
                }
        }
    }
    return best;
}

enum verdict_outcome verdict_outcome(const struct verdict *v)
{
    switch (v->kind) {
    case VERDICT_DECIDED:
    case VERDICT_LOCAL:
        return v->sum.allowed ? OUTCOME_ALLOWED : OUTCOME_DENIED;
    case VERDICT_UNAVAILABLE:
        return request_failure_mode(v->req) == FAILURE_CLOSED ? OUTCOME_UNAVAILABLE
                                                              : OUTCOME_ALLOWED;
    case VERDICT_OVERLOADED:
        break;
    }
    return OUTCOME_UNAVAILABLE;
}
