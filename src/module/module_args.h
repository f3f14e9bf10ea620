/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module_args.h: the arguments of `ratelimitd.check`, decoded: exactly the
 * Functions' KEYS and ARGV (lua/check.lua): a batch's framing ("B", the
 * count, two counts per request) and each request's now, mode, costs,
 * policies and lease nonce. Pure: no Redis call, no allocation (the caller
 * sizes the arrays from the counts), so that no argument list can do more
 * than answer an error.
 *
 * Owns: the argument grammar and its error messages (the script's words).
 * Stricter than the script where the daemon never sends otherwise:
 * integers are plain decimals; a tier's limit (or capacity) times its
 * window must stay within 2^53 where the scripts multiply them
 * (policy_tier_window_factor, the daemon's rule: not for a fixed or
 * calendar window, a log, buckets or concurrency, whose arithmetic
 * multiplies neither); a
 * sliding_window_buckets window holds at most MODULE_MAX_BUCKETS buckets;
 * a sliding_window_log's limit is at most MODULE_MAX_LOG: as the daemon's
 * validation guarantees.
 * Does not own: the decision (limiter/redis_state.h), Redis calls.
 */
#ifndef RATELIMITD_MODULE_ARGS_H
#define RATELIMITD_MODULE_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"

#define MODULE_ERR_BUF 200
#define MODULE_MAX_BUCKETS 1000 /* the daemon's MAX_BUCKETS (config/policy.c) */
#define MODULE_MAX_LOG 1000000  /* the daemon's LOG_LIMIT_MAX (config/policy.c) */

struct module_arg {
    const char *p;
    size_t len;
};

struct module_tier {
    struct tier t;
    size_t key;        /* its key (a log's set, then its counter at key + 1):
                          an index into the request's keys */
    int calendar;      /* a calendar_window tier: bounds hold its "p:s:e:n" */
    int64_t bounds[4]; /* (t is then a fixed_window with a calendar unit) */
};

struct module_check {
    int shadow;
    int64_t cost;
    size_t first, last; /* its tiers: [first, last) */
};

struct module_request {
    int server_clock; /* now is Redis's TIME (ARGV[1] "") */
    char block;       /* 'L' (take a block of up to block_n) or 'G' (give
                         back one taken at block_n): ARGV[2] "L<n>", "G<n>";
                         then one check, every tier able to lease */
    int64_t block_n;
    char lease_op;  /* 'r' (release) or 'n' (renew): ARGV[2]; then
                       nothing below but now is decoded (see
                       module_args_lease_timeout) */
    char nonce[23]; /* the lease nonce, NUL-terminated, if has_nonce */
    int has_nonce;
    int64_t now; /* µs, unless server_clock */
    int dry_run; /* "1" or "2" */
    int both;    /* "2": the figures as if denied follow */
    int report;  /* "3": a report; costs may be < 0 (>= -2^53) */
    size_t nchecks, ntiers;
    struct module_check *checks; /* the caller's: (nargs / 2) of them */
    struct module_tier *tiers;   /* the caller's: nkeys of them */
};

/* The count of a batch's requests (argv[1] "B"): *n >= 1 with 2 + 2n <= na.
 * Returns 0, or -1 with err. */
int module_args_batch_count(const struct module_arg *argv, size_t na, size_t *n, char *err,
                            size_t errlen) __attribute__((warn_unused_result));

/* The batch's per-request counts of KEYS (nk[r]) and ARGV (nargs[r]), which
 * must add up to nkeys and na. Returns 0, or -1 with err. */
int module_args_batch_counts(const struct module_arg *argv, size_t na, size_t nkeys, size_t n,
                             size_t *nk, size_t *nargs, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* One request: argv[0..na) with nkeys keys. req->checks must hold na / 2
 * entries, req->tiers nkeys. Returns 0, or -1 with err. */
int module_args_request(const struct module_arg *argv, size_t na, size_t nkeys,
                        struct module_request *req, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* A lease call's i-th (0-based) timeout, ARGV[4 + 2i], an integer >= 0;
 * its member is ARGV[3 + 2i]. The caller checked the count first
 * (module_args_request): decoded per lease as the script does, so that a
 * bad one fails after the leases before it were released or renewed.
 * Returns 0, or -1 with err. */
int module_args_lease_timeout(const struct module_arg *argv, size_t na, size_t i, int64_t *timeout,
                              char *err, size_t errlen) __attribute__((warn_unused_result));

#endif
