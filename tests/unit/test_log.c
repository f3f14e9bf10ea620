/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_log.c: log.c's per-site rate limit (log_limit_allow, log_limited),
 * its lines as written to stderr, and the logfmt quoting they go through.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/log.h"
#include "tap.h"

#define SECOND 1000000

static void test_allow(void)
{
    struct log_limit ll = {.interval_us = SECOND};
    uint64_t n = 99;
    ok(log_limit_allow(&ll, 5000000, &n), "allow: the first line passes");
    is_int(n, 0, "allow: nothing suppressed before it");
    n = 99;
    ok(!log_limit_allow(&ll, 5000001, &n), "allow: 1 µs later refused");
    is_int(n, 99, "allow: a refusal leaves *suppressed_out alone");
    ok(!log_limit_allow(&ll, 5999999, &n), "allow: 1 µs before the interval refused");
    ok(log_limit_allow(&ll, 6000000, &n), "allow: exactly one interval later passes");
    is_int(n, 2, "allow: it reports the 2 refused");
    ok(!log_limit_allow(&ll, 6000001, &n), "allow: the interval restarts from the passed line");
    ok(log_limit_allow(&ll, 60000000, &n), "allow: long after passes");
    is_int(n, 1, "allow: the count started afresh");
    ok(log_limit_allow(&ll, 70000000, &n), "allow: a quiet site passes again");
    is_int(n, 0, "allow: with nothing suppressed");

    /* A burst of a million lines in one interval: one passes. */
    struct log_limit flood = {.interval_us = SECOND};
    int passed = 0;
    for (int i = 0; i < 1000000; i++)
        passed += log_limit_allow(&flood, 100 + i / 2, &n);
    is_int(passed, 1, "flood: one line in the interval");
    ok(log_limit_allow(&flood, 100 + SECOND, &n), "flood: the next interval passes");
    is_int(n, 999999, "flood: reporting 999999 suppressed");

    /* Two sites are independent. */
    struct log_limit a = {.interval_us = SECOND}, b = {.interval_us = SECOND};
    ok(log_limit_allow(&a, 0, &n) && log_limit_allow(&b, 0, &n), "sites: each has its own first");

    /* A clock reading before the last line passes rather than silencing
     * the site; extreme readings do not overflow. */
    struct log_limit back = {.interval_us = SECOND};
    ok(log_limit_allow(&back, 10 * SECOND, &n), "clock: first");
    ok(log_limit_allow(&back, 2 * SECOND, &n), "clock: an earlier reading passes");
    struct log_limit far = {.interval_us = SECOND};
    ok(log_limit_allow(&far, INT64_MIN, &n), "clock: INT64_MIN first");
    ok(log_limit_allow(&far, INT64_MAX, &n), "clock: INT64_MAX after it passes (no overflow)");
    ok(!log_limit_allow(&far, INT64_MAX, &n), "clock: INT64_MAX again refused");

    struct log_limit zero = {.interval_us = 0};
    ok(log_limit_allow(&zero, 7, &n) && log_limit_allow(&zero, 7, &n),
       "interval 0: every line passes");
}

/* Runs fn with stderr sent to a temporary file; returns what it wrote
 * (the caller frees it). */
static char *capture(void (*fn)(void))
{
    char path[] = "/tmp/test_log.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    unlink(path);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    off_t len = lseek(fd, 0, SEEK_END);
    char *buf = calloc(1, (size_t)len + 1);
    if (buf && pread(fd, buf, (size_t)len, 0) != len) {
        free(buf);
        buf = NULL;
    }
    close(fd);
    return buf;
}

static size_t count(const char *s, const char *sub)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, sub)) != NULL; p += strlen(sub))
        n++;
    return n;
}

static void write_limited(void)
{
    struct logger lg = {.level = LOG_LVL_INFO};
    struct log_limit late = {.interval_us = SECOND}, err = {.interval_us = SECOND};
    for (int i = 0; i < 5; i++)
        log_limited(&lg, &late, 1000 + i, LOG_LVL_WARN, "check late", "policy", "login", NULL);
    log_limited(&lg, &err, 1000, LOG_LVL_WARN, "redis error", "error", "ERR x y", NULL);
    log_limited(&lg, &late, 1000 + SECOND, LOG_LVL_WARN, "check late", "policy", "api", NULL);
    log_limited(&lg, &late, 1000 + 3 * SECOND, LOG_LVL_WARN, "check late", "policy", "q", NULL);
    /* Under the level: neither written nor counted. */
    for (int i = 0; i < 3; i++)
        log_limited(&lg, &err, 2000 + i, LOG_LVL_DEBUG, "redis debug", NULL);
    log_limited(&lg, &err, 1000 + 2 * SECOND, LOG_LVL_WARN, "redis error", "error", "E", NULL);
}

static void test_lines(void)
{
    char *out = capture(write_limited);
    if (!ok(out != NULL, "lines: stderr captured"))
        return;
    is_int(count(out, "\n"), 5, "lines: 5 written of 12 calls");
    is_int(count(out, "msg=\"check late\""), 3, "lines: check late 3 times (1 + 2 intervals)");
    ok(strstr(out, "level=warn msg=\"check late\" policy=login\n") != NULL,
       "lines: the first has no suppressed= (nothing was)");
    ok(strstr(out, "msg=\"check late\" policy=api suppressed=4\n") != NULL,
       "lines: the next reports the 4 suppressed, after its own pairs");
    ok(strstr(out, "msg=\"check late\" policy=q\n") != NULL,
       "lines: after a quiet interval, no suppressed=");
    ok(strstr(out, "msg=\"redis error\" error=\"ERR x y\"\n") != NULL,
       "lines: another site is limited on its own; values quoted");
    ok(strstr(out, "msg=\"redis error\" error=E\n") != NULL,
       "lines: lines under the level were not counted as suppressed");
    ok(strstr(out, "redis debug") == NULL, "lines: nothing under the level is written");
    free(out);
}

static void write_plain(void)
{
    struct logger lg = {.level = LOG_LVL_WARN};
    log_event(&lg, LOG_LVL_INFO, "hidden", NULL);
    log_event(&lg, LOG_LVL_ERROR, "x", "a", "b c", "q", "say \"hi\"", "e", "", "n", NULL, NULL);
}

static void test_event(void)
{
    char *out = capture(write_plain);
    if (!ok(out != NULL, "event: stderr captured"))
        return;
    ok(strncmp(out, "ts=", 3) == 0 && strstr(out, "Z level=error msg=x ") != NULL,
       "event: ts, level, msg");
    ok(strstr(out, " a=\"b c\" q=\"say \\\"hi\\\"\" e=\"\" n=\"\"\n") != NULL,
       "event: spaces and quotes quoted, empty and NULL values as \"\"");
    ok(strstr(out, "hidden") == NULL, "event: under the level: nothing");
    free(out);
}

int main(void)
{
    test_allow();
    test_lines();
    test_event();
    return tap_done();
}
