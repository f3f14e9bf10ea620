/*
 * policy.h: policies, their tiers and the algorithms they name; validation
 * of a tier's numbers; the encoding of Redis keys. No I/O.
 *
 * A policy is immutable once its config snapshot is built (config.c owns
 * parsing; this module owns what a valid policy is).
 */
#ifndef RATELIMITD_POLICY_H
#define RATELIMITD_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "key_template.h"
#include "util.h"

#define POLICY_NAME_MAX 64
#define POLICY_MAX_TIERS 16
#define POLICY_KEY_MAX 1024 /* bytes of a caller's key, before encoding */

enum algorithm {
    ALG_FIXED_WINDOW,
    ALG_SLIDING_WINDOW_LOG,
    ALG_SLIDING_WINDOW_COUNTER,
    ALG_SLIDING_WINDOW_BUCKETS,
    ALG_TOKEN_BUCKET,
    ALG_GCRA,
    ALG_LEAKY_BUCKET,
    ALG__COUNT
};

/* What a check gets when Redis cannot decide: allowed (degraded), 503, or a
 * decision from this daemon's memory (limiter_local.c). */
enum failure_mode { FAILURE_OPEN, FAILURE_CLOSED, FAILURE_LOCAL };

/* A forward-auth request that lacks a part of its key (auth.c): allowed
 * without counting, counted under KEY_TEMPLATE_MISSING, or 400. */
enum missing_key { MISSING_KEY_SKIP, MISSING_KEY_SHARED, MISSING_KEY_REJECT };

struct tier {
    char name[POLICY_NAME_MAX + 1];
    enum algorithm algorithm;
    int64_t limit;        /* requests per window; > 0 */
    int64_t window_us;    /* > 0 */
    int64_t burst;        /* token_bucket/gcra: capacity (0 = limit); leaky_bucket: queue (0 = none) */
    int64_t precision_us; /* sliding_window_buckets only; divides window_us */
};

struct policy {
    char name[POLICY_NAME_MAX + 1];
    enum failure_mode failure_mode;
    int shadow;
    int deny_cache; /* its Redis denials may be answered locally (deny_cache.h) */
    struct key_template key;      /* forward-auth: the key from the request */
    enum missing_key missing_key; /* forward-auth: a request lacking part of it */
    int64_t deny_status;          /* forward-auth's status for a denial (the top-level
                                   * deny_status unless the policy sets its own) */
    size_t ntiers;
    struct tier tiers[POLICY_MAX_TIERS];
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

/* True if s is a valid policy or tier name: [A-Za-z0-9_.-]{1,64}. */
int policy_name_valid(const char *s);

/* The capacity reported as `limit`: burst (or limit) for the bucket
 * algorithms, burst + 1 for leaky_bucket, limit otherwise. */
int64_t policy_tier_capacity(const struct tier *t);

/* Checks a tier's numbers against the algorithm's rules (burst only where it
 * means something, precision divides window, products small enough for exact
 * arithmetic in Lua's doubles...). Returns 0 or -1 with a message naming the
 * offending field. */
int policy_tier_validate(const struct tier *t, char *err, size_t errlen) RL_WUR;

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
                     const char *tier, const char *suffix, char *out, size_t outlen);

#endif
