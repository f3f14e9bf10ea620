/* SPDX-License-Identifier: Apache-2.0 */
/*
 * limiter_local.h: every algorithm of enum algorithm (policy.h) in memory:
 * the engine of `backend: memory` (backend_memory.c) and of `failure_mode:
 * local` while Redis cannot decide. Same decisions and the same figures as
 * the Lua script (lua/check.lua and the algorithm files) for the same
 * requests at the same times: the in-memory store (local_store.c) plays the
 * part of Redis, key for key, and each algorithm's C file sits beside its
 * Lua file by name (src/limiter/gcra.c, lua/gcra.lua).
 *
 * Owns: a bounded map from Redis key strings (policy_redis_key, so keys are
 * isolated exactly as in Redis) to algorithm state, with the scripts'
 * expiries and an LRU bound; the two-pass decision of a whole request.
 * Does not own: clocks, I/O, locking, or when to use it (the config's
 * `backend` and `failure_mode` decide, through the backend that holds it).
 * Pure: time is a parameter; no globals. A store is not thread-safe: one per
 * worker thread, or the caller serialises.
 *
 * State per key, as in Redis (times in absolute µs, scaled values with the
 * window they are scaled by, so that a reload's new settings read them
 * exactly as the script does):
 *   fixed_window            {window end, count}
 *   sliding_window_counter  {window end, current, previous}
 *   token_bucket            {tokens * window, time, window}
 *   gcra, leaky_bucket      {tokens short * window, time, window}: the
 *                           theoretical arrival time time + short / limit
 *                           (the two share it, as their scripts share the
 *                           string)
 *   sliding_window_log      the scores of the units taken, run-length encoded
 *                           (one run per distinct µs: the script's members
 *                           differ only by a sequence number, which nothing
 *                           reads), so at most min(limit, distinct µs) runs
 *   sliding_window_buckets  {bucket start -> units}, at most window/precision
 *                           live buckets
 *   concurrency             its leases {expiry, units, nonce}, expired ones
 *                           kept one lease timeout as tombstones
 * (the log's sequence key is not needed: one entry stands for both keys.)
 *
 * Expiry: every entry written expires exactly when the script's PEXPIRE/PX
 * would make the Redis key expire, measured on now_us: at now + ceil(us /
 * 1000) ms + 1000 ms of slack. An expired entry behaves as absent (as in
 * Redis, where the scripts make a missing key and a stale one equivalent).
 * Expired entries are freed when a lookup finds them, and a few per call
 * are reclaimed by a sweep over the table and a look at the LRU tail.
 *
 * Bounded memory: at most max_keys entries. Writing a new key into a full
 * store first evicts the least recently used entry (a lookup counts as a
 * use). EFFECT OF EVICTION: the evicted caller's state is forgotten, as if
 * its keys had expired: its counters start from zero (a full bucket, an
 * empty window), so an evicted key may be admitted more than its limits
 * allow. Size max_keys above the number of (policy, key, tier) live at
 * once. A request touching more keys than max_keys can evict its own
 * earlier tiers while it commits.
 *
 * If a tier's algorithm changes under the same tier name (a reload), the
 * entry of the other algorithm is treated as absent (gcra <-> leaky_bucket
 * keep it, as they share their state in Redis too), as the script treats
 * another algorithm's state string; where one of the two keeps a HASH or a
 * ZSET (the buckets, the log) the script fails with WRONGTYPE instead.
 */
#ifndef RATELIMITD_LIMITER_LOCAL_H
#define RATELIMITD_LIMITER_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"
#include "core/decision.h"
#include "core/lease_id.h"

struct local_store;

/*
 * A new, empty store holding at most max_keys entries (max_keys >= 1; 0 is
 * taken as 1). hash_seed keys the hash function (SipHash-2-4): pass a
 * random value (e.g. from getrandom) so that clients cannot choose keys that
 * collide; tests may pass a constant. Free it with local_store_free.
 */
struct local_store *local_store_new(size_t max_keys, uint64_t hash_seed);

/* Frees the store and every entry. NULL is a no-op. */
void local_store_free(struct local_store *s);

/*
 * Decides a whole request exactly as lua/check.lua does, with the store in
 * place of Redis and now_us as ARGV[1]:
 *
 *   pass 1: every tier of every check is read and decided (cost 0 allows;
 *           cost > capacity denies with cost_exceeds_limit and retry -1);
 *           the request is allowed iff every tier of every non-shadow check
 *           allows;
 *   figures: per tier, as if its cost were taken iff the request and its
 *           check both allow (so a dry run reports what the real run would);
 *   pass 2: only for an allowed request that is not a dry run, every check
 *           that itself allowed and has cost > 0 takes its cost on every
 *           tier (a denied shadow check writes nothing).
 *
 * out must have one entry per tier of every check (check order, then tier
 * order), and receives the script's figures: allowed, limit, remaining,
 * reset_us, retry_us (-1: never), delay_us, cost_exceeds_limit. Returns 1 if
 * the request is allowed, else 0.
 *
 * Preconditions (as the daemon guarantees for the script): every tier passed
 * policy_tier_validate; 0 <= now_us <= 2^53; 0 <= cost <= 10^9; key_prefix
 * and every key fit POLICY_KEY_BUF (check_json.c bounds them); at most
 * REQUEST_MAX_CHECKS checks (decision_summarize_allowed's rule decides).
 */
int local_decide(struct local_store *s, const char *key_prefix, const struct check_request *req,
                 int64_t now_us, struct tier_result *out);

/*
 * Forgets the state of every tier of policy p for key (as a DEL of the
 * tier's Redis keys would): the key starts afresh. Returns how many live
 * entries were freed (expired ones are freed but not counted).
 */
size_t local_store_forget(struct local_store *s, const char *key_prefix, const struct policy *p,
                          const char *key, size_t keylen, int64_t now_us);

/*
 * Releases (renew 0) or renews the n leases of refs as of now_us, as the
 * script's lease operation does (lua/concurrency.lua's lease_op): out[i]
 * says what became of refs[i].
 */
void local_store_lease(struct local_store *s, const char *key_prefix, int renew,
                       const struct lease_ref *refs, size_t n, int64_t now_us,
                       struct lease_outcome *out);

/* How many entries the store holds (expired ones not yet reclaimed too). */
size_t local_store_size(const struct local_store *s);

/*
 * When the entry under this Redis key expires (µs, absolute), or -1 if
 * there is none or it has expired as of now_us. For tests and diagnostics:
 * does not count as a use (no LRU move) and frees nothing.
 */
int64_t local_store_expiry(const struct local_store *s, const char *key, size_t keylen,
                           int64_t now_us);

#endif
