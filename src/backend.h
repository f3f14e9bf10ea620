/*
 * backend.h: where decisions are made. One interface, several
 * implementations: backend_redis.c (the shared truth, one atomic script or
 * Function call per request) and backend_memory.c (this process's memory,
 * the C algorithms of limiter_local.c). The core (check.c) sees only this.
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
 */
#ifndef RATELIMITD_BACKEND_H
#define RATELIMITD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "util.h"

enum backend_status {
    BACKEND_OK,          /* results hold one entry per tier */
    BACKEND_ERROR,       /* the backend answered with an error (errmsg) */
    BACKEND_UNAVAILABLE, /* not connected, or the connection was lost */
};

struct backend_reply {
    enum backend_status status;
    const struct tier_result *results; /* OK: request_tiers(req) entries */
    const char *errmsg;                /* ERROR, UNAVAILABLE */
};

/* reply and what it points to are valid only during the callback. */
typedef void (*backend_done_fn)(void *arg, const struct backend_reply *reply);

/* Called whenever backend_ready changes. */
typedef void (*backend_state_fn)(void *arg, int ready);

struct backend;

struct backend_ops {
    const char *name; /* "redis", "memory" */
    int (*decide)(struct backend *b, const struct config *cfg, const struct check_request *req,
                  int64_t now_us, backend_done_fn done, void *arg);
    /* A call's deadline passed with no reply (see backend_redis.h). */
    void (*note_timeout)(struct backend *b);
    void (*start)(struct backend *b);
    int (*ready)(const struct backend *b);
    /* A short description for logs: "127.0.0.1:6379/0", "memory". */
    const char *(*target)(const struct backend *b);
    void (*free)(struct backend *b);
    /* Decides in this process: no deadline is needed, no failure mode. */
    int in_process;
};

/* Every implementation starts with this. */
struct backend {
    const struct backend_ops *ops;
    backend_state_fn on_state;
    void *on_state_arg;
    int reported_ready; /* what on_state was last told */
};

static inline int backend_decide(struct backend *b, const struct config *cfg,
                                 const struct check_request *req, int64_t now_us,
                                 backend_done_fn done, void *arg)
{
    return b->ops->decide(b, cfg, req, now_us, done, arg);
}

static inline int backend_ready(const struct backend *b)
{
    return b->ops->ready(b);
}

void backend_on_state(struct backend *b, backend_state_fn fn, void *arg);

/* For implementations, after any change of state: tells the listener when
 * backend_ready differs from what it was last told. */
void backend_state_changed(struct backend *b);

/* NULL is a no-op. */
void backend_free(struct backend *b);

#endif
