/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core.c: the little the core needs from its loop beyond the struct
 * (core.h): bounded counters, forgetting a reset key, the backend's words
 * and the idle callback.
 */
#include <stdio.h>

#include "core/backend.h"
#include "core/core.h"
#include "core/deny_cache.h"
#include "core/local_lease.h"
#include "core/metrics.h"

int core_count_take(size_t *count, size_t max)
{
    size_t n = __atomic_load_n(count, __ATOMIC_RELAXED);
    /* A compare-and-swap rather than add-then-undo: a take that fails
     * never shows, even for a moment, as a taken unit to another thread
     * (which could then be refused below the limit). */
    do {
        if (n >= max)
            return 0;
    } while (!__atomic_compare_exchange_n(count, &n, n + 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return 1;
}

void core_count_release(size_t *count)
{
    __atomic_sub_fetch(count, 1, __ATOMIC_RELAXED);
}

/* What the fallback's reset reports: forgetting is the whole point. */
static void forgotten(void *arg, const struct backend_reset_reply *reply)
{
    (void)arg;
    (void)reply;
}

/* A block dropped by a reset: not given back, since the count it came
 * from is gone (local_lease.h): stranded. */
static void strand_block(void *arg, const struct local_lease_block *b)
{
    struct core *core = arg;
    metrics_local_lease(core->metrics, b->policy, METRICS_LOCAL_LEASE_STRANDED, (uint64_t)b->units);
}

void core_forget_key(struct core *core, const char *policy, const char *key, size_t keylen)
{
    core->reset_seen_us = util_monotonic_us();
    if (core->leases)
        local_lease_drop(core->leases, policy, policy ? key : NULL, keylen, util_monotonic_us(),
                         strand_block, core);
    if (!policy) {
        if (core->deny)
            deny_cache_clear(core->deny);
        return;
    }
    if (core->deny)
        deny_cache_del(core->deny, policy, key, keylen);
    const struct policy *p = config_find_policy(core->config, policy);
    if (!core->fallback || !p || keylen > POLICY_KEY_MAX)
        return;
    /* The fallback's store forgets the key as a reset of its own would. */
    if (backend_reset(core->fallback, core->config, policy_for_key(p, key, keylen), key, keylen,
                      forgotten, NULL) < 0) {
    }
}

const char *core_backend_said(const struct core *core, char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "%s %s", core->backend->ops->name, what);
    return buf;
}

void core_maybe_idle(struct core *core)
{
    if (core->idle)
        core->idle(core->idle_arg);
}
