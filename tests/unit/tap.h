/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tap.h: the Test Anything Protocol for the unit tests, read by automake's
 * tap-driver. Each ok() is one test point; the plan is printed at the end.
 */
#ifndef RATELIMITD_TAP_H
#define RATELIMITD_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int tap_count;
static int tap_failed;

__attribute__((format(printf, 2, 3))) static int ok(int cond, const char *fmt, ...)
{
    va_list ap;
    tap_count++;
    if (!cond)
        tap_failed++;
    printf("%sok %d - ", cond ? "" : "not ", tap_count);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    return cond;
}

#define is_int(got, want, ...)                                                                     \
    do {                                                                                           \
        long long g_ = (long long)(got), w_ = (long long)(want);                                   \
        if (!ok(g_ == w_, __VA_ARGS__))                                                            \
            printf("#   got %lld, want %lld\n", g_, w_);                                           \
    } while (0)

#define is_str(got, want, ...)                                                                     \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (!ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__))                                     \
            printf("#   got \"%s\", want \"%s\"\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)");       \
    } while (0)

static int tap_done(void)
{
    printf("1..%d\n", tap_count);
    return tap_failed ? 1 : 0;
}

#endif
