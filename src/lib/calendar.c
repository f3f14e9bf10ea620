/* SPDX-License-Identifier: Apache-2.0 */
/*
 * calendar.c: which calendar window an instant falls in, in a zone: local
 * dates from tzif.c's offsets, a window's first and next day by its unit,
 * and those days' first instants (tzif_first_instant). Pure.
 *
 * Owns the rules of a window: a day is a local date; a week starts on
 * week_start; a month runs from the anchor day to the next month's anchor
 * day, each clamped to its month's last day (an anchor of 31 starts
 * February's window on the 28th or 29th and March's on the 31st); a year
 * starts on January 1. Does not own the zone (tzif.c) nor the counting.
 */
#include "lib/calendar.h"

const char *const calendar_unit_names[] = {"day", "week", "month", "year", NULL};
const char *const calendar_weekday_names[] = {"monday", "tuesday",  "wednesday", "thursday",
                                              "friday", "saturday", "sunday",    NULL};

#define DAY_S 86400LL
#define US 1000000LL

int64_t calendar_max_span_us(enum calendar_unit u)
{
    static const int64_t days[] = {
        [CALENDAR_DAY] = 1, [CALENDAR_WEEK] = 7, [CALENDAR_MONTH] = 31, [CALENDAR_YEAR] = 366};
    if (u < CALENDAR_DAY || u > CALENDAR_YEAR)
        return 0;
    return days[u] * DAY_S * US;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* The day (days since 1970-01-01) of the anchor in month m of year y. */
static int64_t anchor_in(int64_t y, int m, int anchor)
{
    while (m < 1)
        m += 12, y--;
    while (m > 12)
        m -= 12, y++;
    int dim = tzif_days_in_month(y, m);
    return tzif_days_from_civil(y, m, anchor < dim ? anchor : dim);
}

/* The first day of the window that holds local day `day`, and the first
 * day of the next window. */
static void window_days(const struct calendar_spec *c, int64_t day, int64_t *first, int64_t *next)
{
    int64_t y;
    int m, d;
    tzif_civil_from_days(day, &y, &m, &d);
    switch (c->unit) {
    case CALENDAR_WEEK: {
        int wd = (int)((day % 7 + 7 + 3) % 7); /* 0 = Monday; 1970-01-01 was a Thursday */
        *first = day - (wd - c->week_start + 7) % 7;
        *next = *first + 7;
        return;
    }
    case CALENDAR_MONTH: {
        int anchor = c->anchor_day >= 1 ? c->anchor_day : 1;
        int64_t here = anchor_in(y, m, anchor);
        if (day >= here) {
            *first = here;
            *next = anchor_in(y, m + 1, anchor);
        } else {
            *first = anchor_in(y, m - 1, anchor);
            *next = here;
        }
        return;
    }
    case CALENDAR_YEAR:
        *first = tzif_days_from_civil(y, 1, 1);
        *next = tzif_days_from_civil(y + 1, 1, 1);
        return;
    default:
        *first = day;
        *next = day + 1;
        return;
    }
}

static int64_t day_start_us(const struct calendar_spec *c, int64_t day)
{
    return tzif_first_instant(c->zone, day * DAY_S) * US;
}

void calendar_window(const struct calendar_spec *c, int64_t now_us, int64_t *start_us,
                     int64_t *end_us)
{
    int64_t t = floor_div(now_us, US);
    int64_t day = floor_div(t + tzif_offset(c->zone, t), DAY_S), first, next;
    /* The local date names the window, except where a fall-back crosses
     * midnight (the clock reads yesterday again after today began): then
     * the window is a neighbour. Two steps cover any real zone. */
    for (int i = 0; i < 3; i++) {
        window_days(c, day, &first, &next);
        *start_us = day_start_us(c, first);
        *end_us = day_start_us(c, next);
        if (now_us < *start_us)
            day = first - 1;
        else if (now_us >= *end_us)
            day = next;
        else
            return;
    }
}

void calendar_bounds(const struct calendar_spec *c, int64_t now_us, int64_t b[4])
{
    int64_t s, e;
    calendar_window(c, now_us, &b[1], &b[2]);
    calendar_window(c, b[1] - 1, &b[0], &s);
    calendar_window(c, b[2], &e, &b[3]);
}
