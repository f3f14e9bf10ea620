/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.h: policies, their tiers and the algorithms they name; validation
 * of a tier's numbers; the encoding of Redis keys. No I/O.
 *
 * A policy is immutable once its config snapshot is built (config_policies.c owns
 * parsing; this module owns what a valid policy is).
 */
#ifndef RATELIMITD_POLICY_H
#define RATELIMITD_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "config/key_template.h"
#include "lib/calendar.h"
#include "lib/util.h"

#define POLICY_NAME_MAX 64
#define POLICY_MAX_TIERS 16
#define POLICY_KEY_MAX 1024        /* bytes of a caller's key, before encoding */
#define POLICY_MAX_OVERRIDES 10000 /* per policy; a variant takes about 2 KiB */

enum algorithm {
    ALG_FIXED_WINDOW,
    ALG_SLIDING_WINDOW_LOG,
    ALG_SLIDING_WINDOW_COUNTER,
    ALG_SLIDING_WINDOW_BUCKETS,
    ALG_TOKEN_BUCKET,
    ALG_GCRA,
    ALG_LEAKY_BUCKET,
    ALG_CONCURRENCY,
    ALG__COUNT
};

/* What a check gets when Redis cannot decide: allowed (degraded), 503, or a
 * decision from this daemon's memory (limiter_local.c). */
enum failure_mode { FAILURE_OPEN, FAILURE_CLOSED, FAILURE_LOCAL };

/* Which rate-limit header fields an answer carries (README "Headers"):
 * X-RateLimit-* (the default), the IETF RateLimit and RateLimit-Policy
 * structured fields, both sets, or neither. HEADERS_INHERIT is a policy's
 * value until config_policies.c replaces it with the top-level one; no loaded
 * policy holds it. */
enum header_mode { HEADERS_X_RATELIMIT, HEADERS_IETF, HEADERS_BOTH, HEADERS_NONE, HEADERS_INHERIT };
/* A forward-auth request that lacks a part of its key (auth.c): allowed
 * without counting, counted under KEY_TEMPLATE_MISSING, or 400. */
enum missing_key { MISSING_KEY_SKIP, MISSING_KEY_SHARED, MISSING_KEY_REJECT };

struct tier {
    char name[POLICY_NAME_MAX + 1];
    enum algorithm algorithm;
    int64_t limit;     /* requests per window; > 0 */
    int64_t window_us; /* > 0 */
    int64_t burst;     /* token_bucket/gcra: capacity (0 = limit); leaky_bucket: queue (0 = none) */
    int64_t precision_us;     /* sliding_window_buckets only; divides window_us */
    int64_t lease_timeout_us; /* concurrency only (its window_us is 0): how long a
                               * lease lives unless renewed or released */
    /* fixed_window only: calendar windows in a zone instead of window_us
     * (unit CALENDAR_NONE: none). window_us then holds the unit's nominal
     * length (calendar_max_span_us), for whatever compares tiers by it. The
     * zone is owned by the config snapshot. */
    struct calendar_spec calendar;
};

struct policy_overrides;

struct policy {
    char name[POLICY_NAME_MAX + 1];
    enum failure_mode failure_mode;
    int shadow;
    int deny_cache; /* its Redis denials may be answered locally (deny_cache.h) */
    /* Local leases of hot keys (core/local_lease.h): 0 off, POLICY_LEASE_AUTO,
     * else the units of a block. Only for policies whose every tier leases
     * (policy_leases). */
    int64_t lease;
    enum header_mode headers;     /* its own `headers:` or the top-level one */
    struct key_template key;      /* forward-auth: the key from the request */
    enum missing_key missing_key; /* forward-auth: a request lacking part of it */
    int64_t deny_status;          /* forward-auth's status for a denial (the top-level
                                   * deny_status unless the policy sets its own) */
    size_t ntiers;
    struct tier tiers[POLICY_MAX_TIERS];
    /* Other tiers for some keys (policy_for_key), or NULL. Owned by the
     * config snapshot (config_free calls policy_overrides_free); a copy of
     * the struct shares it. A variant's own overrides are always NULL. */
    struct policy_overrides *overrides;
};

/* The algorithm's name as written in the policy file and sent to the script. */
const char *policy_algorithm_name(enum algorithm a);

/* Looks an algorithm up by name; -1 if unknown. */
int policy_algorithm_from_name(const char *name, enum algorithm *out) RL_WUR;

/* How many Redis keys one tier of this algorithm uses. */
int policy_algorithm_nkeys(enum algorithm a);

/* 1 if the algorithm shapes rather than only limits: an allowed request
 * may be told to wait (delay_us > 0; leaky_bucket), else 0. */
int policy_algorithm_has_delay(enum algorithm a);

/* 1 if a report (POST /report) can charge a tier of this algorithm a cost
 * with no decision, past its limit (a debt later checks wait out), else 0. */
int policy_algorithm_reports(enum algorithm a);

/* 1 if a report can also give back (a cost < 0) exactly, never below
 * nothing used: fixed_window, token_bucket, gcra, leaky_bucket; else 0. */
int policy_algorithm_refunds(enum algorithm a);
/* The span the scripts receive as a tier's window_us: the lease timeout for
 * concurrency, the window for every other algorithm. */
int64_t policy_tier_span_us(const struct tier *t);

/* `lease: auto` (struct policy's lease): the block sized from the rate seen. */
#define POLICY_LEASE_AUTO (-1)

/* 1 if a tier of algorithm a can hand out blocks of units that a daemon
 * spends locally and exactly (a local lease, core/local_lease.h): the
 * counters whose units, once taken, stay taken until their window ends or
 * the bucket refills: fixed_window (calendar windows included),
 * token_bucket, gcra. Else 0 (docs/algorithms.md says why). */
int policy_algorithm_leases(enum algorithm a);

/* 1 if every tier of p (not its overrides) leases, else 0. */
int policy_leases(const struct policy *p);

/* 1 if p (not its overrides) has a concurrency tier, else 0. */
int policy_has_concurrency(const struct policy *p);

/* 1 if p or one of its overrides' variants has a concurrency tier: a
 * policy whose checks may take leases. */
int policy_may_lease(const struct policy *p);

/* True if s is a valid policy or tier name: [A-Za-z0-9_.-]{1,64}. */
int policy_name_valid(const char *s);

/* The capacity reported as `limit`: burst (or limit) for the bucket
 * algorithms, burst + 1 for leaky_bucket, limit otherwise. */
int64_t policy_tier_capacity(const struct tier *t);

/* What the scripts multiply t's window_us by (its capacity, or its limit),
 * a product that must stay within 2^53 for their doubles to be exact; 0
 * if they multiply the window by nothing (fixed_window, calendar windows,
 * sliding_window_log, sliding_window_buckets, concurrency). */
int64_t policy_tier_window_factor(const struct tier *t);

/* Whether a written `burst: 0` means something of its own for algorithm a
 * (leaky_bucket: no queue), by its row of the algorithm table. struct tier
 * cannot tell it from no burst (0 is the default), so the config refuses a
 * written 0 for the algorithms where it would silently mean no burst. */
int policy_burst_zero_meaningful(enum algorithm a);

/* Checks a tier's numbers against the algorithm's rules (burst only where it
 * means something, precision divides window, products small enough for exact
 * arithmetic in Lua's doubles...). Returns 0 or -1 with a message naming the
 * offending field. */
int policy_tier_validate(const struct tier *t, char *err, size_t errlen) RL_WUR;

/*
 * Per-key overrides. A policy may give other tiers to one exact key or to
 * every key that starts with a prefix. Each override is compiled at load
 * into a variant: a struct policy with the same name and per-policy
 * settings (failure_mode, shadow, deny_cache) and the override's tiers.
 * An exact key wins over a prefix, the longest prefix over shorter ones.
 *
 * An override changes a key's limits, never whose state it is: the Redis
 * keys stay <prefix>{<policy>:<encoded key>}:<tier> with the variant's
 * tier names, so two keys under one prefix override count separately.
 */

/* The policy a check of key (keylen bytes, may hold any byte) is decided
 * by: p itself, or one of p's variants (owned by p's overrides, valid as
 * long as p). A policy without overrides costs one branch. */
const struct policy *policy_for_key(const struct policy *p, const char *key, size_t keylen);

/* A new, empty set of overrides; the caller owns it (policy_overrides_free). */
struct policy_overrides *policy_overrides_new(void);

/* Adds an override for one exact key (is_prefix 0) or a prefix (1) of len
 * bytes, with ntiers (1..POLICY_MAX_TIERS) tiers already validated. The
 * text is copied. Lookups are not ready until policy_overrides_index and
 * policy_overrides_inherit. */
void policy_overrides_add(struct policy_overrides *o, int is_prefix, const char *text, size_t len,
                          const struct tier *tiers, size_t ntiers);

/* How many overrides have been added. */
size_t policy_overrides_count(const struct policy_overrides *o);

/*
 * Makes o (NULL: nothing to do) ready for lookups: sorts and indexes it.
 * Two overrides with the same key, or the same prefix, are ambiguous:
 * returns -1 with *first and *second set to their indexes in the order
 * they were added (*second the later one, the earliest such in that
 * order). Returns 0 otherwise. Add nothing afterwards.
 */
int policy_overrides_index(struct policy_overrides *o, size_t *first, size_t *second) RL_WUR;

/*
 * Gives each variant of p's overrides (if any) p's name and every
 * per-policy setting, keeping the override's tiers: a copy of *p, so a
 * setting added to struct policy later follows without being listed. Call
 * it last, once all of p's settings are final (defaults taken from
 * top-level fields included), and again if they change.
 */
void policy_overrides_inherit(const struct policy *p);

/* 1 if a and b decide every check alike (settings, tiers, overrides),
 * else 0: what a reload's log line calls a changed policy. */
int policy_equal(const struct policy *a, const struct policy *b);

/* Frees the overrides and their variants; NULL is a no-op. */
void policy_overrides_free(struct policy_overrides *o);

/*
 * Redis keys. Every key of one (policy, caller key) shares the Cluster hash
 * tag {<policy>:<encoded key>}, so one check can always run on one node:
 *
 *     <prefix>{<policy>:<encoded key>}:<tier>[:<suffix>]
 *
 * The caller's key is percent-encoded: every byte outside a small safe set
 * (which excludes '%', '{', '}', glob characters, spaces and control bytes)
 * becomes %XX. The encoding is injective and the parts are separated by
 * characters that cannot occur inside them, so two distinct (policy, key,
 * tier) never share a Redis key.
 *
 * Writes the key into out (NUL-terminated) and returns its length, or -1 if
 * out is too small. POLICY_KEY_BUF is always enough.
 */
#define POLICY_KEY_BUF (3 * POLICY_KEY_MAX + 3 * POLICY_NAME_MAX + 256)
int policy_redis_key(const char *prefix, const char *policy, const char *key, size_t keylen,
                     const char *tier, const char *suffix, char *out, size_t outlen) RL_WUR;

/* The k-th Redis key (0 <= k < policy_algorithm_nkeys) of tier t of
 * (policy, key): policy_redis_key with the algorithm's suffix for that key
 * (sliding_window_log's second key, its sequence counter, is ":seq"). The
 * one place that names a tier's keys: the scripts' KEYS and a reset's DEL
 * must never disagree. Returns as policy_redis_key. */
int policy_tier_key(const char *prefix, const char *policy, const char *key, size_t keylen,
                    const struct tier *t, int k, char *out, size_t outlen) RL_WUR;

#endif
