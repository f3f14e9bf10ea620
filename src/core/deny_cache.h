/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deny_cache.h: an exact local cache of Redis denials, so that a caller
 * hammering a limit it has already hit is denied without a Redis round trip.
 *
 * Why it is exact: when Redis denies a single-check request (policy P, key
 * K, cost c) with a finite wait retry_us, the state in Redis cannot let a
 * request for (P, K) with cost >= c through before that wait is over: other
 * callers can only consume more, never give back, and no algorithm lets a
 * larger cost through where a smaller one was refused. So until the denial's
 * retry time this cache answers what Redis would answer, and never allows.
 *
 * What the CALLER must enforce (the module cannot see it):
 *   - put only denials of requests with exactly one check (a multi-check
 *     denial does not say which check denied it);
 *   - never for dry runs (nothing was consumed, and a dry run must reach
 *     Redis to report its real figures) and never for shadow policies (a
 *     shadow check is never denied to callers);
 *   - never for denials with no finite wait: request-level retry_us < 0, or
 *     any tier with cost_exceeds_limit (put ignores retry_us <= 0 anyway);
 *   - not for policies with `deny_cache: false`, nor at all when
 *     deny_cache_max_keys is 0 (deny_cache_new(0, ...) gives a cache that
 *     stores nothing, so the caller need not test for it);
 *   - the same policy name means the same tiers: clear the cache (or free
 *     it and make a new one, to apply a new deny_cache_max_keys) on every
 *     config reload;
 *   - times come from one monotonic clock (util.h), in microseconds.
 *
 * Pure: no I/O, no libevent, no clock (time is a parameter). Not
 * thread-safe: one cache per worker (event loop), used from its thread only.
 * Bounded: at most max_entries entries, the least recently used evicted
 * first; an entry is one allocation of about 100 bytes plus the policy
 * name, the key and sizeof(struct tier_result) per tier. Keys are hashed
 * with SipHash-2-4 under a secret seed, since callers choose them.
 */
#ifndef RATELIMITD_DENY_CACHE_H
#define RATELIMITD_DENY_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/decision.h"

struct deny_cache;

/*
 * A new, empty cache of at most max_entries entries (0: a cache that never
 * stores, i.e. disabled). seed keys the hash: pass a random value (e.g.
 * from getrandom) so that callers cannot choose colliding keys; tests may
 * pass a constant. Never NULL; free it with deny_cache_free.
 */
struct deny_cache *deny_cache_new(size_t max_entries, uint64_t seed);

/* Frees the cache and every entry. NULL is a no-op. */
void deny_cache_free(struct deny_cache *dc);

/*
 * Records a denial of (policy, key) at cost: results holds its ntiers tier
 * results (struct tier_result, copied: the caller keeps its array),
 * retry_us the request-level wait (> 0; otherwise nothing is stored).
 *
 * sent_us is the caller's monotonic clock when the request was SENT to
 * Redis, not when the reply came back. The script read its clock (and so
 * measured retry_us) at some moment between the send and the reply; taking
 * the send as the origin makes the entry expire at sent_us + retry_us, never
 * later than Redis's own retry time, so the cache can only stop denying
 * early (and then Redis decides), never deny for too long. Measured from the
 * reply, a slow round trip would extend the denial past what Redis said.
 *
 * key is keylen bytes, any bytes (NUL included); policy is a policy name
 * (NUL-terminated, no NUL inside, as policy_name_valid guarantees). An
 * entry already held for (policy, key) is replaced: the newer denial is
 * the better information, and a put only happens when the cache could not
 * answer (the old entry had expired or a larger cost). A full cache evicts
 * its least recently used entry. The entry becomes the most recently used.
 */
void deny_cache_put(struct deny_cache *dc, const char *policy, const char *key, size_t keylen,
                    int64_t cost, const struct tier_result *results, size_t ntiers,
                    int64_t retry_us, int64_t sent_us);

/*
 * A hit when an entry for (policy, key) exists with stored cost <= cost,
 * stored ntiers == ntiers and now_us < its expiry (sent_us + retry_us):
 * fills out[0..ntiers) with the stored figures moved forward to now_us and
 * returns 1 (the entry becomes the most recently used). Moved forward:
 * with elapsed = now_us - sent_us, every positive reset_us, delay_us and
 * retry_us is reduced by elapsed, reset_us and delay_us to no less than 0,
 * retry_us to no less than 1 (the request is still denied, so "retry now"
 * would be wrong); 0 and -1 are kept; remaining of denying tiers is 0.
 *
 * Otherwise returns 0 and leaves out untouched. An entry found expired, or
 * with another number of tiers (the policy changed without a clear), is
 * freed; one with a larger cost is kept (a smaller cost may still pass).
 */
int deny_cache_get(struct deny_cache *dc, const char *policy, const char *key, size_t keylen,
                   int64_t cost, size_t ntiers, int64_t now_us, struct tier_result *out);

/* Forgets the entry of (policy, key), if any (the key was reset: a denial
 * cached before the reset no longer holds). Returns 1 if one was held. */
int deny_cache_del(struct deny_cache *dc, const char *policy, const char *key, size_t keylen);

/* Forgets every entry (the config was reloaded). */
void deny_cache_clear(struct deny_cache *dc);

/* How many entries are held (expired ones included until looked up). */
size_t deny_cache_size(const struct deny_cache *dc);

#endif
