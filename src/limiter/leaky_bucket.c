/* SPDX-License-Identifier: Apache-2.0 */
/*
 * leaky_bucket.c: shaping, like nginx's limit_req without nodelay: gcra with
 * capacity burst + 1 (policy_tier_capacity), whose allowed requests are told
 * how long to wait. The C twin of lua/leaky_bucket.lua, step for step and
 * with its names, for the in-memory limiter (limiter_local.h); its row in the
 * ops table is leaky_bucket_ops.
 *
 * Owns: the delay; every other step is gcra.c's, and so is the state.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include "limiter/limiter_internal.h"

/* leaky_bucket.lua's delay_us: when the last unit of an allowed cost is due. */
static int64_t leaky_delay(const struct tier_state *ts)
{
    return (int64_t)idiv_ceil128(ts->d + (i128)(ts->cost - 1) * ts->t->window_us, ts->t->limit);
}

const struct alg_ops leaky_bucket_ops = {
    .kind = KIND_GCRA, /* gcra's state: their scripts share the string */
    .load = gcra_load,
    .allows = gcra_allows,
    .figures = gcra_figures,
    .retry = gcra_retry,
    .delay = leaky_delay,
    .commit = gcra_commit,
    .report = gcra_report,
};
