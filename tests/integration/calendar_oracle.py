# SPDX-License-Identifier: Apache-2.0
"""calendar_oracle.py: calendar windows as python3's zoneinfo computes
them, written from the rules in docs/algorithms.md and independent of
src/lib/tzif.c and src/lib/calendar.c: the oracle of test_calendar.py and
test_local_diff.py."""

import calendar
import datetime as dt
import zoneinfo

WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]


def window(unit, zone, anchor, week_start, t):
    """[start, end) in seconds of the window of `unit` ("day", "week",
    "month", "year") in `zone` that holds instant t (seconds); anchor is the
    month's anchor day (0: the 1st), week_start a weekday name (None:
    monday)."""
    zi = zoneinfo.ZoneInfo(zone)
    loc = dt.datetime.fromtimestamp(t, dt.timezone.utc).astimezone(zi).date()
    anchor = anchor or 1

    def at(y, m):
        y, m = y + (m - 1) // 12, (m - 1) % 12 + 1
        return dt.date(y, m, min(anchor, calendar.monthrange(y, m)[1]))
    if unit == "day":
        a, b = loc, loc + dt.timedelta(1)
    elif unit == "week":
        a = loc - dt.timedelta((loc.weekday() - WEEKDAYS.index(week_start or "monday")) % 7)
        b = a + dt.timedelta(7)
    elif unit == "month":
        here = at(loc.year, loc.month)
        a, b = (here, at(loc.year, loc.month + 1)) if loc >= here else \
            (at(loc.year, loc.month - 1), here)
    else:
        a, b = dt.date(loc.year, 1, 1), dt.date(loc.year + 1, 1, 1)

    def first(d):
        # Local midnight; none of the zones tested skips or repeats it.
        return int(dt.datetime(d.year, d.month, d.day, tzinfo=zi).timestamp())
    return first(a), first(b)
