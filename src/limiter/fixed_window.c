/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fixed_window.c: at most `limit` units per aligned window of window_us,
 * counted from 0 in each window ("f:<window end>:<count>"). The C twin of
 * lua/fixed_window.lua, step for step and with its names, for the in-memory
 * limiter (limiter_local.h); its row in the ops table is fixed_window_ops.
 *
 * Owns: the window's count: load, the steps calendar_window.c shares
 * (allows, figures, retry) and the write both make.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include "limiter/limiter_internal.h"

static void fw_load(struct tier_state *ts, int64_t now)
{
    int64_t W = ts->t->window_us;
    ts->n = 0;
    ts->window_end = (idiv(now, W) + 1) * W;
    /* The count is the current window's only if it ends where ours does. */
    if (ts->e && !ts->e->u.fw.cal && ts->e->u.fw.e == ts->window_end)
        ts->n = ts->e->u.fw.n;
}

int fixed_window_allows(const struct tier_state *ts)
{
    /* Past 2^53 the script's sum rounds (2^53 + 1 fits a limit of 2^53):
     * so does this one, to decide as it does. */
    return lua_add(ts->n, ts->cost) <= ts->t->limit;
}

void fixed_window_figures(const struct tier_state *ts, int64_t now, int consumed,
                          struct tier_result *r)
{
    int64_t n = lua_add(ts->n, consumed ? ts->cost : 0);
    /* A limit of 0 (requests_per_unit: 0) is always full: it resets when
     * the window ends, as fixed_window.lua says. */
    r->reset_us = n > 0 || ts->t->limit == 0 ? ts->window_end - now : 0;
    r->remaining = max64(0, ts->t->limit - n);
}

int64_t fixed_window_retry(const struct tier_state *ts, int64_t now)
{
    return ts->window_end - now;
}

void fixed_window_write(const struct tier_state *ts, struct entry *e, int64_t now, int64_t n,
                        int cal)
{
    e->u.fw.e = ts->window_end;
    e->u.fw.n = n;
    e->u.fw.cal = cal;
    e->u.fw.s = cal ? ts->start : 0;
    local_store_expire_until(e, now, ts->window_end);
}

static void fw_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    fixed_window_write(ts, e, now, lua_add(ts->n, ts->cost), 0);
}

/* fixed_window.report: n += cost (past the limit if so), never below 0. */
static void fw_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    fixed_window_write(ts, e, now, min64(max64(0, ts->n + ts->cost), EXACT_MAX), 0);
}

/* Local leases (fixed_window.lease_avail, lease_until, lease_same): what
 * the window has left, spent by its end, given back within it only. */
int64_t fixed_window_lease_avail(const struct tier_state *ts)
{
    return ts->t->limit - ts->n;
}

int64_t fixed_window_lease_until(const struct tier_state *ts, int64_t now)
{
    (void)now;
    return ts->window_end;
}

static int fw_lease_same(const struct tier_state *ts, int64_t taken)
{
    return taken >= ts->window_end - ts->t->window_us;
}

const struct alg_ops fixed_window_ops = {
    .kind = KIND_FIXED,
    .load = fw_load,
    .allows = fixed_window_allows,
    .figures = fixed_window_figures,
    .retry = fixed_window_retry,
    .commit = fw_commit,
    .report = fw_report,
    .lease_avail = fixed_window_lease_avail,
    .lease_until = fixed_window_lease_until,
    .lease_same = fw_lease_same,
};
