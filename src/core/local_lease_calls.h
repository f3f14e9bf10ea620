/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local_lease_calls.h: the core's use of local leases (local_lease.h): which
 * checks may lease, the take's completion, giving blocks back through the
 * backend, and dropping blocks on a reload or a drain (a reset's drop is
 * core_forget_key's). Counts the
 * ratelimitd_local_lease* metrics.
 */
#ifndef RATELIMITD_LOCAL_LEASE_CALLS_H
#define RATELIMITD_LOCAL_LEASE_CALLS_H

#include <stdint.h>

#include "core/core.h"
#include "core/local_lease.h"

struct backend_reply;

/* 1 if req may be decided through a local lease on core: one real check
 * (not a dry run, report, inspection or shadow) of cost > 0, of a policy
 * of the config (not one made for the request)
 * with `lease:` whose every tier (the key's variant's) leases, on a
 * backend that takes lease calls. */
int local_lease_eligible(const struct core *core, const struct check_request *req);

/* For an eligible req: SERVED (out filled), ASK (req made a take, *ticket
 * set: end it with local_lease_end) or PLAIN. */
enum local_lease_step local_lease_step(struct core *core, struct check_request *req, int64_t now_us,
                                       struct tier_result *out, uint64_t *ticket);

/*
 * The take of ticket for req completed (r; NULL: it was never sent),
 * sent at sent_us (monotonic). Installs the block, or gives its unspent
 * units back when the key's entry was dropped since, a reset was seen
 * after sent_us, or leases are off. cfg: the snapshot req was made under.
 */
void local_lease_end(struct core *core, struct config *cfg, const struct check_request *req,
                     uint64_t ticket, int64_t sent_us, const struct backend_reply *r);

/* Before core->config becomes next: the blocks of every policy that next
 * changes or removes are given back under the current snapshot. */
void local_lease_reload(struct core *core, const struct config *next);

/* The worker drains: every block is given back, and no lease is taken any
 * more (leases_off). */
void local_lease_drain(struct core *core);

#endif
