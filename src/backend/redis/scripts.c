/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scripts.c: the decision code's two forms (EVAL script, Function library)
 * and the calling convention they share (see the header comment of
 * lua/check.lua for the same contract from the Lua side):
 *
 *   ARGV: now_us or "" (Redis TIME), dry_run (SCRIPTS_RUN, SCRIPTS_DRY_RUN,
 *         SCRIPTS_DRY_RUN_BOTH or SCRIPTS_REPORT), then per check: cost and
 *         the policy's settings as one string, "shadow" then per tier
 *         "algorithm limit window_us burst precision_us", space-separated
 *         (the same string on every call: the Lua side parses it once;
 *         a calendar tier sends "calendar_window" and, for window_us, its
 *         bounds "p:s:e:n": a new string once per window);
 *         then, for a request that takes leases, its lease nonce.
 *   KEYS: per check, per tier, the algorithm's keys (policy_redis_key).
 *   Reply: now_us, request_allowed, then per tier: allowed, limit,
 *          remaining, reset_us, retry_us (-1: none), delay_us, reason;
 *          after SCRIPTS_DRY_RUN_BOTH, then per tier: remaining and
 *          reset_us as if nothing were taken.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/scripts.h"
#include "lib/sha1.h"

/* Generated with scripts_lua_source (src/backend/redis/scripts_lua.c). */
extern const char scripts_library_text[];
extern const char scripts_function_name_text[];

const char *scripts_library_code(void)
{
    return scripts_library_text;
}

const char *scripts_function_name(void)
{
    return scripts_function_name_text;
}

void scripts_sha1(char out[41])
{
    sha1_hex(scripts_lua_source, strlen(scripts_lua_source), out);
}

/* Appends one argument to the call; mem was sized by scripts_build_call,
 * and a bound gone wrong is a bug, never an overflow. */
static void push(struct script_call *c, size_t *used, const char *s, size_t len)
{
    if (*used + len + 1 > c->mem_size)
        abort();
    char *dst = c->mem + *used;
    memcpy(dst, s, len);
    dst[len] = '\0';
    c->args[c->nargs] = dst;
    c->lens[c->nargs] = len;
    c->nargs++;
    *used += len + 1;
}

static void push_int(struct script_call *c, size_t *used, int64_t v)
{
    char buf[UTIL_INT_CHARS];
    push(c, used, buf, util_format_int(buf, v));
}

/* Empties out and gives it room for nargs arguments of bytes bytes in all:
 * one allocation (args, lens, then the bytes), kept from the call out held
 * before when large enough, freed by scripts_call_free. */
static void call_alloc(struct script_call *out, size_t nargs, size_t bytes)
{
    size_t need = nargs * (sizeof *out->args + sizeof *out->lens) + bytes;
    char *block = (char *)(void *)out->args;
    size_t cap = out->cap;
    if (!block || cap < need) {
        free(block);
        block = xmalloc(need);
        cap = need;
    }
    memset(out, 0, sizeof *out);
    out->args = (const char **)(void *)block;
    out->lens = (size_t *)(void *)(block + nargs * sizeof *out->args);
    out->mem = block + nargs * (sizeof *out->args + sizeof *out->lens);
    out->mem_size = bytes;
    out->cap = cap;
}

/* A bound on the bytes one number takes in the call, with its NUL. */
#define NUM_BYTES 24

/* A bound on the bytes of one tier in a policy's settings string (a
 * calendar tier's window is four numbers). */
#define TIER_BYTES (32 + 7 * NUM_BYTES)

/* Appends " " and v to the string at dst, which has room. */
static size_t put_num(char *dst, size_t len, int64_t v)
{
    dst[len++] = ' ';
    return len + util_format_int(dst + len, v);
}

/* A calendar tier's window word, "p:s:e:n" (lua/calendar_window.lua):
 * the bounds around wall_us, the daemon's clock. The script picks among
 * them by its own now, so Redis TIME stays the one clock of the count. */
static size_t put_calendar(char *dst, size_t len, const struct tier *t, int64_t wall_us)
{
    int64_t b[4];
    calendar_bounds(&t->calendar, wall_us, b);
    for (int i = 0; i < 4; i++) {
        dst[len++] = i ? ':' : ' ';
        len += util_format_int(dst + len, b[i]);
    }
    return len;
}

/* Appends policy p's settings string (see the top of this file). Written
 * without snprintf, which was most of what building a call cost. */
static void push_policy(struct script_call *c, size_t *used, const struct policy *p,
                        int64_t wall_us)
{
    /* mem was sized by scripts_build_call (TIER_BYTES per tier): a bound
     * gone wrong is a bug, never an overflow. */
    if (*used + 2 + p->ntiers * TIER_BYTES > c->mem_size)
        abort();
    char *dst = c->mem + *used;
    size_t len = 0;
    dst[len++] = p->shadow ? '1' : '0';
    for (size_t j = 0; j < p->ntiers; j++) {
        const struct tier *t = &p->tiers[j];
        int cal = t->calendar.unit != CALENDAR_NONE;
        const char *alg = cal ? "calendar_window" : policy_algorithm_name(t->algorithm);
        size_t alen = strlen(alg);
        dst[len++] = ' ';
        memcpy(dst + len, alg, alen);
        len += alen;
        len = put_num(dst, len, t->limit);
        len = cal ? put_calendar(dst, len, t, wall_us) : put_num(dst, len, policy_tier_span_us(t));
        len = put_num(dst, len, t->burst);
        len = put_num(dst, len, t->precision_us);
    }
    dst[len] = '\0';
    c->args[c->nargs] = dst;
    c->lens[c->nargs] = len;
    c->nargs++;
    *used += len + 1;
}

/* Counts req's keys and tiers into *nkeys and *ntiers; returns the bytes
 * its call's arguments take at most (push_policy relies on the bound). */
static size_t call_bytes(const struct config *cfg, const struct check_request *req, size_t *nkeys,
                         size_t *ntiers)
{
    size_t bytes = 3 * NUM_BYTES + sizeof req->lease_nonce;
    size_t prefix = strlen(cfg->key_prefix);
    *nkeys = *ntiers = 0;
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        const struct policy *p = c->policy;
        bytes += 2 * NUM_BYTES;
        for (size_t j = 0; j < p->ntiers; j++) {
            size_t k = (size_t)policy_algorithm_nkeys(p->tiers[j].algorithm);
            /* A key: prefix, {policy:key} with each key byte at most %XX,
             * :tier, :seq, NUL. */
            size_t key_bytes =
                prefix + strlen(p->name) + 3 * c->keylen + strlen(p->tiers[j].name) + 16;
            *nkeys += k;
            bytes += TIER_BYTES + k * key_bytes;
        }
        *ntiers += p->ntiers;
    }
    return bytes;
}

/* Pushes the call's mode argument (lua/check.lua): a lease block's
 * "L<want>" or "G<taken>", else report, dry run or run. */
static void push_mode(struct script_call *out, size_t *used, const struct check_request *req)
{
    if (req->block_op != LEASE_BLOCK_NONE) {
        char mode[UTIL_INT_CHARS + 1];
        mode[0] = req->block_op == LEASE_BLOCK_TAKE ? 'L' : 'G';
        int64_t v = req->block_op == LEASE_BLOCK_TAKE ? req->block_units : req->block_taken_us;
        push(out, used, mode, 1 + util_format_int(mode + 1, v));
        out->block = 1;
    } else if (req->report)
        push(out, used, SCRIPTS_REPORT, 1);
    else if (req->dry_run)
        push(out, used, SCRIPTS_DRY_RUN, 1);
    else
        push(out, used, SCRIPTS_RUN, 1);
}

void scripts_rebuild_call(const struct config *cfg, const struct check_request *req, int64_t now_us,
                          struct script_call *out)
{
    size_t nkeys, ntiers;
    size_t bytes = call_bytes(cfg, req, &nkeys, &ntiers);
    int nonce = req->lease_nonce[0] != '\0';
    size_t nargs = nkeys + 2 + 2 * req->nchecks + (size_t)nonce;
    call_alloc(out, nargs, bytes);
    out->ntiers = ntiers;
    out->nkeys = nkeys;
    size_t used = 0;

    char key[POLICY_KEY_BUF];
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        for (size_t j = 0; j < c->policy->ntiers; j++) {
            const struct tier *t = &c->policy->tiers[j];
            for (int k = 0; k < policy_algorithm_nkeys(t->algorithm); k++) {
                int n = policy_tier_key(cfg->key_prefix, c->policy->name, c->key, c->keylen, t, k,
                                        key, sizeof key);
                /* POLICY_KEY_BUF bounds every key that config and request
                 * validation let through. */
                if (n < 0)
                    abort();
                push(out, &used, key, (size_t)n);
            }
        }
    }
    if (now_us >= 0)
        push_int(out, &used, now_us);
    else
        push(out, &used, "", 0);
    push_mode(out, &used, req);
    /* Calendar bounds need a wall clock even under clock: redis (the
     * script then picks among them by TIME). */
    int64_t wall_us = now_us >= 0 ? now_us : util_realtime_us();
    for (size_t i = 0; i < req->nchecks; i++) {
        push_int(out, &used, req->checks[i].cost);
        push_policy(out, &used, req->checks[i].policy, wall_us);
    }
    if (nonce)
        push(out, &used, req->lease_nonce, strlen(req->lease_nonce));
}

void scripts_rebuild_lease_call(const struct config *cfg, int renew, const struct lease_ref *refs,
                                size_t n, int64_t now_us, struct script_call *out)
{
    size_t bytes = 2 * NUM_BYTES + 4;
    for (size_t i = 0; i < n; i++)
        bytes += POLICY_KEY_BUF + LEASE_MEMBER_MAX + NUM_BYTES;
    call_alloc(out, n + 2 + 2 * n, bytes);
    out->nkeys = n;
    size_t used = 0;
    char key[POLICY_KEY_BUF], member[LEASE_MEMBER_MAX];
    for (size_t i = 0; i < n; i++) {
        const struct lease_ref *r = &refs[i];
        int k = policy_redis_key(cfg->key_prefix, r->policy, r->key, r->keylen, r->tier, NULL, key,
                                 sizeof key);
        if (k < 0)
            abort(); /* a decoded id's parts fit POLICY_KEY_BUF */
        push(out, &used, key, (size_t)k);
    }
    if (now_us >= 0)
        push_int(out, &used, now_us);
    else
        push(out, &used, "", 0);
    push(out, &used, renew ? SCRIPTS_LEASE_RENEW : SCRIPTS_LEASE_RELEASE, 1);
    for (size_t i = 0; i < n; i++) {
        push(out, &used, member, lease_member(&refs[i], member));
        push_int(out, &used, renew ? refs[i].timeout_us : 0);
    }
}

int scripts_decode_lease(const long long *ints, size_t n, size_t nleases, struct lease_outcome *out,
                         char *err, size_t errlen)
{
    if (n != 1 + 2 * nleases) {
        snprintf(err, errlen, "lease script returned %zu integers, expected %zu", n,
                 1 + 2 * nleases);
        return -1;
    }
    for (size_t i = 0; i < nleases; i++) {
        long long st = ints[1 + 2 * i];
        out[i].status = st == 1 ? LEASE_DONE : st == 2 ? LEASE_EXPIRED : LEASE_UNKNOWN;
        out[i].expires_us = ints[2 + 2 * i];
    }
    return 0;
}

void scripts_build_call(const struct config *cfg, const struct check_request *req, int64_t now_us,
                        struct script_call *out)
{
    memset(out, 0, sizeof *out);
    scripts_rebuild_call(cfg, req, now_us, out);
}

void scripts_build_lease_call(const struct config *cfg, int renew, const struct lease_ref *refs,
                              size_t n, int64_t now_us, struct script_call *out)
{
    memset(out, 0, sizeof *out);
    scripts_rebuild_lease_call(cfg, renew, refs, n, now_us, out);
}

void scripts_call_free(struct script_call *call)
{
    free(call->args); /* the one block of call_alloc */
    memset(call, 0, sizeof *call);
}

int scripts_decode_result(const long long *ints, size_t n, size_t ntiers, struct tier_result *out,
                          char *err, size_t errlen)
{
    if (n != SCRIPTS_RESULT_HEAD + SCRIPTS_RESULT_PER_TIER * ntiers) {
        snprintf(err, errlen, "script returned %zu integers, expected %zu", n,
                 SCRIPTS_RESULT_HEAD + SCRIPTS_RESULT_PER_TIER * ntiers);
        return -1;
    }
    for (size_t i = 0; i < ntiers; i++) {
        const long long *v = ints + SCRIPTS_RESULT_HEAD + SCRIPTS_RESULT_PER_TIER * i;
        out[i] = (struct tier_result){
            .allowed = v[0] != 0,
            .limit = v[1],
            .remaining = v[2],
            .reset_us = v[3],
            .retry_us = v[4],
            .delay_us = v[5],
            .cost_exceeds_limit = v[6] == 1,
            .now_us = ints[0],
        };
    }
    return 0;
}

int scripts_decode_call(const struct script_call *call, const long long *ints, size_t n,
                        struct tier_result *out, int64_t *granted, int64_t *until_us, char *err,
                        size_t errlen)
{
    *granted = *until_us = 0;
    if (call->block) {
        if (n < 2) {
            snprintf(err, errlen, "script returned %zu integers for a local lease call", n);
            return -1;
        }
        *granted = ints[n - 2];
        *until_us = ints[n - 1];
        n -= 2;
    }
    return scripts_decode_result(ints, n, call->ntiers, out, err, errlen);
}

int scripts_decode_dry_run_both(const long long *ints, size_t n, size_t ntiers,
                                struct tier_result *out, struct tier_result *if_denied, char *err,
                                size_t errlen)
{
    size_t extra = SCRIPTS_RESULT_PER_TIER_IF_DENIED * ntiers;
    size_t want = SCRIPTS_RESULT_HEAD +
                  (SCRIPTS_RESULT_PER_TIER + SCRIPTS_RESULT_PER_TIER_IF_DENIED) * ntiers;
    if (n != want) {
        snprintf(err, errlen, "script returned %zu integers, expected %zu", n, want);
        return -1;
    }
    if (scripts_decode_result(ints, n - extra, ntiers, out, err, errlen) < 0)
        return -1;
    const long long *v = ints + (n - extra);
    for (size_t i = 0; i < ntiers; i++) {
        if_denied[i] = out[i];
        if_denied[i].remaining = v[2 * i];
        if_denied[i].reset_us = v[2 * i + 1];
    }
    return 0;
}
