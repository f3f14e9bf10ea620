/* SPDX-License-Identifier: Apache-2.0 */
/*
 * concurrency.c: at most `limit` units held at once per key, each by a lease
 * that ends when released or when it expires. The C twin of
 * lua/concurrency.lua, step for step and with its names, for the in-memory
 * limiter (limiter_local.h); its row in the ops table is concurrency_ops.
 *
 * Owns: the leases (live ones and tombstones), the steps and the lease
 * calls' release and renew.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "limiter/limiter_internal.h"

/* lua/concurrency.lua: the window is the lease timeout; a lease holds its
 * units while now < expires; expired leases stay as tombstones for one
 * more lease timeout (a late release hears "expired"). */

static void cc_load(struct tier_state *ts, int64_t now)
{
    ts->held = ts->latest = 0;
    for (size_t i = 0; ts->e && i < ts->e->u.ls.len; i++) {
        const struct lease *l = &ts->e->u.ls.l[i];
        if (l->expires > now) {
            ts->held += l->units;
            ts->latest = max64(ts->latest, l->expires);
        }
    }
}

static int cc_allows(const struct tier_state *ts)
{
    return ts->held + ts->cost <= ts->t->limit;
}

static void cc_figures(const struct tier_state *ts, int64_t now, int consumed,
                       struct tier_result *r)
{
    int64_t held = ts->held, last = ts->latest;
    if (consumed && ts->cost > 0) {
        held += ts->cost;
        last = max64(last, now + ts->t->lease_timeout_us);
    }
    r->remaining = max64(0, ts->t->limit - held);
    r->reset_us = last ? last - now : 0;
}

static int lease_cmp(const void *a, const void *b)
{
    const struct lease *x = a, *y = b;
    return (x->expires > y->expires) - (x->expires < y->expires);
}

/* The earliest expiry after which held + cost <= limit (the script's
 * ZRANGEBYSCORE order: by expiry). */
static int64_t cc_retry(const struct tier_state *ts, int64_t now)
{
    size_t n = ts->e ? ts->e->u.ls.len : 0, k = 0;
    struct lease *live = xcalloc(n ? n : 1, sizeof *live);
    for (size_t i = 0; i < n; i++)
        if (ts->e->u.ls.l[i].expires > now)
            live[k++] = ts->e->u.ls.l[i];
    qsort(live, k, sizeof *live, lease_cmp);
    int64_t need = ts->held + ts->cost - ts->t->limit, freed = 0, retry = ts->t->lease_timeout_us;
    for (size_t i = 0; i < k; i++) {
        freed += live[i].units;
        if (freed >= need) {
            retry = live[i].expires - now;
            break;
        }
    }
    free(live);
    return retry;
}

static void cc_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    int64_t W = ts->t->lease_timeout_us;
    size_t k = 0;
    for (size_t i = 0; i < e->u.ls.len; i++) /* ZREMRANGEBYSCORE -inf now-W */
        if (e->u.ls.l[i].expires > now - W)
            e->u.ls.l[k++] = e->u.ls.l[i];
    e->u.ls.len = k;
    if (e->u.ls.len == e->u.ls.cap) {
        e->u.ls.cap = e->u.ls.cap ? 2 * e->u.ls.cap : 4;
        e->u.ls.l = xrealloc(e->u.ls.l, e->u.ls.cap * sizeof *e->u.ls.l);
    }
    struct lease *l = &e->u.ls.l[e->u.ls.len++];
    l->expires = now + W;
    l->units = ts->cost;
    snprintf(l->nonce, sizeof l->nonce, "%s", ts->nonce ? ts->nonce : "");
    local_store_expire_in(e, now, max64(ts->latest, now + W) + W - now);
}

struct lease_outcome concurrency_lease_decide(int found, int64_t expires, int renew,
                                              int64_t timeout, int64_t now, int64_t *px_ms)
{
    struct lease_outcome o = {LEASE_UNKNOWN, 0};
    *px_ms = 0;
    if (!found)
        return o;
    o.status = expires <= now ? LEASE_EXPIRED : LEASE_DONE;
    if (o.status == LEASE_DONE && renew) {
        o.expires_us = now + timeout;
        /* px_in(expires + timeout - now): the key outlives the renewed
         * lease's tombstone, as commit's expiry does a new lease's */
        *px_ms = idiv_ceil(o.expires_us + timeout - now, 1000) + EXPIRY_SLACK_MS;
    }
    return o;
}

struct lease_outcome concurrency_lease_op(struct local_store *s, const char *key_prefix, int renew,
                                          const struct lease_ref *r, int64_t now)
{
    char key[POLICY_KEY_BUF];
    struct lease_outcome o = {LEASE_UNKNOWN, 0};
    int n =
        policy_redis_key(key_prefix, r->policy, r->key, r->keylen, r->tier, NULL, key, sizeof key);
    if (n < 0)
        return o;
    struct entry *e = local_store_lookup(s, key, (size_t)n, now);
    if (!e || e->kind != KIND_LEASES)
        return o;
    for (size_t i = 0; i < e->u.ls.len; i++) {
        struct lease *l = &e->u.ls.l[i];
        if (l->units != r->units || strcmp(l->nonce, r->nonce) != 0)
            continue;
        int64_t px;
        o = concurrency_lease_decide(1, l->expires, renew, r->timeout_us, now, &px);
        if (o.status == LEASE_DONE && !renew) {
            e->u.ls.l[i] = e->u.ls.l[--e->u.ls.len]; /* ZREM */
            if (e->u.ls.len == 0)
                local_store_drop(s, e); /* Redis deletes an emptied ZSET */
        } else if (o.status == LEASE_DONE) {
            l->expires = o.expires_us;
            /* The script's PEXPIRE when PTTL < want. */
            if (e->expires_at < now + px * 1000)
                e->expires_at = now + px * 1000;
        }
        break;
    }
    return o;
}

const struct alg_ops concurrency_ops = {
    .kind = KIND_LEASES,
    .load = cc_load,
    .allows = cc_allows,
    .figures = cc_figures,
    .retry = cc_retry,
    .commit = cc_commit,
};
