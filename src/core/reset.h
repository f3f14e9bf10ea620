/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reset.h: the life of one key reset (the admin API's DELETE), front-
 * neutral: the backend's reset, its deadline (the backend's call timeout),
 * its log line and metric, and forgetting the key on this loop. The same
 * pending-call life as a check (pending.c).
 */
#ifndef RATELIMITD_RESET_H
#define RATELIMITD_RESET_H

#include <stddef.h>

#include "core/core.h"

/* The outcome of a reset, for the front. */
struct reset_result {
    int ok;
    long long deleted;  /* ok: state entries (Redis keys) removed */
    long long notified; /* ok: reset listeners told; -1: none to tell (memory) */
    const char *why;    /* !ok: a short reason */
    const char *policy;
    const char *key;
    size_t keylen;
};

/* result and what it points to are valid only during the call. */
typedef void (*reset_reply_fn)(void *ctx, const struct reset_result *result);

struct reset;

/*
 * Resets (p, key) on core's backend; p points into core->config. Takes key
 * (keylen bytes, malloc'ed). peer names the caller in the log line
 * (copied). Calls reply(ctx, result) exactly once: possibly before
 * reset_start returns (memory backend, backend down), else later from the
 * core's loop, at the latest at the backend's deadline. Returns a handle
 * valid until reply is called, for reset_cancel, or NULL when reply was
 * already called.
 */
struct reset *reset_start(struct core *core, const struct policy *p, char *key, size_t keylen,
                          const char *peer, reset_reply_fn reply, void *ctx);

/* The front no longer wants the answer: reply will not be called (the
 * reset itself goes on). NULL is a no-op. */
void reset_cancel(struct reset *r);

#endif
