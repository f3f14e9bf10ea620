/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.c: range-checked number and duration parsing, clocks, and allocation
 * that never returns NULL.
 *
 * Owns no state. Parsers are strict on purpose: a policy file that says
 * "limit: 1O0" or "window: 1.5s" is a mistake to report, not a value to
 * guess, so everything that is not exactly the documented form is an error.
 * Messages never echo the input (the caller knows it and where it came from).
 */
#include "lib/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UNIT_HINT "ms, s, m, h or d"

/* The duration units, largest first so that formatting picks the largest
 * unit that divides a value exactly. */
static const struct {
    const char *name;
    int64_t us;
} units[] = {
    {"d", 86400LL * 1000000},
    {"h", 3600LL * 1000000},
    {"m", 60LL * 1000000},
    {"s", 1000000},
    {"ms", 1000},
};

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Reads the run of decimal digits at *p into *out, advancing *p past them.
 * Fails on no digits, on a leading zero (YAML 1.1 would read "010" as octal,
 * so it is ambiguous to a reader) and on anything above limit.
 */
static int read_digits(const char **p, uint64_t limit, uint64_t *out, char *err, size_t errlen,
                       const char *toobig)
{
    const char *s = *p;
    uint64_t v = 0;

    if (!is_digit(*s)) {
        snprintf(err, errlen, "not a decimal integer");
        return -1;
    }
    if (s[0] == '0' && is_digit(s[1])) {
        snprintf(err, errlen, "leading zeros are not allowed");
        return -1;
    }
    for (; is_digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (limit - d) / 10) {
            snprintf(err, errlen, "%s", toobig);
            return -1;
        }
        v = v * 10 + d;
    }
    *p = s;
    *out = v;
    return 0;
}

int util_parse_int64(const char *s, int64_t min, int64_t max, int64_t *out, char *err,
                     size_t errlen)
{
    char range[96];
    const char *p = s;
    int negative = 0;
    uint64_t mag;
    int64_t v;

    if (min == INT64_MIN && max == INT64_MAX)
        snprintf(range, sizeof range, "does not fit in 64 bits");
    else
        snprintf(range, sizeof range, "must be between %" PRId64 " and %" PRId64, min, max);
    if (s == NULL || *s == '\0') {
        snprintf(err, errlen, "empty; expected an integer");
        return -1;
    }
    if (*p == '-') {
        negative = 1;
        p++;
    }
    /* The magnitude of INT64_MIN is one more than INT64_MAX. */
    if (read_digits(&p, negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &mag, err, errlen,
                    range) < 0)
        return -1;
    if (*p != '\0') {
        snprintf(err, errlen, "not a decimal integer");
        return -1;
    }
    if (negative)
        v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    else
        v = (int64_t)mag;
    /* "no sign unless min < 0": a minus sign is refused even on "-0". */
    if (v < min || v > max || (negative && min >= 0)) {
        snprintf(err, errlen, "%s", range);
        return -1;
    }
    *out = v;
    return 0;
}

int util_parse_duration(const char *s, int64_t max_us, int64_t *out_us, char *err, size_t errlen)
{
    char maxbuf[UTIL_DURATION_BUF], toolong[64];
    const char *p = s;
    uint64_t n;
    size_t i;

    util_format_duration(max_us, maxbuf, sizeof maxbuf);
    snprintf(toolong, sizeof toolong, "too long (at most %s)", maxbuf);
    if (s == NULL || *s == '\0') {
        snprintf(err, errlen, "empty; expected a duration such as 50ms or 1s");
        return -1;
    }
    if (*s == '-') {
        snprintf(err, errlen, "must be greater than zero");
        return -1;
    }
    if (!is_digit(*s)) {
        snprintf(err, errlen, "expected <integer><unit> with unit " UNIT_HINT);
        return -1;
    }
    if (read_digits(&p, INT64_MAX, &n, err, errlen, toolong) < 0)
        return -1;
    if (*p == '.') {
        snprintf(err, errlen, "fractions are not allowed; use a smaller unit (1500ms, not 1.5s)");
        return -1;
    }
    if (*p == '\0') {
        snprintf(err, errlen, "missing unit (" UNIT_HINT ")");
        return -1;
    }
    for (i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(p, units[i].name) == 0)
            break;
    if (i == sizeof units / sizeof units[0]) {
        snprintf(err, errlen, "unknown unit (use " UNIT_HINT ")");
        return -1;
    }
    if (n == 0) {
        snprintf(err, errlen, "must be greater than zero");
        return -1;
    }
    if (max_us <= 0 || n > (uint64_t)max_us / (uint64_t)units[i].us) {
        snprintf(err, errlen, "%s", toolong);
        return -1;
    }
    *out_us = (int64_t)n * units[i].us;
    return 0;
}

const char *util_format_duration(int64_t us, char *buf, size_t buflen)
{
    size_t i;

    for (i = 0; us != 0 && i < sizeof units / sizeof units[0]; i++) {
        if (us % units[i].us == 0) {
            snprintf(buf, buflen, "%" PRId64 "%s", us / units[i].us, units[i].name);
            return buf;
        }
    }
    snprintf(buf, buflen, "%" PRId64 "us", us);
    return buf;
}

/* Reading a clock the kernel supports cannot fail; if it does, the host is
 * broken, and carrying on with a made-up time would be worse than stopping. */
static int64_t clock_us(clockid_t id)
{
    struct timespec ts;

    if (clock_gettime(id, &ts) != 0) {
        perror("clock_gettime");
        abort();
    }
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t util_monotonic_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

int64_t util_realtime_us(void)
{
    return clock_us(CLOCK_REALTIME);
}

const char *util_format_rfc3339(int64_t us, char *buf)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(buf, UTIL_RFC3339_BUF, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        strcpy(buf, "1970-01-01T00:00:00Z");
    return buf;
}

/* Two digits per division: the answers' and the calls' numbers are
 * mostly of 10 to 16 digits (microseconds since the epoch, limits). */
static const char digit_pairs[] = "00010203040506070809"
                                  "10111213141516171819"
                                  "20212223242526272829"
                                  "30313233343536373839"
                                  "40414243444546474849"
                                  "50515253545556575859"
                                  "60616263646566676869"
                                  "70717273747576777879"
                                  "80818283848586878889"
                                  "90919293949596979899";

/* The number of decimal digits of u: log10 from the bit length (1233 /
 * 4096 is just under log10(2)), then one comparison, rather than a loop
 * over the digits. */
static size_t digits_of(unsigned long long u)
{
    static const unsigned long long pow10[] = {1ULL,
                                               10ULL,
                                               100ULL,
                                               1000ULL,
                                               10000ULL,
                                               100000ULL,
                                               1000000ULL,
                                               10000000ULL,
                                               100000000ULL,
                                               1000000000ULL,
                                               10000000000ULL,
                                               100000000000ULL,
                                               1000000000000ULL,
                                               10000000000000ULL,
                                               100000000000000ULL,
                                               1000000000000000ULL,
                                               10000000000000000ULL,
                                               100000000000000000ULL,
                                               1000000000000000000ULL,
                                               10000000000000000000ULL};
    if (u < 10)
        return 1;
    size_t t = (size_t)(64 - __builtin_clzll(u)) * 1233 >> 12;
    return t + (u >= pow10[t]);
}

size_t util_format_int(char *out, long long v)
{
    /* The magnitude as unsigned, so LLONG_MIN needs no special case. */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    size_t len = v < 0;
    if (v < 0)
        out[0] = '-';
    /* Written from the end straight into place: the length first, so that
     * no variable-length copy out of a scratch array is needed; 32-bit
     * arithmetic once the rest fits, cheaper than 64-bit division. Every
     * answer and every Redis call formats a dozen numbers (callgrind). */
    len += digits_of(u);
    char *p = out + len;
    while (u > UINT32_MAX) {
        unsigned d = (unsigned)(u % 100) * 2;
        u /= 100;
        p -= 2;
        memcpy(p, digit_pairs + d, 2);
    }
    uint32_t w = (uint32_t)u;
    while (w >= 100) {
        uint32_t d = (w % 100) * 2;
        w /= 100;
        p -= 2;
        memcpy(p, digit_pairs + d, 2);
    }
    if (w >= 10) {
        p -= 2;
        memcpy(p, digit_pairs + w * 2, 2);
    } else {
        *--p = (char)('0' + w);
    }
    return len;
}

int64_t util_ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

static void *oom(size_t n)
{
    fprintf(stderr, "ratelimitd: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    return p ? p : oom(n);
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    return p ? p : oom(n * size);
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    return q ? q : oom(n);
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = xmalloc(len + 1);

    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

int util_consttime_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* Every byte of a is compared against some byte of b, so the time
     * depends on alen only; the length difference is folded in at the end. */
    unsigned char diff = alen != blen;
    for (size_t i = 0; i < alen; i++)
        diff |= (unsigned char)(a[i] ^ (blen ? b[i % blen] : 0));
    return diff == 0;
}
