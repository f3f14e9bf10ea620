/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override_change.h: the life of one change of a run-time override (the
 * admin API's PUT and DELETE on /v1/overrides), front-neutral: the
 * backend's store and announcement (backend.h's override_store), its
 * deadline, applying it to the process-wide table (overrides.h), its log
 * line; and what a worker does with the changes other daemons announce
 * (override_change_heard) and after its announcements' connection came
 * back (override_change_reload). The same pending-call life as a reset.
 */
#ifndef RATELIMITD_OVERRIDE_CHANGE_H
#define RATELIMITD_OVERRIDE_CHANGE_H

#include <stddef.h>

#include "core/core.h"
#include "core/overrides.h"

/* The outcome of a change, for the front. */
struct override_change_result {
    int ok;                     /* stored and applied (or, for a removal, there was none: !found) */
    int found;                  /* a removal: there was one to remove */
    const char *why;            /* !ok: a short reason */
    const struct override *now; /* a set: what is in force now */
    const struct override *previous; /* what was in force before, or NULL */
    const char *policy;
    const char *key;
    size_t keylen;
};

/* result and what it points to are valid only during the call. */
typedef void (*override_reply_fn)(void *ctx, const struct override_change_result *result);

struct override_change;

/*
 * Sets o (taken; o->by is set here from peer and token, both for the log
 * line) as its (policy, key)'s override, or with o NULL removes (policy,
 * key)'s (key copied). Calls reply(ctx, result) exactly once: possibly
 * before this returns (memory backend, backend down), else later from the
 * core's loop, at the latest at the backend's deadline. Returns a handle
 * valid until reply is called, for override_change_cancel, or NULL when
 * reply was already called.
 */
struct override_change *override_change_start(struct core *core, struct override *o,
                                              const char *policy, const char *key, size_t keylen,
                                              const char *peer, const char *token,
                                              override_reply_fn reply, void *ctx);

/* The front no longer wants the answer (the change itself goes on). NULL
 * is a no-op. */
void override_change_cancel(struct override_change *c);

/* A change announced through core's backend (backend_override_seen_fn). */
void override_change_heard(struct core *core, const char *json, size_t len);

/* o has expired (overrides_sweep): removes it from the backend's store,
 * if it is still stored as it was (a daemon that sees it first removes it;
 * a failure leaves it to the next sweep or re-read). Nothing to do for a
 * backend that stores none. */
void override_change_expired(struct core *core, const struct override *o);

/* Announcements may have been missed: re-reads every stored override into
 * the table (nothing to do for a backend that stores none). */
void override_change_reload(struct core *core);

#endif
