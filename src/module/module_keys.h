/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module_keys.h: a tier's state in Redis, for ratelimitd.check: read into
 * limiter/redis_state.h's decision, and its write made and replicated.
 * Strings go through the Modules API's key functions (OpenKey,
 * StringDMA, StringSet, SetAbsExpire), not through RedisModule_Call,
 * whose fake client, command lookup, argument objects and parsed reply
 * cost Redis more than the decision itself (bench/module_cost.py
 * measures it); each write is replicated as the command the Functions'
 * effects are (SET key value PXAT ms), so that replicas and the AOF get
 * the same bytes, never the module's command.
 *
 * Owns: the reads and writes of a tier's key, their replication, and the
 * error messages of a write Redis would refuse.
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

/* Pass 1 for tier t on key: reads its state (a string tier: the string,
 * anything else reading as absent, as the script's pcall of GET; a hash
 * tier: HGETALL, another type being the script's error) and decides cost
 * as of now into x (redis_state_read). Returns 1 if the tier allows, 0 if
 * not, or -1 with the script's error in err[0..MODULE_KEYS_ERR) (a
 * calendar tier's bounds that do not hold now, a bucket hash that is no
 * bucket hash). */
int module_keys_read(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now, char *err)
    __attribute__((warn_unused_result));

/* Makes w, tier t's write, on key, and replicates it as the script's
 * commands. Returns 0, or -1 with the error the script's redis.call would
 * raise in err[0..MODULE_KEYS_ERR) (an expiry SET refuses; a HINCRBY on a
 * key another tier of the request made a string), the writes before it
 * kept, as there. */
int module_keys_write(const struct module_keys *k, RedisModuleString *key,
                      const struct module_tier *t, const struct redis_write *w, char *err)
    __attribute__((warn_unused_result));

#endif
