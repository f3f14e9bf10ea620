/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_util.c: number and duration parsing, duration formatting, clocks,
 * allocation helpers and SHA-1.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/sha1.h"
#include "lib/util.h"
#include "tap.h"

#define H (3600LL * 1000000)
#define D (24 * H)

static void test_parse_int64(void)
{
    static const struct {
        const char *s;
        int64_t min, max;
        int ok;
        int64_t want;   /* if ok */
        const char *in; /* if not ok: a substring of the message */
    } cases[] = {
        {"0", 0, 10, 1, 0, NULL},
        {"10", 0, 10, 1, 10, NULL},
        {"-5", -10, 10, 1, -5, NULL},
        {"-0", -1, 1, 1, 0, NULL},
        {"9223372036854775807", INT64_MIN, INT64_MAX, 1, INT64_MAX, NULL},
        {"-9223372036854775808", INT64_MIN, INT64_MAX, 1, INT64_MIN, NULL},
        {"9223372036854775808", INT64_MIN, INT64_MAX, 0, 0, "does not fit in 64 bits"},
        {"-9223372036854775809", INT64_MIN, INT64_MAX, 0, 0, "does not fit in 64 bits"},
        {"9223372036854775808", 0, INT64_MAX, 0, 0, "between 0 and 9223372036854775807"},
        {"99999999999999999999999", 0, 100, 0, 0, "between 0 and 100"},
        {"11", 0, 10, 0, 0, "between 0 and 10"},
        {"-1", 0, 10, 0, 0, "between 0 and 10"},
        {"-0", 0, 10, 0, 0, "between 0 and 10"}, /* no sign unless min < 0 */
        {"+5", 0, 10, 0, 0, "not a decimal integer"},
        {" 5", 0, 10, 0, 0, "not a decimal integer"},
        {"5 ", 0, 10, 0, 0, "not a decimal integer"},
        {"5x", 0, 10, 0, 0, "not a decimal integer"},
        {"0x5", 0, 10, 0, 0, "not a decimal integer"},
        {"1e3", 0, 10000, 0, 0, "not a decimal integer"},
        {"1.0", 0, 10, 0, 0, "not a decimal integer"},
        {"1_000", 0, 10000, 0, 0, "not a decimal integer"},
        {"-", -10, 10, 0, 0, "not a decimal integer"},
        {"--1", -10, 10, 0, 0, "not a decimal integer"},
        {"05", 0, 10, 0, 0, "leading zeros"},
        {"", 0, 10, 0, 0, "empty"},
        {NULL, 0, 10, 0, 0, "empty"},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[RL_ERRLEN] = "";
        int64_t v = 12345;
        int rc = util_parse_int64(cases[i].s, cases[i].min, cases[i].max, &v, err, sizeof err);
        const char *s = cases[i].s ? cases[i].s : "(null)";

        if (cases[i].ok) {
            is_int(rc, 0, "int64 \"%s\" parses", s);
            is_int(v, cases[i].want, "int64 \"%s\" value", s);
        } else {
            is_int(rc, -1, "int64 \"%s\" is refused", s);
            ok(strstr(err, cases[i].in) != NULL, "int64 \"%s\" message \"%s\" has \"%s\"", s, err,
               cases[i].in);
            is_int(v, 12345, "int64 \"%s\" leaves the output alone", s);
        }
    }
}

static void test_parse_duration(void)
{
    static const struct {
        const char *s;
        int64_t max;
        int ok;
        int64_t want;
        const char *in;
    } cases[] = {
        {"1ms", INT64_MAX, 1, 1000, NULL},
        {"50ms", INT64_MAX, 1, 50000, NULL},
        {"1s", INT64_MAX, 1, 1000000, NULL},
        {"1500ms", INT64_MAX, 1, 1500000, NULL},
        {"2m", INT64_MAX, 1, 120000000, NULL},
        {"1h", INT64_MAX, 1, H, NULL},
        {"366d", INT64_MAX, 1, 366 * D, NULL},
        {"60s", 60000000, 1, 60000000, NULL},
        {"1m", 60000000, 1, 60000000, NULL},
        {"61s", 60000000, 0, 0, "too long (at most 1m)"},
        {"60001ms", 60000000, 0, 0, "too long"},
        {"106751991d", INT64_MAX, 1, 106751991LL * D, NULL},
        {"106751992d", INT64_MAX, 0, 0, "too long"},
        {"9223372036854775808ms", INT64_MAX, 0, 0, "too long"},
        {"0s", INT64_MAX, 0, 0, "greater than zero"},
        {"0ms", INT64_MAX, 0, 0, "greater than zero"},
        {"-1s", INT64_MAX, 0, 0, "greater than zero"},
        {"1.5s", INT64_MAX, 0, 0, "fractions are not allowed"},
        {"10", INT64_MAX, 0, 0, "missing unit"},
        {"s", INT64_MAX, 0, 0, "expected <integer><unit>"},
        {"+1s", INT64_MAX, 0, 0, "expected <integer><unit>"},
        {" 1s", INT64_MAX, 0, 0, "expected <integer><unit>"},
        {"1s ", INT64_MAX, 0, 0, "unknown unit"},
        {"1 s", INT64_MAX, 0, 0, "unknown unit"},
        {"1S", INT64_MAX, 0, 0, "unknown unit"},
        {"1us", INT64_MAX, 0, 0, "unknown unit"},
        {"1sec", INT64_MAX, 0, 0, "unknown unit"},
        {"1h30m", INT64_MAX, 0, 0, "unknown unit"},
        {"01s", INT64_MAX, 0, 0, "leading zeros"},
        {"", INT64_MAX, 0, 0, "empty"},
        {NULL, INT64_MAX, 0, 0, "empty"},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[RL_ERRLEN] = "";
        int64_t v = 12345;
        int rc = util_parse_duration(cases[i].s, cases[i].max, &v, err, sizeof err);
        const char *s = cases[i].s ? cases[i].s : "(null)";

        if (cases[i].ok) {
            is_int(rc, 0, "duration \"%s\" parses", s);
            is_int(v, cases[i].want, "duration \"%s\" value", s);
        } else {
            is_int(rc, -1, "duration \"%s\" is refused", s);
            ok(strstr(err, cases[i].in) != NULL, "duration \"%s\" message \"%s\" has \"%s\"", s,
               err, cases[i].in);
            is_int(v, 12345, "duration \"%s\" leaves the output alone", s);
        }
    }
}

static void test_format_duration(void)
{
    static const struct {
        int64_t us;
        const char *want;
    } cases[] = {
        {1, "1us"},
        {999, "999us"},
        {1000, "1ms"},
        {1500000, "1500ms"},
        {1000000, "1s"},
        {90000000, "90s"},
        {60000000, "1m"},
        {H, "1h"},
        {90 * 60000000LL, "90m"},
        {D, "1d"},
        {366 * D, "366d"},
        {0, "0us"},
        {-2000000, "-2s"},
        {INT64_MAX, "9223372036854775807us"},
    };
    char buf[UTIL_DURATION_BUF], small[4];
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
        is_str(util_format_duration(cases[i].us, buf, sizeof buf), cases[i].want, "format %lld us",
               (long long)cases[i].us);
    is_str(util_format_duration(366 * D, small, sizeof small), "366", "format truncates safely");
}

static void test_misc(void)
{
    static const struct {
        int64_t a, b, want;
    } divs[] = {{0, 5, 0},
                {1, 5, 1},
                {5, 5, 1},
                {6, 5, 2},
                {10, 5, 2},
                {INT64_MAX, 1, INT64_MAX},
                {INT64_MAX, INT64_MAX, 1},
                {INT64_MAX - 1, INT64_MAX, 1}};
    int64_t m1, m2, r;
    char *s;
    size_t i;

    for (i = 0; i < sizeof divs / sizeof divs[0]; i++)
        is_int(util_ceil_div(divs[i].a, divs[i].b), divs[i].want, "ceil_div(%lld, %lld)",
               (long long)divs[i].a, (long long)divs[i].b);

    m1 = util_monotonic_us();
    m2 = util_monotonic_us();
    ok(m1 > 0 && m2 >= m1, "monotonic clock does not go back");
    r = util_realtime_us();
    ok(r > 1600000000LL * 1000000, "realtime clock is in microseconds since the epoch");

    s = xstrndup("abcdef", 3);
    is_str(s, "abc", "xstrndup cuts");
    free(s);
    s = xstrndup("ab", 10);
    is_str(s, "ab", "xstrndup stops at the NUL");
    free(s);
    s = xstrdup("");
    is_str(s, "", "xstrdup of empty");
    free(s);
    s = xcalloc(0, 0);
    ok(s != NULL, "xcalloc(0, 0) is not NULL");
    s = xrealloc(s, 100);
    memset(s, 'x', 100);
    ok(s[99] == 'x', "xrealloc grows");
    free(s);
}

static void test_sha1(void)
{
    /* FIPS 180 / NIST examples, then lengths around the padding boundaries
     * (55/56 bytes: whether the length fits in the last block; 64: an
     * exact block), checked against an independent implementation. */
    static const struct {
        const char *msg;
        const char *want;
    } vectors[] = {
        {"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
        {"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "84983e441c3bd26ebaae4aa1f95129e5e54670f1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
         "lmnopqrsmnopqrstnopqrstu",
         "a49b2446a02c645bf419f995b67091253a04a259"},
        {"The quick brown fox jumps over the lazy dog", "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"},
    };
    static const struct {
        size_t len;
        const char *want;
    } lengths[] = {
        {55, "ddf57317ef34bfee3b6df83d359098930eb278bc"},
        {56, "a0d492bb0fc889d0eca3bc137066ab6f4f74f369"},
        {63, "c55856749bef509bdfe6bfebfc7bf4e793e82132"},
        {64, "bede92be29c3874e1b54ddc77988d606fc857a8e"},
        {65, "b05a80522b053d6dc7e0a517d0e70212c7dad11f"},
        {119, "504e27376a6e0f0dba8295b85cb25dc4dfa17d23"},
        {120, "82134b02fb3f702491be9bed581eeab59334acb2"},
        {127, "34d5e582029e9b9b85b2febe31da3db7cdabaaea"},
        {128, "a09133e6730ffe899efb70204cb5646cd5dc24ee"},
    };
    unsigned char bytes[128];
    char hex[41], *million;
    size_t i;

    for (i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        sha1_hex(vectors[i].msg, strlen(vectors[i].msg), hex);
        is_str(hex, vectors[i].want, "sha1 of \"%.20s\" (%zu bytes)", vectors[i].msg,
               strlen(vectors[i].msg));
    }
    for (i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)(i * 7 + 3);
    for (i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        sha1_hex(bytes, lengths[i].len, hex);
        is_str(hex, lengths[i].want, "sha1 of %zu bytes", lengths[i].len);
    }
    sha1_hex("\0", 1, hex);
    is_str(hex, "5ba93c9db0cff93f52b521d7420e43f6eda2784f", "sha1 of one NUL byte");

    million = xmalloc(1000000);
    memset(million, 'a', 1000000);
    sha1_hex(million, 1000000, hex);
    is_str(hex, "34aa973cd4c4daa4f61eeb2bdbad27316534016f", "sha1 of a million 'a'");
    free(million);
}

static void test_consttime_equal(void)
{
    ok(util_consttime_equal("abcdef", 6, "abcdef", 6), "equal strings are equal");
    ok(!util_consttime_equal("abcdeg", 6, "abcdef", 6), "last byte differs");
    ok(!util_consttime_equal("abc", 3, "abcdef", 6), "a prefix is not equal");
    ok(!util_consttime_equal("abcdefabc", 9, "abcdef", 6), "a repetition is not equal");
    ok(!util_consttime_equal("", 0, "abcdef", 6), "empty is not equal");
}

/* util_format_int against printf's %lld, at the edges and in between. */
static void test_format_int(void)
{
    const long long vs[] = {0,
                            1,
                            -1,
                            9,
                            10,
                            -10,
                            99,
                            100,
                            12345,
                            -67890,
                            1000000007LL,
                            (1LL << 53),
                            -(1LL << 53),
                            LLONG_MAX,
                            LLONG_MIN,
                            LLONG_MAX - 1,
                            LLONG_MIN + 1};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        char got[UTIL_INT_CHARS + 1], want[32];
        got[util_format_int(got, vs[i])] = '\0';
        snprintf(want, sizeof want, "%lld", vs[i]);
        is_str(got, want, "format_int(%s)", want);
    }
    /* Every power of ten and its neighbours: each digit count. */
    int all = 1;
    for (long long p = 1; p > 0 && p <= LLONG_MAX / 10; p *= 10) {
        for (long long d = -1; d <= 1; d++) {
            char got[UTIL_INT_CHARS + 1], want[32];
            got[util_format_int(got, p + d)] = '\0';
            snprintf(want, sizeof want, "%lld", p + d);
            all = all && strcmp(got, want) == 0;
            got[util_format_int(got, -(p + d))] = '\0';
            snprintf(want, sizeof want, "%lld", -(p + d));
            all = all && strcmp(got, want) == 0;
        }
    }
    ok(all, "format_int matches %%lld around every power of ten");
}

int main(void)
{
    test_format_int();
    test_consttime_equal();
    test_parse_int64();
    test_parse_duration();
    test_format_duration();
    test_misc();
    test_sha1();
    return tap_done();
}
