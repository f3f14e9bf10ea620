/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core.h: what a check needs from its event loop, and nothing more. The
 * worker (worker.h) embeds one struct core per event loop and fills it;
 * check.c, rls.c, reset.c and the fronts' calls into them take a struct
 * core *, never a worker, so that the core can be driven by a test with a
 * fake backend and a bare libevent loop (tests/unit/test_check.c).
 *
 * Owns: the bounded process-wide counters (core_count_take/_release, used
 * for max_inflight here and for max_connections by the fronts), forgetting
 * a reset key on this loop (core_forget_key) and the words in which the
 * core speaks of its backend (core_backend_said). Does not own anything the
 * struct points to: the embedder makes and frees the loop, the backends, the
 * deny cache, the metrics shard and the config reference.
 */
#ifndef RATELIMITD_CORE_H
#define RATELIMITD_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/decision.h"
#include "lib/log.h"

struct event_base;
struct backend;
struct check;
struct deny_cache;
struct local_lease_table;
struct metrics;
struct overrides;
struct top_keys;

/* The access log's status field for a verdict. It is in the HTTP front's
 * numbering whichever front asked (response_status), which the core must
 * not know: the embedder lends it. */
typedef int (*core_status_fn)(const struct verdict *v);

/* The core may have become idle (a check answered): a drain may be over. */
typedef void (*core_idle_fn)(void *arg);

struct core {
    struct event_base *base;
    const struct logger *log;
    struct config *config;       /* the current snapshot (one reference, the embedder's) */
    struct backend *backend;     /* decides */
    struct backend *fallback;    /* failure_mode local decides here (in process,
                                  * synchronous); NULL: answer as failure_mode open */
    struct deny_cache *deny;     /* NULL: no deny cache */
    struct metrics *metrics;     /* this loop's shard */
    struct log_limit late_log;   /* "<backend> deadline passed" */
    struct log_limit error_log;  /* "<backend> error" */
    size_t inflight;             /* checks started and not yet answered (read by
                                  * other threads for /metrics: atomic loads) */
    size_t *backend_pending;     /* process-wide: backend calls not yet
                                  * completed, bounded by max_inflight */
    int64_t reset_seen_us;       /* monotonic: the last reset announcement heard */
    struct overrides *overrides; /* process-wide run-time overrides; NULL: none */
    core_status_fn status_of;    /* for the access log; required when it is on */
    core_idle_fn idle;           /* NULL: nobody waits for idleness */
    void *idle_arg;

    /* This loop's sketches of the heaviest keys (top_keys.h); NULL: none. */
    struct top_keys *top;

    /* Hot keys' leased blocks (local_lease.h); NULL: none. */
    struct local_lease_table *leases;
    /* Draining: no lease is taken any more. */
    int leases_off;
    /* Checks waiting for a take of their key (check.c), a doubly linked list. */
    struct check *lease_waiting;
};

/* Takes one unit of *count if fewer than max are taken, so that every
 * thread together never holds more than max: returns 1 (taken; give it back
 * with core_count_release) or 0. Any thread: two atomic operations per
 * take and release (bench/memory_workers.sh measures their share); a share
 * per worker would be free but refuse below the limit, as SO_REUSEPORT
 * spreads connections unevenly. */
int core_count_take(size_t *count, size_t max) RL_WUR;
void core_count_release(size_t *count);

/* A reset of (policy, key) was announced or made: drops the key from the
 * deny cache, its leased blocks (not given back: stranded) and from the
 * fallback's store, and remembers when (a denial of
 * a check sent before is not cached). policy NULL: announcements may have
 * been missed: empties the deny cache. On the core's own thread. */
void core_forget_key(struct core *core, const char *policy, const char *key, size_t keylen);

/* Writes "<backend's name> <what>" into buf ("redis did not answer in
 * time"): what the core tells and logs of its backend is named by the
 * backend, not the core. Returns buf. */
const char *core_backend_said(const struct core *core, char *buf, size_t len, const char *what);

/* Tells the embedder the core may have become idle. */
void core_maybe_idle(struct core *core);

#endif
