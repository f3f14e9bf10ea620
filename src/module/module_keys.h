/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module_keys.h: a tier's state in Redis, for ratelimitd.check: read into
 * limiter/redis_state.h's decision, and its write made and replicated;
 * and the lease calls' one lease, read and written.
 * Strings go through the Modules API's key functions (OpenKey,
 * StringDMA, StringTruncate, SetAbsExpire), not through RedisModule_Call,
 * whose fake client, command lookup, argument objects and parsed reply
 * cost Redis more than the decision itself (bench/module_cost.py
 * measures it); each write is replicated as the command the Functions'
 * effects are (SET key value PXAT ms), so that replicas and the AOF get
 * the same bytes, never the module's command. Hashes, sliding_window_log's
 * and concurrency's sorted sets and the lease calls go through
 * RedisModule_Call, each write with "!", so that it replicates as itself.
 *
 * Owns: the reads and writes of a tier's keys (a log's set and its
 * sequence counter, a concurrency tier's set of leases), a lease call's
 * ZSCORE and write, their replication, and the error messages of a read
 * or write Redis would refuse.
 * Does not own: the decision (limiter/redis_state.h), the arguments
 * (module_args.h), the reply (module.c).
 */
#ifndef RATELIMITD_MODULE_KEYS_H
#define RATELIMITD_MODULE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "limiter/redis_state.h"
#include "module/module_args.h"
#include "module/redismodule_api.h"

#define MODULE_KEYS_ERR 200 /* room for any message below */

/* Redis's context of one call and the API table (both the caller's). */
struct module_keys {
    const struct redis_module_api *rm;
    RedisModuleCtx *ctx;
};

/* Pass 1 for tier t on key (a log tier: key[0] its set; no key after it
 * is read): reads its state (a string tier: the string, anything else
 * reading as absent, as the script's pcall of GET; a hash tier: HGETALL,
 * another type being the script's error; a log tier: the counts and
 * scores redis_state_read_log asks for; a concurrency tier: its live
 * leases, ZRANGEBYSCORE key (now +inf WITHSCORES) and decides cost as of
 * now into x. nonce: the request's lease nonce or NULL, which must
 * outlive x. Returns 1 if the tier allows, 0 if not, or -1 with the
 * script's error in err[0..MODULE_KEYS_ERR) (a calendar tier's bounds
 * that do not hold now, a bucket hash that is no bucket hash, a sorted
 * set whose scores are no integers). */
int module_keys_read(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, const char *nonce, int64_t now,
                     char *err) __attribute__((warn_unused_result));

/* A report's second read, after every tier's charge, of tier t read into
 * x by module_keys_read from key: a log tier's newest score and the one
 * retry waits for (redis_state_reread_log); any other tier: nothing.
 * Returns 0, or -1 with the error in err[0..MODULE_KEYS_ERR). */
int module_keys_reread(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                       const struct module_tier *t, int64_t now, char *err)
    __attribute__((warn_unused_result));

/* Makes w, tier t's write, on its keys (key[0]; a log tier's sequence
 * counter key[1]), and replicates it as the script's commands. Returns 0,
 * or -1 with the error the script's redis.call would raise in
 * err[0..MODULE_KEYS_ERR) (an expiry SET refuses; a HINCRBY on a key
 * another tier of the request made a string), the writes before it kept,
 * as there. */
int module_keys_write(const struct module_keys *k, RedisModuleString **key,
                      const struct module_tier *t, const struct redis_write *w, char *err)
    __attribute__((warn_unused_result));

/* One lease call (renew: "n", else "r") on key's lease member, with
 * timeout µs, as of now (redis_state_lease_op): ZSCORE of member (anything
 * but a string: the member unknown, as the script's pcall), then the
 * write the outcome asks for, replicated. Returns 0 with out[0..2) its
 * status and expiry, or -1 with the error of a write Redis refused in
 * err[0..MODULE_KEYS_ERR). */
int module_keys_lease_op(const struct module_keys *k, RedisModuleString *key,
                         const struct module_arg *member, int renew, int64_t timeout, int64_t now,
                         int64_t *out, char *err) __attribute__((warn_unused_result));

#endif
