/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_state.h: one tier decided by the limiter's own C steps on the state
 * Redis holds for it, for the Redis module (src/module/): the same
 * arithmetic as the memory backend (tier.c and the algorithm files), read
 * from and written back as the Functions' strings ("f:<e>:<n>", ...) and
 * hashes, byte for byte, with the Functions' expiries.
 *
 * Owns: decoding and encoding the states, and which algorithms have one
 * here: the strings of fixed_window, calendar_window (whose bounds the
 * caller passes), sliding_window_counter, token_bucket, gcra and
 * leaky_bucket, sliding_window_buckets' hash, and sliding_window_log's
 * sorted set and sequence counter (read through the caller's reader, as
 * the script reads them: counts and single scores, never the whole set),
 * concurrency's sorted set of leases, and the lease calls' release and
 * renew of one lease.
 * Does not own: Redis calls, argument decoding (src/module/), any
 * algorithm's arithmetic.
 */
#ifndef RATELIMITD_REDIS_STATE_H
#define RATELIMITD_REDIS_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"

#define REDIS_STATE_FIGURES 7 /* a tier's integers in check.lua's reply */
#define REDIS_STATE_BUF 96    /* a state string: a letter and 3 int64s */

/* One tier of a call: its settings, its decoded state and pass 1's reading. */
struct redis_tier;

/* How a tier's state is kept: a string (GET; SET), or for
 * sliding_window_buckets a hash of bucket start -> units (HGETALL;
 * HINCRBY, HDEL, PEXPIRE), as the scripts keep it. */
enum redis_layout { REDIS_LAYOUT_STRING, REDIS_LAYOUT_HASH, REDIS_LAYOUT_LOG, REDIS_LAYOUT_LEASES };
enum redis_layout redis_state_layout(const struct tier *t);

/* One field of a hash and its value, as HGETALL answers them. */
struct redis_field {
    const char *name, *value;
    size_t name_len, value_len;
};

/* The bytes of one struct redis_tier, and the i-th of an array of them
 * (array aligned as malloc aligns, zeroed before the first read). */
size_t redis_state_tier_size(void);
struct redis_tier *redis_state_tier_at(void *array, size_t i);

/* Pass 1 (check.lua's read_and_decide): decodes val[0..len) (NULL: no key,
 * or not a string; another layout reads as absent, as in the script), loads
 * it as of now and decides cost. t (and bounds) must outlive x, have passed
 * the module's checks and be supported. bounds: a calendar tier's four
 * ("p:s:e:n", lua/calendar_window.lua; t's calendar unit is then anything
 * but CALENDAR_NONE), else NULL. Returns 1 if the tier allows, 0 if not,
 * -1 if now is outside the bounds (the script's error; x is unread). */
int redis_state_read(struct redis_tier *x, const struct tier *t, const int64_t *bounds,
                     int64_t cost, const char *val, size_t len, int64_t now)
    __attribute__((warn_unused_result));

/* Pass 1 for a hash tier (REDIS_LAYOUT_HASH): as redis_state_read, on the
 * n fields of f (n 0: no key). Returns 1 if the tier allows, 0 if not, -1
 * if a field or value is not an integer as Redis writes one (the script
 * would fail on it, or count what no daemon wrote: refused). */
int redis_state_read_hash(struct redis_tier *x, const struct tier *t, int64_t cost,
                          const struct redis_field *f, size_t n, int64_t now)
    __attribute__((warn_unused_result));

/* sliding_window_log's sorted set (REDIS_LAYOUT_LOG), as the caller reads
 * it for redis_state_read_log, with the script's commands: only the
 * members scored after `from` (its "(from" bound). count: how many (ZCOUNT
 * key (from +inf); newest: the highest score among them (ZREVRANGEBYSCORE
 * key +inf (from WITHSCORES LIMIT 0 1); score: the score of rank i
 * (0-based) among them (ZRANGEBYSCORE key (from +inf WITHSCORES LIMIT i
 * 1). A score must be an integer, or the read fails. Each returns 0, or
 * -1 having failed (ctx records why). */
struct redis_zset_reader {
    void *ctx;
    int (*count)(void *ctx, int64_t from, int64_t *n);
    int (*newest)(void *ctx, int64_t from, int64_t *score);
    int (*score)(void *ctx, int64_t from, int64_t i, int64_t *score);
};

/* Pass 1 for a log tier: as redis_state_read, reading through r what the
 * script's steps read (the count in the window, the newest score, and,
 * if denied, the score retry waits for). Returns 1 if the tier allows, 0
 * if not, -1 if r failed. */
int redis_state_read_log(struct redis_tier *x, const struct tier *t, int64_t cost,
                         const struct redis_zset_reader *r, int64_t now)
    __attribute__((warn_unused_result));

/* Pass 1 for a concurrency tier (REDIS_LAYOUT_LEASES): as redis_state_read,
 * on its live leases as `ZRANGEBYSCORE key (now +inf WITHSCORES` answers
 * them, member (name) and score (value) per field of f[0..n). A member
 * not "<digits>:..." holds nothing (the script skips it). nonce: the
 * request's lease nonce (22 bytes, NUL-terminated), or NULL; it must
 * outlive x. Returns 1 if the tier allows, 0 if not, -1 if a score is no
 * integer, or the units held pass 2^53 (the script's doubles would lose
 * them: refused). */
int redis_state_read_leases(struct redis_tier *x, const struct tier *t, int64_t cost,
                            const char *nonce, const struct redis_field *f, size_t n, int64_t now)
    __attribute__((warn_unused_result));

/* Whether x (a concurrency tier read in pass 1) may be committed: 0 if the
 * request sent no lease nonce (the script's error at its commit, after
 * the writes of the tiers before it). */
int redis_state_can_commit(const struct redis_tier *x);

/* The lease calls (ARGV[2] "r" release, "n" renew for timeout µs): one
 * lease whose ZSCORE answered score[0..len) (NULL: not a string, the
 * member unknown), as of now. *status: 1 done, 2 expired, 0 unknown;
 * *expires: a renew's new expiry (µs), else 0. Returns what to write: 0
 * nothing; 1 ZREM key member; 2 ZADD key XX *expires member, then
 * PEXPIRE key *px_ms if PTTL key is less than it. */
int redis_state_lease_op(const char *score, size_t len, int renew, int64_t timeout, int64_t now,
                         int64_t *status, int64_t *expires, int64_t *px_ms);

/* A local lease's block (ARGV[2] "L<want>"), over the n tiers of the array
 * xs (one check's, each able to lease, read in pass 1 and all allowed):
 * tier.c's tier_take_block, which makes the units granted every tier's
 * cost (so redis_state_figures and redis_state_commit take the block).
 * Returns the units granted; *until_us when the block must be spent by. */
int64_t redis_state_take_block(void *xs, size_t n, int64_t want, int64_t now, int64_t *until_us);

/* Whether a block taken at `taken` may go back ("G<taken>") to every one
 * of the n tiers of xs, read in pass 1 (tier.c's tier_lease_same). */
int redis_state_lease_same(void *xs, size_t n, int64_t taken);

/* A report's figures for a log tier x read in pass 1: the script's figures
 * and retry read the newest score and the one retry waits for when they
 * run, after every tier's charge (a later tier on the same key may have
 * added to the set), with the count pass 1 read: so does this, before
 * redis_state_figures. 0, or -1 if r failed. */
int redis_state_reread_log(struct redis_tier *x, const struct redis_zset_reader *r, int64_t now)
    __attribute__((warn_unused_result));

/* s[0..len) as a decimal integer written as Redis writes one (no leading
 * zero, a '-' only before a digit other than 0), |v| <= 2^53: 0, or -1. */
int redis_state_integer(const char *s, size_t len, int64_t *v) __attribute__((warn_unused_result));

/* Frees what a read of x keeps (a hash's buckets) and zeroes x; every x
 * read must be released once the call is done. */
void redis_state_release(struct redis_tier *x);

/* The tier's 7 integers of the reply (allowed, limit, remaining, reset_us,
 * retry_us, delay_us, reason) as if its cost were taken iff consumed. */
void redis_state_figures(const struct redis_tier *x, int64_t now, int consumed,
                         int64_t out[REDIS_STATE_FIGURES]);

/* What SET is given after the value: PX ms, or PXAT ms (absolute). */
struct redis_expiry {
    int at; /* 1: PXAT */
    int64_t ms;
};

/* A tier's write: the Redis commands that take its cost, as the script's.
 * REDIS_LAYOUT_STRING: SET key buf[0..len) PX|PXAT ex.ms.
 * REDIS_LAYOUT_HASH: HINCRBY key field by, HDEL key del[0..ndel) (if
 * any; del is x's until its release), PEXPIRE key ex.ms.
 * REDIS_LAYOUT_LOG (key, then its sequence counter key2): ZREMRANGEBYSCORE
 * key -inf field; INCRBY key2 by, whose reply is the last sequence number
 * s; ZADD key score "<score>-<seq>" for seq from s - by + 1 to s, in calls
 * of at most REDIS_LOG_CHUNK members (one call per chunk, as the script's
 * call_chunked: a set made in one call may be encoded otherwise); PEXPIRE
 * key ex.ms and PEXPIRE key2 ex.ms.
 * REDIS_LAYOUT_LEASES: ZREMRANGEBYSCORE key -inf field; ZADD key score
 * "<by>:<nonce>"; PEXPIRE key ex.ms. */
#define REDIS_LOG_CHUNK 512 /* CALL_CHUNK in lua/common.lua */
struct redis_write {
    char buf[REDIS_STATE_BUF];
    size_t len;
    struct redis_expiry ex;
    int64_t field, by, score;
    const char *nonce; /* REDIS_LAYOUT_LEASES: the request's, NUL-terminated */
    const int64_t *del;
    size_t ndel;
};

/* Pass 2 (commit): takes the cost, and fills w with the write that makes
 * the new state, as the script's would; server_clock: now is Redis's TIME
 * (then an expiry set from an end is a PXAT, as lua/common.lua's
 * expiry_until). */
void redis_state_commit(struct redis_tier *x, int64_t now, int server_clock, struct redis_write *w);

/* A report (check.lua's charge, argv[2] "3"): charges cost (< 0: a
 * refund) with no decision, on the state redis_state_read loaded (read it
 * with a cost of 0: a report's cost is no decision's), and fills w as
 * redis_state_commit does. The caller refused the algorithms that take no
 * report, or no refund (policy_algorithm_reports,
 * policy_algorithm_refunds). */
void redis_state_report(struct redis_tier *x, int64_t cost, int64_t now, int server_clock,
                        struct redis_write *w);

#endif
