/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.h: what the core asks of a backend, the one place decisions are
 * made: the ops table every backend fills and the completion contract of
 * its calls. It belongs to the core, which is what calls a backend
 * (check.c, reset.c, lease.c, local_lease_calls.c; the worker only makes,
 * starts and frees one), so that the core includes nothing of backend/;
 * the backends under src/backend/ include it. Which backends
 * exist, and which one a config snapshot chooses, is the registry's
 * (backend/registry.c), not this file's. Owns the interface and what every
 * backend shares (backend.c: the readiness listener, freeing); does not
 * own any backend.
 *
 * Contract of decide: the backend decides every tier of every check of req
 * as of now_us (or its own clock when now_us < 0: Redis TIME, or the
 * process's wall clock for memory), atomically, two passes (a denied
 * request, a dry run and cost 0 write nothing). It returns -1 when it cannot
 * take the call right now (done is then never called; the caller answers at
 * once), else 0 and calls done exactly once, possibly before decide returns
 * (memory) or after the caller has given up on it (a deadline): the caller
 * must then only release what it holds. req and cfg must stay valid until
 * done is called.
 *
 * Contract of reset (the admin API's DELETE): forgets every tier's state of
 * (policy, key), so that the key starts afresh, and tells every daemon
 * sharing the state (the reset listener of each, this one's included) to
 * drop what it holds locally about the key (deny cache, failure_mode local
 * store). Same completion rule as decide: -1 (done never called) or 0 and
 * done exactly once.
 */
#ifndef RATELIMITD_BACKEND_H
#define RATELIMITD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/decision.h"
#include "core/lease_id.h"
#include "lib/buf.h"
#include "lib/util.h"

enum backend_status {
    BACKEND_OK,          /* results hold one entry per tier */
    BACKEND_ERROR,       /* the backend answered with an error (errmsg) */
    BACKEND_UNAVAILABLE, /* not connected, or the connection was lost */
};

struct backend_reply {
    enum backend_status status;
    const struct tier_result *results; /* OK: request_tiers(req) entries */
    const char *errmsg;                /* ERROR, UNAVAILABLE */
    /* OK and denied: the checks (bit i: check i) whose cost was taken all
     * the same, by a backend that decides a request in several atomic
     * steps (a Redis Cluster request spanning slots, denied in its second
     * phase after other slots committed); 0 everywhere else. */
    uint64_t taken;
    /* OK, for a request with a block_op (decision.h): TAKE: the units taken
     * (the check's cost included; 0 when denied) and the backend time by
     * which they must be spent; GIVE: the units given back (0: the window
     * had passed) and 0. */
    int64_t lease_granted;
    int64_t lease_until_us;
};

/* reply and what it points to are valid only during the callback. */
typedef void (*backend_done_fn)(void *arg, const struct backend_reply *reply);

/* Called whenever backend_ready changes. */
typedef void (*backend_state_fn)(void *arg, int ready);

/* What a reset did. */
struct backend_reset_reply {
    enum backend_status status;
    long long deleted;  /* OK: state entries (Redis keys) that existed */
    long long notified; /* OK: daemons' listeners told (Redis: PUBLISH's count) */
    const char *errmsg; /* ERROR, UNAVAILABLE */
};

typedef void (*backend_reset_done_fn)(void *arg, const struct backend_reset_reply *reply);

/* A reset of (policy, key) was announced (by any daemon sharing the
 * backend); policy NULL: announcements may have been missed (the listening
 * connection was down), so whatever is cached about any key may be stale.
 * key is keylen bytes, any bytes. */
typedef void (*backend_reset_seen_fn)(void *arg, const char *policy, const char *key,
                                      size_t keylen);

/* What a run-time override's store did (override_store, override_load):
 * existed (a removal: 1 if there was one to remove), or for a load the
 * stored overrides as JSON (override_json.h), n of them. */
struct backend_override_reply {
    enum backend_status status;
    const char *errmsg; /* ERROR, UNAVAILABLE */
    long long existed;
    size_t n;
    const char *const *values;
    const size_t *lens;
};

typedef void (*backend_override_done_fn)(void *arg, const struct backend_override_reply *reply);

/* A change of a run-time override was announced (by any daemon sharing
 * the backend, this one's included): json, len bytes, is override_json.h's
 * stored form. */
typedef void (*backend_override_seen_fn)(void *arg, const char *json, size_t len);

/* What a lease operation did: outcomes has one entry per lease (OK). */
struct backend_lease_reply {
    enum backend_status status;
    const struct lease_outcome *outcomes;
    const char *errmsg; /* ERROR, UNAVAILABLE */
};

typedef void (*backend_lease_done_fn)(void *arg, const struct backend_lease_reply *reply);

/* One member's sketches of one minute (core/top_keys.h), as handed over. */
struct backend_top_blob {
    const char *member;
    size_t member_len;
    const char *data;
    size_t len;
};

/* What top_get found: every member's sketches of the minutes asked (OK). */
struct backend_top_reply {
    enum backend_status status;
    const struct backend_top_blob *blobs;
    size_t n;
    const char *errmsg; /* ERROR, UNAVAILABLE */
};

typedef void (*backend_top_done_fn)(void *arg, const struct backend_top_reply *reply);

struct backend;

struct backend_ops {
    /* How messages and logs name it: "redis" (single, sentinel or
     * cluster), "memory". The core's words about its backend are built on
     * it ("redis did not answer in time"). */
    const char *name;
    int (*decide)(struct backend *b, const struct config *cfg, const struct check_request *req,
                  int64_t now_us, backend_done_fn done, void *arg);
    int (*reset)(struct backend *b, const struct config *cfg, const struct policy *p,
                 const char *key, size_t keylen, backend_reset_done_fn done, void *arg);
    /* Releases (renew 0) or renews (1, each for its ref's timeout_us) the
     * n leases of refs, as of the backend's clock. Same completion rule as
     * decide; refs must stay valid until done is called. */
    int (*lease)(struct backend *b, const struct config *cfg, int renew,
                 const struct lease_ref *refs, size_t n, backend_lease_done_fn done, void *arg);
    /* Run-time overrides (core/overrides.h) stored with the state, shared
     * by every daemon of cfg's key_prefix: stores json (len bytes) as
     * (policy, key)'s override, or removes it (json then announces the
     * removal; with expect, only if the stored value is expect: an expired
     * override, removed by whichever daemon sees it first, never one that
     * replaced it meanwhile), and announces json to every daemon's
     * on_override, in one atomic step (existed: 1 if removed). Same
     * completion rule as decide. NULL: the backend keeps
     * none (memory: the daemon's table is the store). */
    int (*override_store)(struct backend *b, const struct config *cfg, const char *policy,
                          const char *key, size_t keylen, const char *json, size_t len, int remove,
                          const struct buf *expect, backend_override_done_fn done, void *arg);
    /* Reads every stored override (reply.values). Same rule; NULL as above. */
    int (*override_load)(struct backend *b, const struct config *cfg, backend_override_done_fn done,
                         void *arg);
    /* The heaviest keys (core/top_keys.h). top_put keeps member's sketches
     * (data, len bytes) of policy and minute (unix time / 60) for
     * TOP_KEYS_TTL_S, replacing what member handed over for them before,
     * where every daemon sharing the backend reads them: sent with no
     * completion, -1 when it cannot be sent now (the next tick sends it
     * again). top_get reads every member's sketches of minutes lo .. hi:
     * the same completion rule as decide. */
    int (*top_put)(struct backend *b, const struct config *cfg, const char *policy, int64_t minute,
                   const char *member, const char *data, size_t len);
    int (*top_get)(struct backend *b, const struct config *cfg, const char *policy, int64_t lo,
                   int64_t hi, backend_top_done_fn done, void *arg);
    /* Listens for resets announced under cfg's key_prefix (again after a
     * reload that changes it), reporting them to on_reset. */
    void (*watch_resets)(struct backend *b, const struct config *cfg);
    /* How long the core waits for a call under cfg before answering per
     * failure_mode (its deadline); 0: no deadline (an in-process backend
     * completes within the call). NULL is 0. */
    int64_t (*call_timeout_us)(const struct backend *b, const struct config *cfg);
    /* A call's deadline passed with no reply: a backend may take a run of
     * them as a hung connection (the Redis backends open their circuit). */
    void (*note_timeout)(struct backend *b);
    void (*start)(struct backend *b);
    int (*ready)(const struct backend *b);
    /* For /readyz (NULL: nothing to say): what decides where the backend
     * is ready ("module", "functions", "module,functions" when nodes
     * differ), and why it is not, naming the node, when that is more than
     * "unavailable" (redis.module: on and a node without the module), or
     * NULL. */
    const char *(*decides_by)(const struct backend *b);
    const char *(*unusable)(const struct backend *b);
    /* A short description for logs: "127.0.0.1:6379/0", "memory". */
    const char *(*target)(const struct backend *b);
    void (*free)(struct backend *b);
    /* Decides in this process: no deadline is needed, no failure mode. */
    int in_process;
    /* Takes requests with a block_op (local leases, core/local_lease.h). */
    int local_leases;
};

/* Every implementation starts with this. */
struct backend {
    const struct backend_ops *ops;
    backend_state_fn on_state;
    void *on_state_arg;
    int reported_ready; /* what on_state was last told */
    backend_reset_seen_fn on_reset;
    void *on_reset_arg;
    backend_override_seen_fn on_override; /* heard with the resets */
    void *on_override_arg;
};

static inline int backend_decide(struct backend *b, const struct config *cfg,
                                 const struct check_request *req, int64_t now_us,
                                 backend_done_fn done, void *arg)
{
    return b->ops->decide(b, cfg, req, now_us, done, arg);
}

static inline int64_t backend_call_timeout_us(const struct backend *b, const struct config *cfg)
{
    return b->ops->call_timeout_us ? b->ops->call_timeout_us(b, cfg) : 0;
}

static inline int backend_ready(const struct backend *b)
{
    return b->ops->ready(b);
}

void backend_on_state(struct backend *b, backend_state_fn fn, void *arg);

/* Who hears of resets (see backend_reset_seen_fn). */
void backend_on_reset(struct backend *b, backend_reset_seen_fn fn, void *arg);

/* Who hears of run-time overrides' changes (backend_override_seen_fn). */
void backend_on_override(struct backend *b, backend_override_seen_fn fn, void *arg);

static inline int backend_reset(struct backend *b, const struct config *cfg, const struct policy *p,
                                const char *key, size_t keylen, backend_reset_done_fn done,
                                void *arg)
{
    return b->ops->reset(b, cfg, p, key, keylen, done, arg);
}

/* For implementations, after any change of state: tells the listener when
 * backend_ready differs from what it was last told. */
void backend_state_changed(struct backend *b);

/* NULL is a no-op. */
void backend_free(struct backend *b);

#endif
