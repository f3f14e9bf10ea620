/*
 * check.h: the life of one check, transport- and backend-neutral. A front
 * hands over a decoded request; the core asks the worker's backend (or its
 * deny cache), keeps the deadline, applies max_inflight and the failure
 * modes, counts metrics and the access log, and calls the front back exactly
 * once with a verdict.
 */
#ifndef RATELIMITD_CHECK_H
#define RATELIMITD_CHECK_H

#include "core/decision.h"

struct worker;
struct check;

/* v and everything it points to are valid only during the call. */
typedef void (*check_reply_fn)(void *ctx, const struct verdict *v);

/*
 * Decides req, which was decoded against w->config (its items point into
 * that snapshot). Takes req (left zeroed). Calls reply(ctx, verdict) exactly
 * once: possibly before check_start returns (memory backend, deny cache,
 * backend down), else later from w's event loop. Returns a handle valid
 * until reply is called, for check_cancel, or NULL when reply was already
 * called.
 */
struct check *check_start(struct worker *w, struct check_request *req, check_reply_fn reply,
                          void *ctx);

/* The front no longer wants the answer (its client left): reply will not be
 * called; the check is freed once its backend call completes. */
void check_cancel(struct check *c);

#endif
