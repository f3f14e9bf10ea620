/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease.h: the life of one release or renew of concurrency leases (ids
 * and types: lease_id.h), front-neutral: the backend's lease operation,
 * its deadline, its metrics; local leases ("l") go to the fallback store.
 */
#ifndef RATELIMITD_LEASE_H
#define RATELIMITD_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "core/lease_id.h"

/* The answer to a release or renew, for the front. */
struct lease_result {
    int ok;          /* 0: the backend could not answer (why) */
    const char *why; /* !ok: a short reason */
    int renew;
    size_t n;
    const char *const *ids;               /* as the caller gave them */
    const struct lease_outcome *outcomes; /* n */
    size_t released, renewed, expired, unknown;
};

typedef void (*lease_reply_fn)(void *ctx, const struct lease_result *result);

struct lease_call;

/*
 * Releases (renew 0) or renews (1) the leases of the n (<= LEASE_MAX_IDS)
 * ids; takes ids (each malloc'ed, and the array). An id that does not
 * decode, that names a policy or tier the config no longer has (renew
 * only: a release needs no config), or a local lease on a daemon without
 * failure_mode local's store is unknown. Calls reply(ctx, result) exactly
 * once: possibly before lease_start returns, else later from the core's
 * loop, at the latest at the backend's deadline. Returns a handle valid
 * until reply is called, for lease_cancel, or NULL when reply was called.
 */
struct lease_call *lease_start(struct core *core, int renew, char **ids, size_t n,
                               lease_reply_fn reply, void *ctx);

/* The front no longer wants the answer (the operation goes on). NULL: no-op. */
void lease_cancel(struct lease_call *l);

#endif
