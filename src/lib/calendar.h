/* SPDX-License-Identifier: Apache-2.0 */
/*
 * calendar.h: calendar windows (a day, a week, a month from a billing day,
 * a year) as real spans of time in a zone, daylight saving time included.
 * Pure: every function takes `now`; nothing here reads a clock.
 */
#ifndef RATELIMITD_CALENDAR_H
#define RATELIMITD_CALENDAR_H

#include <stdint.h>

#include "lib/tzif.h"

enum calendar_unit {
    CALENDAR_NONE, /* not a calendar window */
    CALENDAR_DAY,
    CALENDAR_WEEK,
    CALENDAR_MONTH,
    CALENDAR_YEAR,
};

/* A tier's calendar: its unit, its zone (owned by the config snapshot),
 * the month's anchor day (1-31, clamped to the month's last day; 1 unless
 * set) and the week's first day (0 = Monday ... 6 = Sunday). */
struct calendar_spec {
    enum calendar_unit unit;
    const struct tzif_zone *zone;
    int anchor_day;
    int week_start;
};

/* The names as the policy file writes them: "day", "week", "month", "year"
 * (index = enum value - 1); and the weekdays, "monday" first. NULL-ended. */
extern const char *const calendar_unit_names[];
extern const char *const calendar_weekday_names[];

/* The unit's nominal length in µs (1, 7, 31 or 366 days; a real window
 * may be an hour longer or shorter across a DST change, or shorter in
 * days): the tier's window_us for whatever compares tiers by length. */
int64_t calendar_max_span_us(enum calendar_unit u);

/*
 * The window [*start_us, *end_us) that contains now_us: it starts at the
 * first instant of its first local day (local midnight, or the end of a
 * gap that skips it) and ends where the next window starts.
 */
void calendar_window(const struct calendar_spec *c, int64_t now_us, int64_t *start_us,
                     int64_t *end_us);

/*
 * Four boundaries around now_us, ascending: b[0] the start of the window
 * before the current one, b[1] and b[2] the current window, b[3] the end
 * of the next one. What the Redis script picks from by its own clock.
 */
void calendar_bounds(const struct calendar_spec *c, int64_t now_us, int64_t b[4]);

#endif
