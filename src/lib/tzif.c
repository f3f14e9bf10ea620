/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tzif.c: TZif files (RFC 8536, versions 1 to 3) and the POSIX TZ strings
 * of their footers, read into an immutable zone; the offset at an instant,
 * the next transition, the first instant of a wall-clock time; proleptic
 * Gregorian date arithmetic.
 *
 * Owns: the parse (every count and index checked against the bytes there
 * are), the zone's memory, the footer's rule. Does not own: calendar
 * windows (calendar.c), which zone a tier uses (the config), clocks. No
 * global state: the TZ environment variable, tzset() and localtime_r() are
 * never used, so a process holds any number of zones.
 */
#include "lib/tzif.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TZIF_FILE_MAX (1 << 20) /* the largest zone file is a few KiB */
#define HEADER_LEN 44
#define RULE_DEFAULT_TIME 7200 /* 02:00, POSIX's default time of a rule */

/* A date rule of a POSIX TZ string: Jn (1-365, no Feb 29), n (0-365), or
 * Mm.w.d (month, week 1-5 where 5 is the last, weekday 0 = Sunday). */
struct rule_date {
    char kind; /* 'J', 'N' or 'M' */
    int n, m, w, d;
    int32_t time; /* seconds after local midnight; may be < 0 or > 24h (v3) */
};

/* The footer's TZ string: std offset, and if it has DST, dst offset and the
 * two rules. Offsets here are seconds east of UTC (POSIX writes west). */
struct posix_tz {
    int present, has_dst;
    int32_t std_off, dst_off;
    struct rule_date start, end;
};

struct tzif_zone {
    char name[TZIF_NAME_MAX + 1];
    size_t ntrans;
    int64_t *trans;  /* ascending */
    int32_t *offset; /* the offset from trans[i] on */
    int32_t first;   /* before the first transition: time type 0 */
    struct posix_tz tz;
};

/* ------------------------------------------------------------ dates */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* H. Hinnant's days_from_civil, in int64. */
int64_t tzif_days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

void tzif_civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = floor_div(z, 146097);
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int tzif_days_in_month(int64_t y, int m)
{
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : dim[(m - 1) % 12];
}

/* ------------------------------------------------------------ names */

int tzif_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > TZIF_NAME_MAX || name[0] == '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '+' || c == '-' || c == '.' || c == '/'))
            return 0;
        /* A component of "." or ".." (at the start or after a '/'). */
        if ((i == 0 || name[i - 1] == '/') && c == '.' &&
            (name[i + 1] == '/' || name[i + 1] == '\0' ||
             (name[i + 1] == '.' && (name[i + 2] == '/' || name[i + 2] == '\0'))))
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------ POSIX TZ strings */

/* A zone abbreviation: <...> or 3+ letters. Returns the rest or NULL. */
static const char *tz_name(const char *s)
{
    const char *p = s;
    if (*p == '<') {
        while (*p && *p != '>')
            p++;
        return *p == '>' && p - s >= 4 ? p + 1 : NULL;
    }
    while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
        p++;
    return p - s >= 3 ? p : NULL;
}

/* ":NN" with NN in 00-59 at s into *out (else *out stays 0): the rest, or
 * NULL if a ':' is not followed by two such digits. */
static const char *tz_sixty(const char *s, int *out)
{
    if (*s != ':')
        return s;
    if (!(s[1] >= '0' && s[1] <= '5' && s[2] >= '0' && s[2] <= '9'))
        return NULL;
    *out = (s[1] - '0') * 10 + (s[2] - '0');
    return s + 3;
}

/* [+-]h[h[h]][:mm[:ss]] with hours up to max_h, into seconds. */
static const char *tz_time(const char *s, int max_h, int32_t *out)
{
    int sign = 1, h = 0, mm = 0, ss = 0, digits = 0;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    while (*s >= '0' && *s <= '9' && digits < 3)
        h = h * 10 + (*s++ - '0'), digits++;
    if (digits == 0 || h > max_h)
        return NULL;
    int colon = *s == ':';
    if ((s = tz_sixty(s, &mm)) == NULL || (colon && (s = tz_sixty(s, &ss)) == NULL))
        return NULL;
    *out = sign * (h * 3600 + mm * 60 + ss);
    return s;
}

static const char *tz_num(const char *s, int lo, int hi, int *out)
{
    int v = 0, digits = 0;
    while (*s >= '0' && *s <= '9' && digits < 3)
        v = v * 10 + (*s++ - '0'), digits++;
    if (digits == 0 || v < lo || v > hi)
        return NULL;
    *out = v;
    return s;
}

static const char *tz_rule(const char *s, struct rule_date *r)
{
    memset(r, 0, sizeof *r);
    if (*s == 'J') {
        r->kind = 'J';
        s = tz_num(s + 1, 1, 365, &r->n);
    } else if (*s == 'M') {
        r->kind = 'M';
        s = tz_num(s + 1, 1, 12, &r->m);
        if (s && *s == '.')
            s = tz_num(s + 1, 1, 5, &r->w);
        else
            s = NULL;
        if (s && *s == '.')
            s = tz_num(s + 1, 0, 6, &r->d);
        else
            s = NULL;
    } else {
        r->kind = 'N';
        s = tz_num(s, 0, 365, &r->n);
    }
    if (s == NULL)
        return NULL;
    r->time = RULE_DEFAULT_TIME;
    if (*s == '/')
        s = tz_time(s + 1, 167, &r->time); /* RFC 8536 v3: -167 to 167 hours */
    return s;
}

/* Parses a footer's TZ string (without its newlines); empty: no rule. */
static int tz_parse(const char *s, struct posix_tz *tz)
{
    int32_t west;
    memset(tz, 0, sizeof *tz);
    if (*s == '\0')
        return 0;
    if ((s = tz_name(s)) == NULL || (s = tz_time(s, 24, &west)) == NULL)
        return -1;
    tz->present = 1;
    tz->std_off = -west;
    if (*s == '\0')
        return 0;
    if ((s = tz_name(s)) == NULL)
        return -1;
    tz->has_dst = 1;
    tz->dst_off = tz->std_off + 3600;
    if (*s != ',' && *s != '\0') {
        if ((s = tz_time(s, 24, &west)) == NULL)
            return -1;
        tz->dst_off = -west;
    }
    if (*s == '\0') /* no rule: POSIX leaves it to the system; glibc's US rule */
        s = ",M3.2.0,M11.1.0";
    if (*s++ != ',' || (s = tz_rule(s, &tz->start)) == NULL || *s++ != ',' ||
        (s = tz_rule(s, &tz->end)) == NULL || *s != '\0')
        return -1;
    return 0;
}

/* The wall-clock seconds (since 1970-01-01 00:00 local) at which rule r
 * falls in year y. */
static int64_t rule_local(const struct rule_date *r, int64_t y)
{
    int64_t day;
    if (r->kind == 'J') {
        day = tzif_days_from_civil(y, 1, 1) + r->n - 1;
        if (is_leap(y) && r->n >= 60)
            day++; /* Jn never counts February 29 */
    } else if (r->kind == 'N') {
        day = tzif_days_from_civil(y, 1, 1) + r->n;
    } else {
        int64_t first = tzif_days_from_civil(y, r->m, 1);
        int wd = (int)((first % 7 + 7 + 4) % 7); /* 1970-01-01 was a Thursday (4) */
        day = first + (r->d - wd + 7) % 7 + 7 * (r->w - 1);
        int64_t last = first + tzif_days_in_month(y, r->m) - 1;
        while (day > last)
            day -= 7;
    }
    return day * 86400 + r->time;
}

/* The UTC instants DST starts and ends in year y (the start's rule time is
 * standard time, the end's is daylight time). */
static void rule_year(const struct posix_tz *tz, int64_t y, int64_t *start, int64_t *end)
{
    *start = rule_local(&tz->start, y) - tz->std_off;
    *end = rule_local(&tz->end, y) - tz->dst_off;
}

static int64_t year_of(int64_t t)
{
    int64_t y;
    int m, d;
    tzif_civil_from_days(floor_div(t, 86400), &y, &m, &d);
    return y;
}

static int32_t rule_offset(const struct posix_tz *tz, int64_t t)
{
    if (!tz->has_dst)
        return tz->std_off;
    int64_t s, e, y = year_of(t + tz->std_off);
    rule_year(tz, y, &s, &e);
    int dst = s < e ? (t >= s && t < e) : !(t >= e && t < s);
    return dst ? tz->dst_off : tz->std_off;
}

static int64_t rule_next(const struct posix_tz *tz, int64_t t)
{
    int64_t best = INT64_MAX, y = year_of(t);
    if (!tz->has_dst)
        return best;
    for (int64_t k = y - 1; k <= y + 1; k++) {
        int64_t s, e;
        rule_year(tz, k, &s, &e);
        if (s > t && s < best)
            best = s;
        if (e > t && e < best)
            best = e;
    }
    return best;
}

/* ------------------------------------------------------------ TZif */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

struct counts {
    uint32_t isut, isstd, leap, time, type, chars;
};

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), -1)

/* The header at p (len bytes from there): its counts and the data block's
 * size for times of tsize bytes. */
static int read_header(const unsigned char *p, size_t len, int tsize, struct counts *c,
                       size_t *block, char *err, size_t errlen)
{
    if (len < HEADER_LEN || memcmp(p, "TZif", 4) != 0)
        return FAIL("not a TZif file (no \"TZif\" header)");
    c->isut = be32(p + 20);
    c->isstd = be32(p + 24);
    c->leap = be32(p + 28);
    c->time = be32(p + 32);
    c->type = be32(p + 36);
    c->chars = be32(p + 40);
    if (c->type == 0 || c->type > 256 || c->chars == 0 || (c->isut && c->isut != c->type) ||
        (c->isstd && c->isstd != c->type) || c->time > TZIF_FILE_MAX || c->leap > TZIF_FILE_MAX ||
        c->chars > TZIF_FILE_MAX)
        return FAIL("a TZif header with impossible counts");
    *block = (size_t)c->time * (size_t)(tsize + 1) + (size_t)c->type * 6 + c->chars +
             (size_t)c->leap * (size_t)(tsize + 4) + c->isstd + c->isut;
    if (len - HEADER_LEN < *block)
        return FAIL("a truncated TZif file");
    return 0;
}

/* A version 2+ file's footer, from f to end: "\n" TZ-string "\n", the
 * rule after the last transition, into z->tz. */
static int read_footer(const unsigned char *f, const unsigned char *end, struct tzif_zone *z,
                       char *err, size_t errlen)
{
    char tzs[128];
    size_t n = 0;
    if (f >= end || *f != '\n')
        return FAIL("a TZif file without its footer");
    for (f++; f < end && *f != '\n' && n + 1 < sizeof tzs; f++)
        tzs[n++] = (char)*f;
    tzs[n] = '\0';
    if (f >= end || *f != '\n' || tz_parse(tzs, &z->tz) < 0)
        return FAIL("a TZif footer that is not a valid POSIX TZ string: \"%s\"", tzs);
    return 0;
}

int tzif_parse(const unsigned char *data, size_t len, const char *name, struct tzif_zone **out,
               char *err, size_t errlen)
{
    struct counts c;
    size_t block;
    int tsize = 4;

    *out = NULL;
    if (read_header(data, len, 4, &c, &block, err, errlen) < 0)
        return -1;
    const unsigned char *p = data + HEADER_LEN, *end = data + len;
    int version = data[4] == 0 ? 1 : data[4] - '0';
    if (version < 1 || version > 9)
        return FAIL("an unknown TZif version byte 0x%02x", data[4]);
    if (version >= 2) {
        p += block;
        if (read_header(p, (size_t)(end - p), 8, &c, &block, err, errlen) < 0)
            return -1;
        p += HEADER_LEN;
        tsize = 8;
    }
    if (c.leap != 0)
        return FAIL("the zone counts leap seconds (a \"right/\" zone); use its POSIX zone");

    const unsigned char *times = p, *idx = p + (size_t)c.time * tsize;
    const unsigned char *types = idx + c.time;
    struct tzif_zone *z = xcalloc(1, sizeof *z);
    snprintf(z->name, sizeof z->name, "%s", name);
    z->ntrans = c.time;
    z->trans = xcalloc(c.time ? c.time : 1, sizeof *z->trans);
    z->offset = xcalloc(c.time ? c.time : 1, sizeof *z->offset);
    for (uint32_t i = 0; i < c.type; i++) {
        int32_t off = (int32_t)be32(types + 6 * i);
        /* RFC 8536: -2^31 is invalid; offsets stay within about a day. */
        if (off < -25 * 3600 || off > 26 * 3600 || types[6 * i + 4] > 1) {
            tzif_free(z);
            return FAIL("a TZif time type with an impossible offset %ld", (long)off);
        }
    }
    z->first = (int32_t)be32(types);
    for (uint32_t i = 0; i < c.time; i++) {
        z->trans[i] = tsize == 8 ? be64(times + 8 * i) : (int32_t)be32(times + 4 * i);
        if (idx[i] >= c.type || (i > 0 && z->trans[i] <= z->trans[i - 1])) {
            tzif_free(z);
            return FAIL("a TZif transition out of order or of an unknown type");
        }
        z->offset[i] = (int32_t)be32(types + 6 * idx[i]);
    }
    if (version >= 2 && read_footer(p + block, end, z, err, errlen) < 0) {
        tzif_free(z);
        return -1;
    }
    *out = z;
    return 0;
}

int tzif_load(const char *dir, const char *name, struct tzif_zone **out, char *err, size_t errlen)
{
    char path[4096];
    *out = NULL;
    if (!tzif_name_valid(name))
        return FAIL("\"%s\" is not a time zone name (such as Europe/Berlin)", name);
    if (dir == NULL)
        dir = getenv("TZDIR");
    if (dir == NULL || *dir == '\0')
        dir = TZIF_DEFAULT_DIR;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return FAIL("the path of time zone \"%s\" is too long", name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return FAIL("unknown time zone \"%s\" (%s: %s)", name, path, strerror(errno));
    unsigned char *buf = xmalloc(TZIF_FILE_MAX);
    size_t n = fread(buf, 1, TZIF_FILE_MAX, f);
    int bad = ferror(f);
    fclose(f);
    int rc;
    if (bad)
        rc = FAIL("time zone \"%s\": cannot read %s", name, path);
    else if (n == TZIF_FILE_MAX)
        rc = FAIL("time zone \"%s\": %s is too large for a TZif file", name, path);
    else if ((rc = tzif_parse(buf, n, name, out, err, errlen)) < 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "time zone \"%s\" (%s): %s", name, path, why);
    }
    free(buf);
    return rc;
}

struct tzif_zone *tzif_new_utc(void)
{
    struct tzif_zone *z = xcalloc(1, sizeof *z);
    snprintf(z->name, sizeof z->name, "UTC");
    z->trans = xcalloc(1, sizeof *z->trans);
    z->offset = xcalloc(1, sizeof *z->offset);
    z->tz.present = 1; /* std_off 0, no DST */
    return z;
}

void tzif_free(struct tzif_zone *z)
{
    if (z == NULL)
        return;
    free(z->trans);
    free(z->offset);
    free(z);
}

const char *tzif_name(const struct tzif_zone *z)
{
    return z->name;
}

/* The index of the last transition <= t, or -1. */
static long last_at_or_before(const struct tzif_zone *z, int64_t t)
{
    size_t lo = 0, hi = z->ntrans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

int32_t tzif_offset(const struct tzif_zone *z, int64_t t)
{
    long i = last_at_or_before(z, t);
    /* Past the last transition the footer's rule speaks, if there is one. */
    if (z->tz.present && (z->ntrans == 0 || i == (long)z->ntrans - 1))
        return rule_offset(&z->tz, t);
    return i < 0 ? z->first : z->offset[i];
}

int64_t tzif_next_transition(const struct tzif_zone *z, int64_t t)
{
    long i = last_at_or_before(z, t);
    if (i + 1 < (long)z->ntrans)
        return z->trans[i + 1];
    return z->tz.present ? rule_next(&z->tz, t) : INT64_MAX;
}

/* Offsets stay within (-26h, 26h), so the answer is within this of local. */
#define SPAN (26 * 3600)

int64_t tzif_first_instant(const struct tzif_zone *z, int64_t local)
{
    /* u + offset(u) >= local needs u >= local - SPAN, and u = local + SPAN
     * always has it. Between transitions the offset is constant, so each
     * stretch either contains the answer at max(its start, local - offset)
     * or none. A stretch ends at a transition, so a day's span holds few. */
    int64_t s = local - SPAN, stop = local + SPAN;
    for (int i = 0; i < 64 && s < stop; i++) {
        int32_t off = tzif_offset(z, s);
        int64_t next = tzif_next_transition(z, s);
        int64_t end = next < stop ? next : stop;
        int64_t u = local - off > s ? local - off : s;
        if (u < end)
            return u;
        s = end;
    }
    return local - tzif_offset(z, local);
}
