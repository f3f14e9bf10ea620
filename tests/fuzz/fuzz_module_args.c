/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_module_args.c: libFuzzer harness for the Redis module's argument
 * decoder (module/module_args.c) and the decision it feeds
 * (limiter/redis_state.c), taken the way module.c takes them. The input
 * is one `ratelimitd.check` call as '|'-separated fields: numkeys, the
 * keys, then ARGV (a single request, or "B" and a batch). A key's bytes
 * are also its stored state, so hostile states meet hostile tiers.
 *
 * The arrays are allocated at exactly the sizes module_args.h promises
 * suffice (no slack, unlike module.c), so ASan catches a decoder that
 * writes past them. Beyond ASan/UBSan/LSan, the harness aborts when a
 * documented contract breaks: a refusal's message is a terminated string
 * starting "ratelimitd: " within the buffer; a batch's counts add up to
 * its arguments; an accepted request has one check per (cost, policy)
 * pair, contiguous non-empty tier ranges that use every key once in
 * order, each tier within the daemon's bounds (module_args.h), and its
 * policy string's words read back (an independent tokeniser) as exactly
 * its shadow flag and tiers; a committed state fits REDIS_STATE_BUF and
 * carries an expiry Redis's SET accepts (> 0 ms).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limiter/common.h"
#include "limiter/redis_state.h"
#include "module/module_args.h"

#define MAX_FIELDS 4096
#define SERVER_TIME 1700000000123456LL /* Redis's TIME, for ARGV[1] "" */

static void check_refusal(const char *err, size_t errlen)
{
    if (!memchr(err, '\0', errlen) || strncmp(err, "ratelimitd: ", 12) != 0 || !err[12])
        abort();
}

static int space(char c)
{
    return c != '\0' && strchr(" \t\n\v\f\r", c) != NULL;
}

/* The n-th word of s (a policy string), or len 0 past the last. */
static struct module_arg nth_word(struct module_arg s, size_t n)
{
    size_t i = 0;
    for (size_t w = 0;; w++) {
        while (i < s.len && space(s.p[i]))
            i++;
        size_t from = i;
        while (i < s.len && !space(s.p[i]))
            i++;
        if (w == n || from == i)
            return (struct module_arg){s.p + from, i - from};
    }
}

static int word_is_int(struct module_arg w, int64_t v)
{
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%lld", (long long)v);
    size_t z = 0;
    while (z + 1 < w.len && w.p[z] == '0') /* leading zeros are allowed */
        z++;
    return (size_t)n == w.len - z && memcmp(buf, w.p + z, (size_t)n) == 0;
}

/* An accepted request, against the arguments it came from. */
static void check_request(const struct module_request *req, const struct module_arg *argv,
                          size_t na, size_t nk)
{
    size_t pairs = (na - na % 2) / 2;
    if (pairs < 1 || req->nchecks != pairs - 1 || req->ntiers != nk)
        abort();
    if (req->both && !req->dry_run)
        abort();
    if (!req->server_clock && (req->now < 0 || req->now > EXACT_MAX))
        abort();
    size_t next = 0;
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        struct module_arg policy = argv[3 + 2 * c];
        if (chk->first != next || chk->last <= chk->first || chk->cost < 0 ||
            chk->cost > EXACT_MAX || !word_is_int(argv[2 + 2 * c], chk->cost))
            abort();
        if (!word_is_int(nth_word(policy, 0), chk->shadow) || chk->shadow > 1)
            abort();
        for (size_t i = chk->first; i < chk->last; i++) {
            const struct tier *t = &req->tiers[i].t;
            size_t w = 1 + 5 * (i - chk->first);
            const char *name = policy_algorithm_name(t->algorithm);
            struct module_arg a = nth_word(policy, w);
            if (req->tiers[i].key != i || !redis_state_supports(t->algorithm) ||
                a.len != strlen(name) || memcmp(a.p, name, a.len) != 0 ||
                !word_is_int(nth_word(policy, w + 1), t->limit) ||
                !word_is_int(nth_word(policy, w + 2), t->window_us) ||
                !word_is_int(nth_word(policy, w + 3), t->burst) ||
                !word_is_int(nth_word(policy, w + 4), t->precision_us))
                abort();
            if (t->window_us < 1 || t->limit < 0 || t->burst < 0 || t->precision_us < 0 ||
                (t->limit == 0 && t->algorithm != ALG_FIXED_WINDOW))
                abort();
            int64_t cap = policy_tier_capacity(t);
            if ((t->limit > cap ? t->limit : cap) > EXACT_MAX / t->window_us)
                abort();
        }
        if (nth_word(policy, 1 + 5 * (chk->last - chk->first)).len != 0)
            abort(); /* a word the decoder did not take */
        next = chk->last;
    }
    if (next != nk)
        abort();
}

/* module.c's decide(), without Redis: every tier read from its key's
 * bytes, the figures (consumed as module.c's), and the commits of the
 * checks that allowed (a denied shadow check writes nothing), as module.c
 * makes them. */
static void decide(const struct module_request *req, const struct module_arg *keys, void *xs,
                   int *allowed)
{
    int64_t now = req->server_clock ? SERVER_TIME : req->now, fig[REDIS_STATE_FIGURES];
    int all = 1;
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        allowed[c] = 1;
        for (size_t i = chk->first; i < chk->last; i++) {
            const struct module_arg *k = &keys[req->tiers[i].key];
            allowed[c] &= redis_state_read(redis_state_tier_at(xs, i), &req->tiers[i].t, chk->cost,
                                           k->p, k->len, now);
        }
        all &= allowed[c] || chk->shadow;
    }
    /* A tier's cost counts as taken iff the request and its check allow
     * (module.c, check.lua): never a denied shadow check's, whose cost may
     * exceed its capacity, where cost * window may pass int64. */
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        for (size_t i = chk->first; i < chk->last; i++) {
            redis_state_figures(redis_state_tier_at(xs, i), now, all && allowed[c], fig);
            redis_state_figures(redis_state_tier_at(xs, i), now, 0, fig);
        }
    }
    for (size_t c = 0; all && !req->dry_run && c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        for (size_t i = chk->first; allowed[c] && chk->cost > 0 && i < chk->last; i++) {
            char buf[REDIS_STATE_BUF + 1];
            struct redis_expiry ex;
            buf[REDIS_STATE_BUF] = 'X';
            size_t len =
                redis_state_commit(redis_state_tier_at(xs, i), now, req->server_clock, buf, &ex);
            if (len == 0 || len >= REDIS_STATE_BUF || buf[REDIS_STATE_BUF] != 'X' || ex.ms <= 0)
                abort();
        }
    }
}

/* module.c's one_request(), with exactly the sizes the header promises. */
static void one_request(const struct module_arg *keys, size_t nk, const struct module_arg *argv,
                        size_t na)
{
    char err[MODULE_ERR_BUF];
    struct module_request req;
    req.checks = malloc((na / 2) * sizeof *req.checks + 1);
    req.tiers = malloc(nk * sizeof *req.tiers + 1);
    void *xs = malloc(nk * redis_state_tier_size() + 1);
    int *allowed = malloc((na / 2) * sizeof *allowed + 1);
    if (!req.checks || !req.tiers || !xs || !allowed)
        abort();
    if (module_args_request(argv, na, nk, &req, err, sizeof err) < 0) {
        check_refusal(err, sizeof err);
    } else {
        check_request(&req, argv, na, nk);
        decide(&req, keys, xs, allowed);
    }
    free(allowed);
    free(xs);
    free(req.tiers);
    free(req.checks);
}

static void batch(const struct module_arg *keys, size_t nkeys, const struct module_arg *argv,
                  size_t na)
{
    char err[MODULE_ERR_BUF];
    size_t n;
    if (module_args_batch_count(argv, na, &n, err, sizeof err) < 0) {
        check_refusal(err, sizeof err);
        return;
    }
    if (n < 1 || 2 + 2 * n > na)
        abort();
    size_t *nk = malloc(2 * n * sizeof *nk), *nargs = nk + n;
    if (!nk)
        abort();
    if (module_args_batch_counts(argv, na, nkeys, n, nk, nargs, err, sizeof err) < 0) {
        check_refusal(err, sizeof err);
    } else {
        size_t ko = 0, ao = 2 + 2 * n;
        for (size_t r = 0; r < n; r++) {
            if (nk[r] > nkeys - ko || nargs[r] > na - ao)
                abort();
            one_request(keys + ko, nk[r], argv + ao, nargs[r]);
            ko += nk[r], ao += nargs[r];
        }
        if (ko != nkeys || ao != na)
            abort();
    }
    free(nk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct module_arg f[MAX_FIELDS]; /* scratch, rewritten per input */
    const char *p = (const char *)data, *end = p + size;
    size_t nf = 0;
    for (;;) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        if (nf == MAX_FIELDS)
            return 0;
        f[nf++] = (struct module_arg){p, (size_t)((bar ? bar : end) - p)};
        if (!bar)
            break;
        p = bar + 1;
    }
    /* numkeys as module.c's check_command reads it. */
    size_t numkeys = 0;
    if (f[0].len == 0 || f[0].len > 6)
        return 0;
    for (size_t i = 0; i < f[0].len; i++) {
        if (f[0].p[i] < '0' || f[0].p[i] > '9')
            return 0;
        numkeys = numkeys * 10 + (size_t)(f[0].p[i] - '0');
    }
    if (numkeys > nf - 1)
        return 0;
    const struct module_arg *keys = f + 1, *argv = f + 1 + numkeys;
    size_t na = nf - 1 - numkeys;
    if (na >= 1 && argv[0].len == 1 && argv[0].p[0] == 'B')
        batch(keys, numkeys, argv, na);
    else
        one_request(keys, numkeys, argv, na);
    return 0;
}
