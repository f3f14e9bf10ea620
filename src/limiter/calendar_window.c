/* SPDX-License-Identifier: Apache-2.0 */
/*
 * calendar_window.c: a fixed window whose bounds are calendar days, weeks,
 * months or years in a time zone (a fixed_window tier with `calendar:`),
 * counted as "w:<start>:<end>:<count>". The C twin of
 * lua/calendar_window.lua, step for step and with its names, for the
 * in-memory limiter (limiter_local.h); its row in the ops table is
 * calendar_window_ops.
 *
 * Owns: the calendar window's load, commit and report; allows, figures and
 * retry are fixed_window.c's. The bounds come from lib/calendar.c, or
 * from the caller (the module, sent them as the script is).
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include <stdlib.h>

#include "limiter/limiter_internal.h"

int calendar_window_pick(const int64_t b[4], int64_t now, int64_t *s, int64_t *e)
{
    int i = now < b[1] ? 0 : now >= b[2] ? 2 : 1;
    if (now < b[i] || now >= b[i + 1])
        return -1;
    *s = b[i];
    *e = b[i + 1];
    return 0;
}

/* calendar_window.lua's load: the bounds sent (the caller checked that
 * they hold now) or from the calendar; the count is this window's only if
 * both ends match. */
static void cal_load(struct tier_state *ts, int64_t now)
{
    ts->n = 0;
    if (!ts->bounds)
        calendar_window(&ts->t->calendar, now, &ts->start, &ts->window_end);
    else if (calendar_window_pick(ts->bounds, now, &ts->start, &ts->window_end) < 0)
        abort(); /* a broken invariant: redis_state_read checks them first */
    if (ts->e && ts->e->u.fw.cal && ts->e->u.fw.s == ts->start && ts->e->u.fw.e == ts->window_end)
        ts->n = ts->e->u.fw.n;
}

static void cal_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    fixed_window_write(ts, e, now, lua_add(ts->n, ts->cost), 1);
}

/* calendar_window.report: as fixed_window's, in the calendar window. */
static void cal_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    fixed_window_write(ts, e, now, min64(max64(0, ts->n + ts->cost), EXACT_MAX), 1);
}

/* calendar_window.lease_same: the block's calendar window only. */
static int cal_lease_same(const struct tier_state *ts, int64_t taken)
{
    return taken >= ts->start;
}

const struct alg_ops calendar_window_ops = {
    .kind = KIND_FIXED, /* fixed_window's state, told apart by its `cal` */
    .load = cal_load,
    .allows = fixed_window_allows,
    .figures = fixed_window_figures,
    .retry = fixed_window_retry,
    .commit = cal_commit,
    .report = cal_report,
    .lease_avail = fixed_window_lease_avail,
    .lease_until = fixed_window_lease_until,
    .lease_same = cal_lease_same,
};
