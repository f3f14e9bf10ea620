/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module_args.c: decodes `ratelimitd.check`'s KEYS and ARGV as lua/check.lua
 * does (decide_batch, decide, parse, parse_policy, parse_tier). See
 * module_args.h for the contract and where it is stricter than the script.
 *
 * Owns: the grammar and its messages. Does not own: the decision.
 */
#include "module/module_args.h"

#include <stdio.h>
#include <string.h>

#include "limiter/common.h"
#include "limiter/redis_state.h"

#define FAIL(...) (snprintf(err, errlen, "ratelimitd: " __VA_ARGS__), -1)

/* a as a plain decimal integer in [least, 2^53] (a '-' first only if
 * least < 0, down to -2^53); 0, or -1. */
static int int_of(struct module_arg a, int64_t least, int64_t *v)
{
    int64_t n = 0;
    size_t i = least < 0 && a.len > 0 && a.p[0] == '-';
    if (a.len == i)
        return -1;
    for (; i < a.len; i++) {
        if (a.p[i] < '0' || a.p[i] > '9')
            return -1;
        n = n * 10 + (a.p[i] - '0');
        if (n > EXACT_MAX)
            return -1;
    }
    if (a.p[0] == '-')
        n = -n;
    if (n < least)
        return -1;
    *v = n;
    return 0;
}

/* "ARGV[i] must be an integer >= least", naming argument i (1-based). */
static int bad_int(const struct module_arg *argv, size_t na, size_t i, int64_t least, char *err,
                   size_t errlen)
{
    if (i > na)
        return FAIL("ARGV[%zu] must be an integer >= %lld, got nil", i, (long long)least);
    int shown = argv[i - 1].len > 40 ? 40 : (int)argv[i - 1].len;
    return FAIL("ARGV[%zu] must be an integer >= %lld, got %.*s", i, (long long)least, shown,
                argv[i - 1].p);
}

int module_args_batch_count(const struct module_arg *argv, size_t na, size_t *n, char *err,
                            size_t errlen)
{
    int64_t v;
    if (na < 2 || int_of(argv[1], 1, &v) < 0)
        return bad_int(argv, na, 2, 1, err, errlen);
    /* Checked before any count is read: a huge n allocates nothing. */
    if ((uint64_t)v > (na - 2) / 2)
        return FAIL("a batch of %lld requests needs %lld counts, got %zu arguments", (long long)v,
                    (long long)v * 2, na - 2);
    *n = (size_t)v;
    return 0;
}

int module_args_batch_counts(const struct module_arg *argv, size_t na, size_t nkeys, size_t n,
                             size_t *nk, size_t *nargs, char *err, size_t errlen)
{
    uint64_t koff = 0, aoff = 2 + 2 * (uint64_t)n;
    for (size_t r = 0; r < n; r++) {
        int64_t k, a;
        if (int_of(argv[2 + 2 * r], 0, &k) < 0)
            return bad_int(argv, na, 3 + 2 * r, 0, err, errlen);
        if (int_of(argv[3 + 2 * r], 0, &a) < 0)
            return bad_int(argv, na, 4 + 2 * r, 0, err, errlen);
        nk[r] = (size_t)k, nargs[r] = (size_t)a;
        koff += (uint64_t)k, aoff += (uint64_t)a; /* each <= 2^53: no wrap in n < 2^31 */
    }
    if (koff != nkeys || aoff != na)
        return FAIL("a batch of %zu requests takes %llu keys and %llu arguments, got %zu and %zu",
                    n, (unsigned long long)koff, (unsigned long long)aoff, nkeys, na);
    return 0;
}

/* The next whitespace-separated word of s[*at..len) (Lua's %S+), or a
 * zero-length one at the end. */
static struct module_arg word(struct module_arg s, size_t *at)
{
    size_t i = *at;
    while (i < s.len && strchr(" \t\n\v\f\r", s.p[i]) && s.p[i])
        i++;
    size_t from = i;
    while (i < s.len && !(strchr(" \t\n\v\f\r", s.p[i]) && s.p[i]))
        i++;
    *at = i;
    return (struct module_arg){s.p + from, i - from};
}

static int is(struct module_arg w, const char *s)
{
    return w.len == strlen(s) && memcmp(w.p, s, w.len) == 0;
}

/* A calendar tier's window word, "p:s:e:n": four ascending integers up to
 * 2^53 (calendar_window.lua's parse_window). 0, or -1. */
static int window_bounds(struct module_arg w, int64_t b[4])
{
    size_t at = 0;
    for (int i = 0; i < 4; i++) {
        size_t from = at;
        while (at < w.len && w.p[at] != ':')
            at++;
        if (int_of((struct module_arg){w.p + from, at - from}, 0, &b[i]) < 0 ||
            (i > 0 && b[i - 1] >= b[i]) || (at < w.len) != (i < 3))
            return -1;
        at++;
    }
    return 0;
}

/* One tier from its five words w[0..5). */
static int parse_tier(struct module_arg s, const struct module_arg *w, struct module_tier *mt,
                      char *err, size_t errlen)
{
    char name[32];
    int shown = s.len > 80 ? 80 : (int)s.len;
    struct tier *t = &mt->t;
    memset(mt, 0, sizeof *mt);
    if (is(w[0], "calendar_window")) {
        /* A fixed_window tier with a calendar, whose unit only marks it
         * (tier_ops): the bounds sent pick the window, never a zone. */
        mt->calendar = 1;
        t->algorithm = ALG_FIXED_WINDOW;
        t->calendar.unit = CALENDAR_DAY;
        if (int_of(w[1], 0, &t->limit) < 0 || window_bounds(w[2], mt->bounds) < 0 ||
            int_of(w[3], 0, &t->burst) < 0 || int_of(w[4], 0, &t->precision_us) < 0)
            return FAIL("limit, window_us, burst and precision_us must be integers (window >= "
                        "1, limit >= 1, or >= 0 for fixed_window) in \"%.*s\"",
                        shown, s.p);
        /* its arithmetic multiplies nothing by the window */
        t->window_us = mt->bounds[2] - mt->bounds[1];
        return 0;
    }
    /* A NUL would end the name early: "gcra\0x" is no algorithm to the
     * script, so none here either. */
    if (w[0].len >= sizeof name || memchr(w[0].p, '\0', w[0].len))
        return FAIL("unknown algorithm in \"%.*s\"", shown, s.p);
    memcpy(name, w[0].p, w[0].len);
    name[w[0].len] = '\0';
    if (policy_algorithm_from_name(name, &t->algorithm) < 0)
        return FAIL("unknown algorithm %s in \"%.*s\"", name, shown, s.p);
    /* A fixed window may have a limit of 0 (check.lua's parse_tier). */
    if (int_of(w[1], t->algorithm == ALG_FIXED_WINDOW ? 0 : 1, &t->limit) < 0 ||
        int_of(w[2], 1, &t->window_us) < 0 || int_of(w[3], 0, &t->burst) < 0 ||
        int_of(w[4], 0, &t->precision_us) < 0)
        return FAIL("limit, window_us, burst and precision_us must be integers (window >= 1, "
                    "limit >= 1, or >= 0 for fixed_window) in \"%.*s\"",
                    shown, s.p);
    /* The daemon's bound on the buckets (policy_tier_validate): a hash
     * whose live buckets' units add up within int64. */
    if (t->algorithm == ALG_SLIDING_WINDOW_BUCKETS &&
        (t->precision_us < 1 || t->window_us % t->precision_us != 0 ||
         t->window_us / t->precision_us > MODULE_MAX_BUCKETS))
        return FAIL("precision_us must divide window_us (in at most %d buckets) in \"%.*s\"",
                    MODULE_MAX_BUCKETS, shown, s.p);
    /* concurrency: the window word is the lease timeout, which its steps
     * read (policy_tier_span_us) */
    if (t->algorithm == ALG_CONCURRENCY)
        t->lease_timeout_us = t->window_us;
    /* The daemon's bound on a log (a member per unit: a cost is that many
     * ZADDs, which must stay within what one call may take of Redis). */
    if (t->algorithm == ALG_SLIDING_WINDOW_LOG && t->limit > MODULE_MAX_LOG)
        return FAIL("limit must be at most %d for sliding_window_log in \"%.*s\"", MODULE_MAX_LOG,
                    shown, s.p);
    /* The daemon's bound (policy_tier_validate): every product of the
     * arithmetic stays exact, and within int64. Where the scripts multiply
     * the window by nothing (a fixed window of 10 M an hour), there is no
     * product to bound: the script decides it exactly, and so does this. */
    int64_t factor = policy_tier_window_factor(t);
    if (factor > 0 && factor > EXACT_MAX / t->window_us)
        return FAIL("limit or capacity times window_us must be at most 2^53 in \"%.*s\"", shown,
                    s.p);
    return 0;
}

/* Check c's policy string: its shadow flag and tiers, appended to req's,
 * each taking the next keys (*nkeys so far; sliding_window_log takes two,
 * the set and its sequence counter, every other algorithm one). */
static int parse_policy(struct module_arg s, size_t keys_cap, struct module_request *req,
                        struct module_check *c, size_t *nkeys, char *err, size_t errlen)
{
    size_t at = 0;
    int shown = s.len > 80 ? 80 : (int)s.len;
    struct module_arg shadow = word(s, &at);
    if (!is(shadow, "0") && !is(shadow, "1"))
        return FAIL("a policy is \"shadow\" then 5 words per tier, got \"%.*s\"", shown, s.p);
    c->shadow = is(shadow, "1");
    c->first = req->ntiers;
    for (;;) {
        struct module_arg w[5];
        w[0] = word(s, &at);
        if (w[0].len == 0)
            break;
        for (int i = 1; i < 5; i++)
            w[i] = word(s, &at);
        if (w[4].len == 0)
            return FAIL("a policy is \"shadow\" then 5 words per tier, got \"%.*s\"", shown, s.p);
        if (req->ntiers >= keys_cap)
            return FAIL("the checks need more than the %zu keys given", keys_cap);
        struct module_tier *t = &req->tiers[req->ntiers];
        if (parse_tier(s, w, t, err, errlen) < 0)
            return -1;
        t->key = *nkeys;
        *nkeys += (size_t)policy_algorithm_nkeys(t->t.algorithm);
        req->ntiers++;
    }
    if (req->ntiers == c->first)
        return FAIL("a policy is \"shadow\" then 5 words per tier, got \"%.*s\"", shown, s.p);
    c->last = req->ntiers;
    return 0;
}

/* The lease nonce: 22 of [A-Za-z0-9_-]. */
static int nonce_valid(struct module_arg a)
{
    if (a.len != 22)
        return 0;
    for (size_t i = 0; i < a.len; i++) {
        char ch = a.p[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

/* ARGV[1] and ARGV[2]: the time and the mode. */
static int parse_head(const struct module_arg *argv, size_t na, struct module_request *req,
                      char *err, size_t errlen)
{
    req->server_clock = na >= 1 && argv[0].len == 0;
    if (!req->server_clock && (na < 1 || int_of(argv[0], 0, &req->now) < 0))
        return bad_int(argv, na, 1, 0, err, errlen);
    struct module_arg mode = na >= 2 ? argv[1] : (struct module_arg){"", 0};
    req->lease_op = is(mode, "r") ? 'r' : is(mode, "n") ? 'n' : 0;
    req->block = 0;
    req->dry_run = req->both = req->report = 0;
    if (req->lease_op)
        return 0;
    if (mode.len > 1 && (mode.p[0] == 'L' || mode.p[0] == 'G') &&
        int_of((struct module_arg){mode.p + 1, mode.len - 1}, 1, &req->block_n) == 0)
        req->block = mode.p[0];
    else if (!is(mode, "0") && !is(mode, "1") && !is(mode, "2") && !is(mode, "3"))
        return FAIL("ARGV[2] must be 0, 1, 2, 3, r, n, L<want> or G<taken>, got %.*s",
                    mode.len > 40 ? 40 : (int)mode.len, mode.p);
    req->both = is(mode, "2");
    req->report = is(mode, "3");
    req->dry_run = !is(mode, "0") && !req->block;
    return 0;
}

int module_args_lease_timeout(const struct module_arg *argv, size_t na, size_t i, int64_t *timeout,
                              char *err, size_t errlen)
{
    if (int_of(argv[3 + 2 * i], 0, timeout) < 0)
        return bad_int(argv, na, 4 + 2 * i, 0, err, errlen);
    return 0;
}

int module_args_request(const struct module_arg *argv, size_t na, size_t nkeys,
                        struct module_request *req, char *err, size_t errlen)
{
    size_t nargs = na, used = 0;
    req->nchecks = req->ntiers = 0;
    req->has_nonce = 0;
    if (parse_head(argv, na, req, err, errlen) < 0)
        return -1;
    if (req->lease_op) {
        if (na != 2 + 2 * nkeys)
            return FAIL("a lease operation takes a member and a timeout per key; got %zu "
                        "arguments for %zu keys",
                        na, nkeys);
        return 0;
    }
    /* An odd count: the last is the lease nonce (concurrency's only). */
    if (nargs % 2 == 1) {
        nargs--;
        if (!nonce_valid(argv[nargs]))
            return FAIL("the lease nonce must be 22 of [A-Za-z0-9_-]");
        memcpy(req->nonce, argv[nargs].p, 22);
        req->nonce[22] = '\0';
        req->has_nonce = 1;
    }
    if (nargs < 2)
        return FAIL("ARGV is now, dry_run, then cost and policy per check (and the lease "
                    "nonce); got %zu arguments",
                    na);
    for (size_t c = 0; c < nargs / 2 - 1; c++) {
        struct module_check *chk = &req->checks[c];
        int64_t least = req->report ? -EXACT_MAX : req->block ? 1 : 0;
        if (int_of(argv[2 + 2 * c], least, &chk->cost) < 0)
            return bad_int(argv, na, 3 + 2 * c, least, err, errlen);
        if (parse_policy(argv[3 + 2 * c], nkeys, req, chk, &used, err, errlen) < 0)
            return -1;
        req->nchecks++;
    }
    if (used != nkeys)
        return FAIL("the checks need %zu keys, got %zu", used, nkeys);
    if (req->block && req->nchecks != 1)
        return FAIL("a lease call takes exactly one check, got %zu", req->nchecks);
    for (size_t i = 0; req->block && i < req->ntiers; i++)
        if (!policy_algorithm_leases(req->tiers[i].t.algorithm))
            return FAIL("%s cannot be leased", policy_algorithm_name(req->tiers[i].t.algorithm));
    return 0;
}
