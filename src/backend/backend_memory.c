/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_memory.c: `backend: memory`, decisions in this process's memory
 * with the C algorithms of limiter_local.c, exact and identical to the Lua
 * (tests/integration/test_local_diff.py). No Redis at all: for a single
 * daemon (a sidecar, the quick start). Limits: one process's truth (two
 * daemons count apart), and counters are lost on restart.
 *
 * Owns the store's locking rule, the one place the lock is taken: the store
 * (limiter_local.c) is pure and not thread-safe, and this file is the only
 * way into it from the daemon (decisions, resets, a reset key forgotten by
 * the fallback), so the rule lives with the only code that can break it.
 * The process owns the store (backend/registry.c's shared state), shared
 * by every worker's memory backends: `backend: memory`, and the fallback that
 * answers failure_mode local with the Redis backend.
 *
 * One lock rather than keys sharded to workers: a request may name several
 * keys and must be decided atomically, and the lock is
 * held for the decision only: with 2 workers, the daemon's share of time
 * in the lock (futex waits included) stays a fraction of its time in the
 * decision, as measured by bench/memory_workers.sh (README "Workers").
 */
#include <pthread.h>
#include <stdlib.h>

#include "backend/backend_memory.h"
#include "backend/memory_top.h"
#include "limiter/limiter_local.h"

struct backend_memory_store {
    struct local_store *store;
    pthread_mutex_t lock;   /* serialises whole decisions (every tier at once) */
    struct memory_top *top; /* the heaviest keys' sketches, under their own lock */
};

struct backend_memory {
    struct backend base; /* first */
    struct backend_memory_store *shared;
};

struct backend_memory_store *backend_memory_store_new(size_t max_keys, uint64_t hash_seed)
{
    struct backend_memory_store *s = xcalloc(1, sizeof *s);
    s->store = local_store_new(max_keys, hash_seed);
    s->top = memory_top_new();
    pthread_mutex_init(&s->lock, NULL);
    return s;
}

void backend_memory_store_free(struct backend_memory_store *s)
{
    if (!s)
        return;
    local_store_free(s->store);
    memory_top_free(s->top);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

size_t backend_memory_store_snapshot(struct backend_memory_store *s, struct buf *out,
                                     int64_t *locked_us, const struct buf *extra)
{
    size_t start = out->len;
    pthread_mutex_lock(&s->lock);
    int64_t t0 = util_monotonic_us();
    size_t n = store_file_snapshot(s->store, util_realtime_us(), out);
    int64_t held = util_monotonic_us() - t0;
    pthread_mutex_unlock(&s->lock);
    if (locked_us)
        *locked_us = held;
    store_file_seal(out, start, extra ? extra->data : NULL,
                    extra ? extra->len : 0); /* 7 MB of SipHash for 100 000 keys: not in the lock */
    return n;
}

int backend_memory_store_restore(struct backend_memory_store *s, const void *data, size_t len,
                                 struct store_file_counts *c, char *err, size_t errlen)
{
    pthread_mutex_lock(&s->lock);
    int rc = store_file_decode(s->store, data, len, util_realtime_us(), c, err, errlen);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int backend_memory_store_dump(struct backend_memory_store *s, int fd, const struct buf *extra,
                              char *err, size_t errlen)
{
    struct buf b = {0};
    backend_memory_store_snapshot(s, &b, NULL, extra);
    int rc = store_file_write_fd(fd, b.data, b.len, err, errlen);
    buf_free(&b);
    return rc;
}

int backend_memory_store_load(struct backend_memory_store *s, int fd, struct buf *image,
                              struct store_file_counts *c, char *err, size_t errlen)
{
    int rc = store_file_read_fd(fd, image, err, errlen);
    if (rc == 0)
        rc = backend_memory_store_restore(s, image->data, image->len, c, err, errlen);
    return rc;
}

static int memory_decide(struct backend *iface, const struct config *cfg,
                         const struct check_request *req, int64_t now_us, backend_done_fn done,
                         void *arg)
{
    struct backend_memory *b = (struct backend_memory *)iface;
    size_t n = request_tiers(req);
    struct tier_result buf[16];
    struct tier_result *res = n <= 16 ? buf : xcalloc(n, sizeof *res);
    pthread_mutex_lock(&b->shared->lock);
    local_decide(b->shared->store, cfg->key_prefix, req, now_us >= 0 ? now_us : util_realtime_us(),
                 res);
    pthread_mutex_unlock(&b->shared->lock);
    struct backend_reply reply = {.status = BACKEND_OK, .results = res};
    done(arg, &reply);
    if (res != buf)
        free(res);
    return 0;
}

static int memory_lease(struct backend *iface, const struct config *cfg, int renew,
                        const struct lease_ref *refs, size_t n, backend_lease_done_fn done,
                        void *arg)
{
    struct backend_memory *b = (struct backend_memory *)iface;
    struct lease_outcome *out = xcalloc(n ? n : 1, sizeof *out);
    pthread_mutex_lock(&b->shared->lock);
    local_store_lease(b->shared->store, cfg->key_prefix, renew, refs, n, util_realtime_us(), out);
    pthread_mutex_unlock(&b->shared->lock);
    struct backend_lease_reply reply = {.status = BACKEND_OK, .outcomes = out};
    done(arg, &reply);
    free(out);
    return 0;
}

/* The store is this process's only state, and no deny cache serves an
 * in-process backend: forgetting the key is the whole reset. */
static int memory_reset(struct backend *iface, const struct config *cfg, const struct policy *p,
                        const char *key, size_t keylen, backend_reset_done_fn done, void *arg)
{
    struct backend_memory *b = (struct backend_memory *)iface;
    pthread_mutex_lock(&b->shared->lock);
    size_t n =
        local_store_forget(b->shared->store, cfg->key_prefix, p, key, keylen, util_realtime_us());
    pthread_mutex_unlock(&b->shared->lock);
    struct backend_reset_reply reply = {
        .status = BACKEND_OK, .deleted = (long long)n, .notified = -1};
    done(arg, &reply);
    return 0;
}

static int memory_top_put_op(struct backend *iface, const struct config *cfg, const char *policy,
                             int64_t minute, const char *member, const char *data, size_t len)
{
    memory_top_put(((struct backend_memory *)iface)->shared->top, policy, minute, member, data,
                   len);
    return 0;
}

static int memory_top_get_op(struct backend *iface, const struct config *cfg, const char *policy,
                             int64_t lo, int64_t hi, backend_top_done_fn done, void *arg)
{
    memory_top_get(((struct backend_memory *)iface)->shared->top, policy, lo, hi, done, arg);
    return 0;
}

/* Nothing else shares this process's memory. */
static void memory_watch_resets(struct backend *iface, const struct config *cfg)
{
}

static void memory_start(struct backend *iface)
{
}

static void memory_note_timeout(struct backend *iface)
{
}

static int memory_ready(const struct backend *iface)
{
    return 1;
}

static const char *memory_target(const struct backend *iface)
{
    return "memory";
}

static void memory_free(struct backend *iface)
{
    free(iface);
}

static const struct backend_ops memory_ops = {
    .name = "memory",
    .decide = memory_decide,
    .lease = memory_lease,
    .reset = memory_reset,
    .watch_resets = memory_watch_resets,
    .top_put = memory_top_put_op,
    .top_get = memory_top_get_op,
    .note_timeout = memory_note_timeout,
    .start = memory_start,
    .ready = memory_ready,
    .target = memory_target,
    .free = memory_free,
    .in_process = 1,
};

struct backend *backend_memory_new(struct backend_memory_store *store)
{
    struct backend_memory *b = xcalloc(1, sizeof *b);
    b->base.ops = &memory_ops;
    b->shared = store;
    return &b->base;
}
