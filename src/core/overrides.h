/* SPDX-License-Identifier: Apache-2.0 */
/*
 * overrides.h: run-time overrides (the admin API's /v1/overrides), the
 * process-wide table every worker reads. A run-time override gives one
 * exact (policy, key) other limits (and bursts) for some of the policy's
 * tiers, named by tier name, until an optional expiry. It wins over the
 * policy file's `overrides`: its limits replace those of the tier of the
 * same name in whichever tier list applies to the key (the policy's, or
 * the file override's variant); the tiers it does not name keep theirs.
 *
 * The table is shared by every worker: one lock (a reader-writer lock:
 * checks read, changes write), and a check of a key without an override
 * costs one atomic load when the table is empty, else a hash and a lock-free
 * filter's bit (a lookup under the read lock only for the rare key whose
 * bit another key set). A check of an overridden key gets its own copy of
 * the policy with the limits in force (check_item.owned), so a change or
 * a removal never frees what a check in flight points to.
 *
 * Where changes come from (the admin API on this daemon, the backend's
 * announcements of other daemons' changes, a full re-read after the
 * announcements' connection came back) is the caller's: a change is
 * applied if it is not older than what the table holds (updated_us), so
 * that every worker hearing the same announcement applies it once.
 *
 * Owns the entries, their expiry (an expired entry stops applying at its
 * expires_us, and overrides_sweep removes it), the per-policy change
 * counts and the metrics' lines. Does not own the JSON of an override
 * (override_json.h) nor its storage (the backend, backend.h).
 */
#ifndef RATELIMITD_OVERRIDES_H
#define RATELIMITD_OVERRIDES_H

#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"
#include "lib/buf.h"
#include "lib/log.h"

struct check_item;

/* One tier's limits in an override. burst < 0: not given (the tier keeps
 * its own). */
struct override_tier {
    char name[POLICY_NAME_MAX + 1];
    int64_t limit;
    int64_t burst;
};

/* One override. Owned by whoever holds it (override_free). */
struct override {
    char policy[POLICY_NAME_MAX + 1];
    char *key; /* keylen bytes and a NUL; no NUL inside */
    size_t keylen;
    size_t ntiers; /* 1..POLICY_MAX_TIERS */
    struct override_tier *tiers;
    int64_t expires_us; /* wall clock; 0: never */
    int64_t updated_us; /* wall clock of the change */
    char *note;         /* NULL: none */
    char *by;           /* who made the change: "<peer> token=<identity>" */
};

void override_free(struct override *o);
struct override *override_copy(const struct override *o);

/* 1 if o has expired as of now_us (wall clock). */
int override_expired(const struct override *o, int64_t now_us);

/* Where a check's limits come from, per tier (GET /v1/keys' limit_source). */
enum limit_source { LIMIT_POLICY, LIMIT_FILE_OVERRIDE, LIMIT_RUNTIME_OVERRIDE };
const char *limit_source_name(enum limit_source s);

struct overrides;

/* A new empty table; seed keys its hash. */
struct overrides *overrides_new(uint64_t seed);
void overrides_free(struct overrides *t);

/* Applies a change (any thread). Set: takes o; 1 if applied (*prev, when
 * not NULL, gets what it replaced, or NULL: free it), 0 if the table held
 * a newer change of the key (o freed). */
int overrides_set(struct overrides *t, struct override *o, struct override **prev);

/* Removes (policy, key) if the table's entry is not newer than
 * updated_us (INT64_MAX: whatever it is). 1 if removed (*prev, when not
 * NULL, gets it), else 0. */
int overrides_delete(struct overrides *t, const char *policy, const char *key, size_t keylen,
                     int64_t updated_us, struct override **prev);

/* Makes the table the n of v (taken, and the array freed): a full re-read
 * of the store, sent at since_us (monotonic). What the table applied since
 * then stays (a change newer than the store's, a removal: the store was
 * read before it); every other entry the store lacks is removed. Not
 * counted as changes. */
void overrides_replace_all(struct overrides *t, struct override **v, size_t n, int64_t since_us);

/* A copy of (policy, key)'s override in force as of now_us (INT64_MIN:
 * expired or not), or NULL. */
struct override *overrides_get(struct overrides *t, const char *policy, const char *key,
                               size_t keylen, int64_t now_us);

/* One page of policy's (NULL: every policy's) overrides in force, in the order of their keys
 * (bytes), starting after the key `after` (afterlen bytes; NULL: from the
 * first): up to max copies in *out (an array to free with each entry), *n
 * of them; *more is 1 if others follow. */
void overrides_page(struct overrides *t, const char *policy, const char *after, size_t afterlen,
                    size_t max, int64_t now_us, struct override ***out, size_t *n, int *more);

/* How many entries the table holds (expired ones until swept). Any
 * thread, lock-free. */
size_t overrides_count(const struct overrides *t);

/* How many overrides of policy are in force as of now_us. */
size_t overrides_policy_count(struct overrides *t, const char *policy, int64_t now_us);

/*
 * The check path: if item's (policy, key) has an override in force as of
 * now_us and item has no policy of its own (owned), gives item a copy of
 * its policy with the override's limits, sets item->runtime_tiers (bit i:
 * tier i's limits are the override's) and returns 1; else 0. A tier named
 * that the item's tier list lacks, or whose numbers the tier's algorithm
 * refuses, is skipped.
 */
int overrides_apply(struct overrides *t, struct check_item *item, int64_t now_us);

/* Removes the entries expired as of now_us, logging each ("override
 * expired"), counting it and telling expired(arg, o) (NULL: nobody; o
 * valid during the call), outside the lock. Returns how many. */
size_t overrides_sweep(struct overrides *t, int64_t now_us, const struct logger *lg,
                       void (*expired)(void *arg, const struct override *o), void *arg);

/* Counts a change made or heard of: op is "set", "deleted" or "expired". */
void overrides_count_change(struct overrides *t, const char *policy, const char *op);

/* Appends ratelimitd_override_changes_total{policy,op} and
 * ratelimitd_overrides{policy} (for each policy name of names, n of them,
 * so that every policy has a gauge) in Prometheus' text format. */
void overrides_metrics(struct overrides *t, const char *const *names, size_t n, int64_t now_us,
                       struct buf *out);

#endif
