/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local_lease.h: exact local leases for hot keys, the per-worker table of
 * leased blocks (not the concurrency leases of lease.h).
 *
 * A policy with `lease:` lets a daemon that sees a key often take a block
 * of units from the shared count in one atomic call (a request with
 * block_op LEASE_BLOCK_TAKE, decision.h) and decide later checks of that
 * key here, spending the block, until it is spent or its time is up.
 *
 * Why it is exact: a block is taken out of the same count as every check
 * (the backend's script takes the units of every tier at once, only if the
 * check that asks is allowed), so the units a daemon admits locally were
 * counted before; nothing is admitted twice. A block of a fixed window is
 * spent by the window's end (its validity, from the backend, measured from
 * when the call was SENT, so that it ends here no later than there), never
 * in a later window. Unused units are given back (LEASE_BLOCK_GIVE) when a
 * block is dropped while still valid, never into a later window; the rest
 * are "stranded": under-admission, at most one block per worker per key per
 * window.
 *
 * The rules (who is hot, how large a block, when to ask again):
 *   - a key is hot when its checks here reach LOCAL_LEASE_HOT_HITS within
 *     LOCAL_LEASE_SPAN_US (in this span or the last);
 *   - a block holds at most `lease:` units, or for `lease: auto` the checks
 *     seen in one span (about rate x 100 ms), at least HOT_HITS, and never
 *     more than cap (the caller's: a fraction of the smallest capacity);
 *   - a hot key asks for the next block (one call in flight per key) when
 *     what is left falls below a quarter of the block, asking only for what
 *     tops it up, so that a worker never holds more than one block's worth;
 *     the check that asks waits for the call, the others spend what is left
 *     meanwhile, or wait for the call too when nothing is (the caller holds
 *     them: LOCAL_LEASE_WAIT).
 *
 * Pure: no I/O, no clock (times are parameters, monotonic µs). Not
 * thread-safe: one table per worker. Bounded: LOCAL_LEASE_MAX_KEYS entries,
 * the least recently used evicted (its block spilled to the caller). Keys
 * are hashed with SipHash-2-4 under a secret seed (lru_table.h).
 */
#ifndef RATELIMITD_LOCAL_LEASE_H
#define RATELIMITD_LOCAL_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "core/decision.h"
#include "lib/util.h"

#define LOCAL_LEASE_HOT_HITS 8
#define LOCAL_LEASE_SPAN_US 100000
#define LOCAL_LEASE_MAX_KEYS 4096
/* A block holds at most capacity / LOCAL_LEASE_CAP_SHARE of any tier. */
#define LOCAL_LEASE_CAP_SHARE 16

struct local_lease_table;

/* A block leaving the table with units unspent: the caller gives them back
 * (expired 0: still valid) or counts them stranded (expired 1). The
 * pointers are valid only during the callback. */
struct local_lease_block {
    const char *policy;
    const char *key;
    size_t keylen;
    int64_t units;
    int64_t taken_us; /* the backend's clock at the take (block_taken_us) */
    int expired;
};

typedef void (*local_lease_spill_fn)(void *arg, const struct local_lease_block *b);

/* A new, empty table. seed keys the hash (random; tests may pass a
 * constant). Never NULL. */
struct local_lease_table *local_lease_new(uint64_t seed);

/* Spills every block (see local_lease_drop), then frees. NULL: a no-op. */
void local_lease_free(struct local_lease_table *t, local_lease_spill_fn spill, void *arg);

enum local_lease_step {
    LOCAL_LEASE_PLAIN,  /* decide the check as usual */
    LOCAL_LEASE_SERVED, /* decided here, out filled */
    LOCAL_LEASE_ASK,    /* send the check as a take of *want units (its cost included) */
    LOCAL_LEASE_WAIT,   /* the key is hot, its block short and a take in flight: wait
                         * for it, then ask again */
};

/*
 * A check of cost (> 0) for (policy, key), whose policy has `lease: lease`
 * (units, or POLICY_LEASE_AUTO) and ntiers tiers, at now_us. cap: the most
 * a block may hold (>= 1). SERVED: fills out[0..ntiers) with the figures
 * of the block's take moved to now (remaining: plus what the block still
 * holds). ASK: *want and *ticket are set; the key now has a call in flight,
 * which the caller ends with local_lease_install or local_lease_abandon.
 * An expired block found, or an entry evicted, is spilled.
 */
enum local_lease_step local_lease_check(struct local_lease_table *t, const char *policy,
                                        const char *key, size_t keylen, int64_t cost, int64_t lease,
                                        int64_t cap, size_t ntiers, int64_t now_us,
                                        struct tier_result *out, int64_t *want, uint64_t *ticket,
                                        local_lease_spill_fn spill, void *arg);

/*
 * The take of ticket was granted units (the asking check's cost among
 * them): cost of them are spent by that check, the rest join the key's
 * block, to be spent by until_us (monotonic). taken_us is the backend's
 * clock at the take, res its ntiers figures. What the block held is kept
 * if still valid, else spilled as expired. Returns 1; or 0 if the entry
 * was dropped since (a reset, a reload) or ticket is stale: nothing is
 * installed and the caller deals with the units.
 */
int local_lease_install(struct local_lease_table *t, const char *policy, const char *key,
                        size_t keylen, uint64_t ticket, int64_t units, int64_t cost,
                        int64_t until_us, int64_t taken_us, const struct tier_result *res,
                        size_t ntiers, int64_t now_us, local_lease_spill_fn spill,
                        void *arg) RL_WUR;

/* The take of ticket ended without a grant (denied, or failed). */
void local_lease_abandon(struct local_lease_table *t, const char *policy, const char *key,
                         size_t keylen, uint64_t ticket);

/*
 * Drops entries, spilling their unspent blocks (expired by now_us or not):
 * policy NULL: every entry; else key NULL: every key of policy; else that
 * key. A call in flight for a dropped entry finds its ticket stale.
 */
void local_lease_drop(struct local_lease_table *t, const char *policy, const char *key,
                      size_t keylen, int64_t now_us, local_lease_spill_fn spill, void *arg);

/* Entries held. */
size_t local_lease_size(const struct local_lease_table *t);

#endif
