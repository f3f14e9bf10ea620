/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tzif.c: the TZif reader (lib/tzif.c) and calendar windows
 * (lib/calendar.c) against the system's zoneinfo. The expected offsets and
 * windows were computed with python3's zoneinfo (and agree with
 * `TZ=<zone> date -d @<t>`); a zone the system lacks is skipped, not passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/calendar.h"
#include "lib/tzif.h"
#include "tap.h"

#define US 1000000LL

static struct tzif_zone *zone(const char *name)
{
    char err[512];
    struct tzif_zone *z = NULL;
    if (tzif_load(NULL, name, &z, err, sizeof err) < 0)
        return NULL;
    return z;
}

static void test_offsets(void)
{
    static const struct {
        const char *zone;
        int64_t t;
        int32_t off;
    } cases[] = {
        {"Europe/Berlin", -2208988800LL, 3600},       /* 1900-01-01T00:00:00Z */
        {"Europe/Berlin", 0LL, 3600},                 /* 1970-01-01T00:00:00Z */
        {"Europe/Berlin", 1711846799LL, 3600},        /* 2024-03-31T00:59:59Z */
        {"Europe/Berlin", 1711846800LL, 7200},        /* 2024-03-31T01:00:00Z */
        {"Europe/Berlin", 1729990799LL, 7200},        /* 2024-10-27T00:59:59Z */
        {"Europe/Berlin", 1729990800LL, 3600},        /* 2024-10-27T01:00:00Z */
        {"Europe/Berlin", 2158963200LL, 7200},        /* 2038-06-01T00:00:00Z */
        {"Europe/Berlin", 4109878800LL, 7200},        /* 2100-03-28T01:00:00Z */
        {"Europe/Berlin", 4118126400LL, 7200},        /* 2100-07-01T12:00:00Z */
        {"America/New_York", -2208988800LL, -18000},  /* 1900-01-01T00:00:00Z */
        {"America/New_York", 1710053999LL, -18000},   /* 2024-03-10T06:59:59Z */
        {"America/New_York", 1710054000LL, -14400},   /* 2024-03-10T07:00:00Z */
        {"America/New_York", 1730613599LL, -14400},   /* 2024-11-03T05:59:59Z */
        {"America/New_York", 1730613600LL, -18000},   /* 2024-11-03T06:00:00Z */
        {"America/New_York", 4109878800LL, -14400},   /* 2100-03-28T01:00:00Z */
        {"America/New_York", 4118126400LL, -14400},   /* 2100-07-01T12:00:00Z */
        {"Asia/Kolkata", -2208988800LL, 19270},       /* 1900-01-01T00:00:00Z */
        {"Asia/Kolkata", 0LL, 19800},                 /* 1970-01-01T00:00:00Z */
        {"Asia/Kolkata", 2158963200LL, 19800},        /* 2038-06-01T00:00:00Z */
        {"Asia/Kolkata", 4118126400LL, 19800},        /* 2100-07-01T12:00:00Z */
        {"Australia/Lord_Howe", 0LL, 36000},          /* 1970-01-01T00:00:00Z */
        {"Australia/Lord_Howe", 1712415599LL, 39600}, /* 2024-04-06T14:59:59Z */
        {"Australia/Lord_Howe", 1712415600LL, 37800}, /* 2024-04-06T15:00:00Z */
        {"Australia/Lord_Howe", 1728142200LL, 39600}, /* 2024-10-05T15:30:00Z */
        {"Australia/Lord_Howe", 2158963200LL, 37800}, /* 2038-06-01T00:00:00Z */
        {"Australia/Lord_Howe", 4109878800LL, 39600}, /* 2100-03-28T01:00:00Z */
        {"Australia/Lord_Howe", 4118126400LL, 37800}, /* 2100-07-01T12:00:00Z */
        {"UTC", -2208988800LL, 0},                    /* 1900-01-01T00:00:00Z */
        {"UTC", 4109878800LL, 0},                     /* 2100-03-28T01:00:00Z */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tzif_zone *z = zone(cases[i].zone);
        if (z == NULL) {
            ok(1, "# SKIP %s is not installed", cases[i].zone);
            continue;
        }
        is_int(tzif_offset(z, cases[i].t), cases[i].off, "%s at %lld", cases[i].zone,
               (long long)cases[i].t);
        tzif_free(z);
    }
}

static void test_transitions(void)
{
    struct tzif_zone *b = zone("Europe/Berlin"), *ny = zone("America/New_York");
    struct tzif_zone *u = zone("UTC");
    if (!ok(b && ny && u, "Europe/Berlin, America/New_York and UTC are installed"))
        goto out;
    /* 2024-03-31T01:00Z and 2024-10-27T01:00Z: in the table. */
    is_int(tzif_next_transition(b, 1704067200), 1711846800, "Berlin's spring 2024");
    is_int(tzif_next_transition(b, 1711846800), 1729990800, "Berlin's autumn 2024");
    /* 2100: past the table, from the footer's rule (last Sunday of March). */
    is_int(tzif_next_transition(b, 4102444800LL), 4109878800LL, "Berlin's spring 2100 (footer)");
    is_int(tzif_next_transition(u, 0), INT64_MAX, "UTC never changes");
    /* New York, 2024-03-10 02:30 does not exist: the gap ends at 07:00Z. */
    is_int(tzif_first_instant(ny, tzif_days_from_civil(2024, 3, 10) * 86400 + 9000), 1710054000,
           "a wall time in the gap maps to the gap's end");
    /* 2024-11-03 01:30 happens twice: the first is 05:30Z (EDT). */
    is_int(tzif_first_instant(ny, tzif_days_from_civil(2024, 11, 3) * 86400 + 5400), 1730611800,
           "a repeated wall time maps to its first occurrence");
    is_int(tzif_first_instant(u, 86400), 86400, "UTC's wall time is the instant");
out:
    tzif_free(b);
    tzif_free(ny);
    tzif_free(u);
}

static void test_windows(void)
{
    static const struct {
        const char *zone;
        enum calendar_unit unit;
        int anchor, week_start;
        int64_t now, start, end;
    } cases[] = {
        {"Europe/Berlin", CALENDAR_DAY, 1, 0, 1711886400LL, 1711839600LL,
         1711922400LL}, /* 2024-03-31T12:00:00Z: 82800s */
        {"Europe/Berlin", CALENDAR_DAY, 1, 0, 1730030400LL, 1729980000LL,
         1730070000LL}, /* 2024-10-27T12:00:00Z: 90000s */
        {"America/New_York", CALENDAR_DAY, 1, 0, 1710072000LL, 1710046800LL,
         1710129600LL}, /* 2024-03-10T12:00:00Z: 82800s */
        {"America/New_York", CALENDAR_DAY, 1, 0, 1730635200LL, 1730606400LL,
         1730696400LL}, /* 2024-11-03T12:00:00Z: 90000s */
        {"Asia/Kolkata", CALENDAR_DAY, 1, 0, 1714588199LL, 1714501800LL,
         1714588200LL}, /* 2024-05-01T18:29:59Z: 86400s */
        {"Asia/Kolkata", CALENDAR_DAY, 1, 0, 1714588200LL, 1714588200LL,
         1714674600LL}, /* 2024-05-01T18:30:00Z: 86400s */
        {"Australia/Lord_Howe", CALENDAR_DAY, 1, 0, 1712448000LL, 1712408400LL,
         1712496600LL}, /* 2024-04-07T00:00:00Z: 88200s */
        {"Australia/Lord_Howe", CALENDAR_DAY, 1, 0, 1728172800LL, 1728135000LL,
         1728219600LL}, /* 2024-10-06T00:00:00Z: 84600s */
        {"UTC", CALENDAR_DAY, 1, 0, 1709251199LL, 1709164800LL,
         1709251200LL}, /* 2024-02-29T23:59:59Z: 86400s */
        {"Europe/Berlin", CALENDAR_WEEK, 1, 0, 1730030400LL, 1729461600LL,
         1730070000LL}, /* 2024-10-27T12:00:00Z: 608400s */
        {"Europe/Berlin", CALENDAR_WEEK, 1, 6, 1730030400LL, 1729980000LL,
         1730588400LL}, /* 2024-10-27T12:00:00Z: 608400s */
        {"America/New_York", CALENDAR_WEEK, 1, 6, 1710039600LL, 1709442000LL,
         1710046800LL}, /* 2024-03-10T03:00:00Z: 604800s */
        {"Europe/Berlin", CALENDAR_MONTH, 1, 0, 1707955200LL, 1706742000LL,
         1709247600LL}, /* 2024-02-15T00:00:00Z: 2505600s */
        {"Europe/Berlin", CALENDAR_MONTH, 1, 0, 1710460800LL, 1709247600LL,
         1711922400LL}, /* 2024-03-15T00:00:00Z: 2674800s */
        {"Europe/Berlin", CALENDAR_MONTH, 1, 0, 1728950400LL, 1727733600LL,
         1730415600LL}, /* 2024-10-15T00:00:00Z: 2682000s */
        {"America/New_York", CALENDAR_MONTH, 1, 0, 1731628800LL, 1730433600LL,
         1733029200LL}, /* 2024-11-15T00:00:00Z: 2595600s */
        {"UTC", CALENDAR_MONTH, 31, 0, 1707523200LL, 1706659200LL,
         1709164800LL}, /* 2024-02-10T00:00:00Z: 2505600s */
        {"UTC", CALENDAR_MONTH, 31, 0, 1709251200LL, 1709164800LL,
         1711843200LL}, /* 2024-03-01T00:00:00Z: 2678400s */
        {"UTC", CALENDAR_MONTH, 31, 0, 1677628800LL, 1677542400LL,
         1680220800LL}, /* 2023-03-01T00:00:00Z: 2678400s */
        {"UTC", CALENDAR_MONTH, 31, 0, 1714478400LL, 1714435200LL,
         1717113600LL}, /* 2024-04-30T12:00:00Z: 2678400s */
        {"UTC", CALENDAR_MONTH, 31, 0, 1717070400LL, 1714435200LL,
         1717113600LL}, /* 2024-05-30T12:00:00Z: 2678400s */
        {"Europe/Berlin", CALENDAR_MONTH, 15, 0, 1710459000LL, 1710457200LL,
         1713132000LL}, /* 2024-03-14T23:30:00Z: 2674800s */
        {"Asia/Kolkata", CALENDAR_MONTH, 30, 0, 1709231400LL, 1709145000LL,
         1711737000LL}, /* 2024-02-29T18:30:00Z: 2592000s */
        {"America/New_York", CALENDAR_YEAR, 1, 0, 1735707599LL, 1704085200LL,
         1735707600LL}, /* 2025-01-01T04:59:59Z: 31622400s */
        {"America/New_York", CALENDAR_YEAR, 1, 0, 1735707600LL, 1735707600LL,
         1767243600LL}, /* 2025-01-01T05:00:00Z: 31536000s */
        {"Asia/Kolkata", CALENDAR_YEAR, 1, 0, 1735669800LL, 1735669800LL,
         1767205800LL}, /* 2024-12-31T18:30:00Z: 31536000s */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tzif_zone *z = zone(cases[i].zone);
        if (z == NULL) {
            ok(1, "# SKIP %s is not installed", cases[i].zone);
            continue;
        }
        struct calendar_spec c = {cases[i].unit, z, cases[i].anchor, cases[i].week_start};
        int64_t s, e, b[4];
        calendar_window(&c, cases[i].now * US, &s, &e);
        ok(s == cases[i].start * US && e == cases[i].end * US,
           "%s %s (anchor %d, week_start %d) at %lld: [%lld, %lld), want [%lld, %lld)",
           cases[i].zone, calendar_unit_names[cases[i].unit - 1], cases[i].anchor,
           cases[i].week_start, (long long)cases[i].now, (long long)(s / US), (long long)(e / US),
           (long long)cases[i].start, (long long)cases[i].end);
        /* The neighbours: the window before ends at start, the next starts
         * at end. */
        calendar_bounds(&c, cases[i].now * US, b);
        int64_t ps, pe, ns, ne;
        calendar_window(&c, s - 1, &ps, &pe);
        calendar_window(&c, e, &ns, &ne);
        ok(b[1] == s && b[2] == e && b[0] == ps && pe == s && ns == e && b[3] == ne,
           "bounds around %lld", (long long)cases[i].now);
        tzif_free(z);
    }
}

/* A version 1 file built by hand: two types, one transition, no footer. */
static void test_parse(void)
{
    unsigned char f[44 + 4 + 1 + 12 + 8];
    char err[256];
    struct tzif_zone *z = NULL;
    memset(f, 0, sizeof f);
    memcpy(f, "TZif", 4);
    f[35] = 1; /* timecnt */
    f[39] = 2; /* typecnt */
    f[43] = 8; /* charcnt */
    unsigned char *p = f + 44;
    p[0] = 0, p[1] = 0, p[2] = 0x0e, p[3] = 0x10; /* transition at 3600 */
    p[4] = 1;                                     /* to type 1 */
    p[5 + 3] = 0;                                 /* type 0: +0 */
    p[11 + 2] = 0x0e, p[11 + 3] = 0x10;           /* type 1: +3600 */
    int rc = tzif_parse(f, sizeof f, "Test/V1", &z, err, sizeof err);
    ok(rc == 0, "a version 1 file: %s", rc == 0 ? "parsed" : err);
    if (z != NULL) {
        is_int(tzif_offset(z, 3599), 0, "before its transition");
        is_int(tzif_offset(z, 3600), 3600, "after it, forever (no footer)");
        is_str(tzif_name(z), "Test/V1", "its name");
    }
    tzif_free(z);
    ok(tzif_parse(f, 50, "x", &z, err, sizeof err) < 0 && strstr(err, "truncated"),
       "a truncated file: %s", err);
    f[0] = 'X';
    ok(tzif_parse(f, sizeof f, "x", &z, err, sizeof err) < 0 && strstr(err, "TZif"), "not TZif: %s",
       err);
    ok(tzif_load(NULL, "Mars/Olympus_Mons", &z, err, sizeof err) < 0 &&
           strstr(err, "unknown time zone \"Mars/Olympus_Mons\""),
       "an unknown zone: %s", err);
    ok(tzif_load(NULL, "../etc/passwd", &z, err, sizeof err) < 0 && z == NULL,
       "a path that leaves the directory: %s", err);
    ok(!tzif_name_valid("/etc/localtime") && !tzif_name_valid("a/../b") && !tzif_name_valid("") &&
           tzif_name_valid("America/Argentina/Buenos_Aires") && tzif_name_valid("Etc/GMT+5"),
       "zone names");
}

/* A version 2 file with no transitions, one time type of offset off and
 * footer tz: what the footer's rule alone decides. *len set. */
static unsigned char *v2_file(int32_t off, const char *tz, size_t *len)
{
    size_t v1 = 44 + 6 + 1, v2 = 44 + 6 + 4, n = v1 + v2 + strlen(tz) + 2;
    unsigned char *f = calloc(1, n);
    for (int k = 0; k < 2; k++) {
        unsigned char *h = f + (k ? v1 : 0);
        memcpy(h, "TZif2", 5);
        h[39] = 1;         /* typecnt */
        h[43] = k ? 4 : 1; /* charcnt */
        h[44] = (unsigned char)((uint32_t)off >> 24), h[45] = (unsigned char)((uint32_t)off >> 16);
        h[46] = (unsigned char)((uint32_t)off >> 8), h[47] = (unsigned char)off;
    }
    f[v1 + v2] = '\n';
    memcpy(f + v1 + v2 + 1, tz, strlen(tz));
    f[n - 1] = '\n';
    *len = n;
    return f;
}

/* Footers' POSIX TZ strings: J rules (February 29 never counted), rule
 * times below zero (version 3), quoted names, no DST; bad ones refused. */
static void test_footer(void)
{
    static const struct {
        const char *tz;
        int32_t off;
        int64_t t;
        int32_t want;
    } cases[] = {
        /* Tehran until 2022: J79/24 = March 21 00:00 +0330 = March 20 20:30Z,
         * J263/24 = September 21 00:00 +0430 = September 20 19:30Z. */
        {"<+0330>-3:30<+0430>,J79/24,J263/24", 12600, 1616272199, 12600}, /* 2021-03-20 20:29:59Z */
        {"<+0330>-3:30<+0430>,J79/24,J263/24", 12600, 1616272200, 16200},
        {"<+0330>-3:30<+0430>,J79/24,J263/24", 12600, 1710966600, 16200}, /* 2024 (leap) */
        {"<+0330>-3:30<+0430>,J79/24,J263/24", 12600, 1632166199, 16200}, /* 2021-09-20 19:29:59Z */
        {"<+0330>-3:30<+0430>,J79/24,J263/24", 12600, 1632166200, 12600},
        /* Nuuk: M3.5.0/-1 (Saturday 23:00 -02 = Sunday 01:00Z), M10.5.0/0. */
        {"<-02>2<-01>,M3.5.0/-1,M10.5.0/0", -7200, 1711846799, -7200}, /* 2024-03-31 00:59:59Z */
        {"<-02>2<-01>,M3.5.0/-1,M10.5.0/0", -7200, 1711846800, -3600},
        {"<-02>2<-01>,M3.5.0/-1,M10.5.0/0", -7200, 1729990799, -3600}, /* 2024-10-27 00:59:59Z */
        {"<-02>2<-01>,M3.5.0/-1,M10.5.0/0", -7200, 1729990800, -7200},
        {"IST-5:30", 19800, 1700000000, 19800},
        {"EST5EDT,M3.2.0,M11.1.0", -18000, 1710054000, -14400}, /* 2024-03-10 07:00Z */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        char err[256];
        struct tzif_zone *z = NULL;
        unsigned char *f = v2_file(cases[i].off, cases[i].tz, &len);
        if (ok(tzif_parse(f, len, "Test/Footer", &z, err, sizeof err) == 0, "footer \"%s\" parses",
               cases[i].tz))
            is_int(tzif_offset(z, cases[i].t), cases[i].want, "\"%s\" at %lld", cases[i].tz,
                   (long long)cases[i].t);
        tzif_free(z);
        free(f);
    }
    static const char *const bad[] = {"XY5",
                                      "EST",
                                      "EST5EDT,M13.1.0,M11.1.0",
                                      "EST5EDT,M3.2.0",
                                      "<+03",
                                      "EST5EDT,J0,J365",
                                      "EST5EDT,M3.2.0/200,M11.1.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len;
        char err[256];
        struct tzif_zone *z = NULL;
        unsigned char *f = v2_file(0, bad[i], &len);
        ok(tzif_parse(f, len, "Test/Bad", &z, err, sizeof err) < 0 && z == NULL &&
               strstr(err, "POSIX TZ"),
           "footer \"%s\" refused: %s", bad[i], err);
        free(f);
    }
}

static void test_dates(void)
{
    for (int64_t d = -800000; d <= 800000; d += 997) {
        int64_t y;
        int m, dd;
        tzif_civil_from_days(d, &y, &m, &dd);
        if (tzif_days_from_civil(y, m, dd) != d) {
            ok(0, "day %lld round trip", (long long)d);
            return;
        }
    }
    ok(1, "days and dates round-trip over +-2190 years");
    is_int(tzif_days_from_civil(2000, 3, 1), 11017, "2000-03-01");
    is_int(tzif_days_in_month(2100, 2), 28, "2100 is no leap year");
    is_int(tzif_days_in_month(2000, 2), 29, "2000 is");
}

int main(void)
{
    test_offsets();
    test_transitions();
    test_windows();
    test_parse();
    test_footer();
    test_dates();
    return tap_done();
}
