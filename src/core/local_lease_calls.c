/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local_lease_calls.c: the core's side of local leases (local_lease_calls.h):
 * the rule for which checks lease, what a take's completion does with its
 * block, and the give-back calls (one small struct each, owning a config
 * reference and its request, freed at the backend's completion; counted in
 * core->inflight so that a drain waits for them).
 *
 * Does not own the table (local_lease.c), the backend, or the check that
 * asks (check.c).
 */
#include "core/local_lease_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/metrics.h"

int local_lease_eligible(const struct core *core, const struct check_request *req)
{
    if (!core->leases || core->leases_off || !core->backend->ops->local_leases ||
        req->nchecks != 1 || req->dry_run || req->report || req->inspect || req->lease_nonce[0] ||
        req->block_op != LEASE_BLOCK_NONE)
        return 0;
    const struct check_item *it = &req->checks[0];
    /* Not a policy made for this request alone (an Envoy limit override):
     * its limit is this request's, and a block must serve one limit. */
    return it->policy->lease != 0 && !it->owned && !it->policy->shadow && it->cost > 0 &&
           policy_leases(it->policy);
}

/* The most a block of p may hold: its smallest capacity, a share of it for
 * `lease: auto`. */
static int64_t block_cap(const struct policy *p)
{
    int64_t cap = INT64_MAX;
    for (size_t j = 0; j < p->ntiers; j++) {
        int64_t c = policy_tier_capacity(&p->tiers[j]);
        cap = c < cap ? c : cap;
    }
    if (p->lease == POLICY_LEASE_AUTO)
        cap /= LOCAL_LEASE_CAP_SHARE;
    return cap > 1 ? cap : 1;
}

/* A block given back: the request (one check of the block's units) under
 * the snapshot it was taken in. */
struct give {
    struct core *core;
    struct config *cfg; /* reference: the policy points into it */
    struct check_request req;
    char policy[POLICY_NAME_MAX + 1];
};

static void give_free(struct give *g)
{
    request_free(&g->req);
    config_unref(g->cfg);
    free(g);
}

static void on_given(void *arg, const struct backend_reply *r)
{
    struct give *g = arg;
    struct core *core = g->core;
    int64_t units = g->req.checks[0].cost;
    int64_t back = r->status == BACKEND_OK ? r->lease_granted : 0;
    if (back > 0)
        metrics_local_lease(core->metrics, g->policy, METRICS_LOCAL_LEASE_RETURNED, (uint64_t)back);
    if (units > back)
        metrics_local_lease(core->metrics, g->policy, METRICS_LOCAL_LEASE_STRANDED,
                            (uint64_t)(units - back));
    give_free(g);
    core->inflight--;
    core_maybe_idle(core);
}

/* Gives units of (policy, key) back, taken at taken_us, under cfg; or
 * counts them stranded when that cannot be asked. */
static void give_back(struct core *core, struct config *cfg, const char *policy, const char *key,
                      size_t keylen, int64_t units, int64_t taken_us)
{
    const struct policy *p = config_find_policy(cfg, policy);
    if (p)
        p = policy_for_key(p, key, keylen);
    if (!p || !policy_leases(p)) {
        metrics_local_lease(core->metrics, policy, METRICS_LOCAL_LEASE_STRANDED, (uint64_t)units);
        return;
    }
    struct give *g = xcalloc(1, sizeof *g);
    g->core = core;
    g->cfg = config_ref(cfg);
    snprintf(g->policy, sizeof g->policy, "%s", policy);
    g->req.nchecks = 1;
    g->req.checks = xcalloc(1, sizeof *g->req.checks);
    g->req.checks[0] = (struct check_item){.policy = p, .cost = units, .keylen = keylen};
    g->req.checks[0].key = xmalloc(keylen + 1);
    memcpy(g->req.checks[0].key, key, keylen);
    g->req.checks[0].key[keylen] = '\0';
    g->req.block_op = LEASE_BLOCK_GIVE;
    g->req.block_taken_us = taken_us;
    core->inflight++;
    int64_t now = cfg->clock == CLOCK_SOURCE_LOCAL ? util_realtime_us() : -1;
    if (backend_decide(core->backend, cfg, &g->req, now, on_given, g) < 0) {
        metrics_local_lease(core->metrics, policy, METRICS_LOCAL_LEASE_STRANDED, (uint64_t)units);
        give_free(g);
        core->inflight--;
    }
}

/* What a spilled block becomes. */
struct spill_ctx {
    struct core *core;
    struct config *cfg;
    int give; /* 0: strand every block */
};

static void on_spill(void *arg, const struct local_lease_block *b)
{
    struct spill_ctx *s = arg;
    if (s->give && !b->expired)
        give_back(s->core, s->cfg, b->policy, b->key, b->keylen, b->units, b->taken_us);
    else
        metrics_local_lease(s->core->metrics, b->policy, METRICS_LOCAL_LEASE_STRANDED,
                            (uint64_t)b->units);
}

enum local_lease_step local_lease_step(struct core *core, struct check_request *req, int64_t now_us,
                                       struct tier_result *out, uint64_t *ticket)
{
    const struct check_item *it = &req->checks[0];
    struct spill_ctx s = {.core = core, .cfg = core->config, .give = 1};
    int64_t want = 0;
    enum local_lease_step st = local_lease_check(
        core->leases, it->policy->name, it->key, it->keylen, it->cost, it->policy->lease,
        block_cap(it->policy), it->policy->ntiers, now_us, out, &want, ticket, on_spill, &s);
    if (st == LOCAL_LEASE_ASK) {
        req->block_op = LEASE_BLOCK_TAKE;
        req->block_units = want;
    }
    return st;
}

void local_lease_end(struct core *core, struct config *cfg, const struct check_request *req,
                     uint64_t ticket, int64_t sent_us, const struct backend_reply *r)
{
    const struct check_item *it = &req->checks[0];
    const char *name = it->policy->name;
    int64_t granted = r && r->status == BACKEND_OK ? r->lease_granted : 0;
    int64_t extra = granted - it->cost;
    if (granted <= 0 || !core->leases) {
        if (core->leases)
            local_lease_abandon(core->leases, name, it->key, it->keylen, ticket);
        return;
    }
    if (extra > 0) {
        metrics_local_lease(core->metrics, name, METRICS_LOCAL_LEASES_TAKEN, 1);
        metrics_local_lease(core->metrics, name, METRICS_LOCAL_LEASE_LEASED, (uint64_t)extra);
    }
    const struct tier_result *res = r->results;
    int64_t now = util_monotonic_us();
    /* Spend by: the backend's time left, from the send (never later here
     * than there). */
    int64_t until = sent_us + (r->lease_until_us - res[0].now_us);
    struct spill_ctx s = {.core = core, .cfg = cfg, .give = 1};
    int stale = core->leases_off || sent_us <= core->reset_seen_us;
    if (!stale &&
        local_lease_install(core->leases, name, it->key, it->keylen, ticket, granted, it->cost,
                            until, res[0].now_us, res, it->policy->ntiers, now, on_spill, &s))
        return;
    local_lease_abandon(core->leases, name, it->key, it->keylen, ticket);
    if (extra <= 0)
        return;
    /* After a reset the count the block came from may be gone: stranded.
     * Otherwise (dropped by a reload or a drain) given back. */
    struct local_lease_block b = {.policy = name,
                                  .key = it->key,
                                  .keylen = it->keylen,
                                  .units = extra,
                                  .taken_us = res[0].now_us,
                                  .expired = sent_us <= core->reset_seen_us || now >= until};
    on_spill(&s, &b);
}

void local_lease_reload(struct core *core, const struct config *next)
{
    if (!core->leases)
        return;
    struct spill_ctx s = {.core = core, .cfg = core->config, .give = 1};
    int64_t now = util_monotonic_us();
    for (size_t i = 0; i < core->config->npolicies; i++) {
        const struct policy *p = &core->config->policies[i];
        const struct policy *q = config_find_policy(next, p->name);
        if (p->lease != 0 && (!q || !policy_equal(p, q)))
            local_lease_drop(core->leases, p->name, NULL, 0, now, on_spill, &s);
    }
}

void local_lease_drain(struct core *core)
{
    core->leases_off = 1;
    if (!core->leases)
        return;
    struct spill_ctx s = {.core = core, .cfg = core->config, .give = 1};
    local_lease_drop(core->leases, NULL, NULL, 0, util_monotonic_us(), on_spill, &s);
}
