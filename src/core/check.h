/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.h: the life of one check, transport- and backend-neutral. A front
 * hands over a decoded request; the core asks its backend (or its deny
 * cache), keeps the deadline, applies max_inflight and the failure modes
 * (local: through the core's fallback backend), counts metrics and the
 * access log, and calls the front back exactly once with a verdict.
 */
#ifndef RATELIMITD_CHECK_H
#define RATELIMITD_CHECK_H

#include "core/core.h"
#include "core/decision.h"

struct check;

/* v and everything it points to are valid only during the call. */
typedef void (*check_reply_fn)(void *ctx, const struct verdict *v);

/*
 * Decides req, which was decoded against core->config (its items point
 * into that snapshot). Takes req (left zeroed). Calls reply(ctx, verdict)
 * exactly once: possibly before check_start returns (memory backend, deny
 * cache, backend down), else later from the core's event loop. Returns a
 * handle valid until reply is called, for check_cancel, or NULL when reply
 * was already called.
 */
struct check *check_start(struct core *core, struct check_request *req, check_reply_fn reply,
                          void *ctx);

/* The front no longer wants the answer (its client left): reply will not be
 * called; the check is freed once its backend call completes. NULL is a
 * no-op. */
void check_cancel(struct check *c);

#endif
