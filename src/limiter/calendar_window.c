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
 * retry are fixed_window.c's. The bounds come from lib/calendar.c.
 * Does not own: the store, the two passes (limiter_local.c), clocks.
 */
#include "limiter/limiter_internal.h"

/* calendar_window.lua's load: the bounds from the calendar; the count is
 * this window's only if both ends match. */
static void cal_load(struct tier_state *ts, int64_t now)
{
    ts->n = 0;
    calendar_window(&ts->t->calendar, now, &ts->start, &ts->window_end);
    if (ts->e && ts->e->u.fw.cal && ts->e->u.fw.s == ts->start && ts->e->u.fw.e == ts->window_end)
        ts->n = ts->e->u.fw.n;
}

static void cal_commit(const struct tier_state *ts, struct entry *e, int64_t now)
{
    fixed_window_write(ts, e, now, ts->n + ts->cost, 1);
}

/* calendar_window.report: as fixed_window's, in the calendar window. */
static void cal_report(struct tier_state *ts, struct entry *e, int64_t now)
{
    fixed_window_write(ts, e, now, min64(max64(0, ts->n + ts->cost), EXACT_MAX), 1);
}

const struct alg_ops calendar_window_ops = {
    .kind = KIND_FIXED, /* fixed_window's state, told apart by its `cal` */
    .load = cal_load,
    .allows = fixed_window_allows,
    .figures = fixed_window_figures,
    .retry = fixed_window_retry,
    .commit = cal_commit,
    .report = cal_report,
};
