/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c: logfmt lines on stderr. Owns formatting and escaping of values and
 * the per-site rate limit (struct log_limit); does not own what is logged
 * (callers never pass bodies or secrets).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"

static const char *const level_names[] = {"debug", "info", "warn", "error"};
/* syslog priorities: debug 7, info 6, warning 4, err 3. */
static const char *const journal_prefix[] = {"<7>", "<6>", "<4>", "<3>"};

void log_detect_journal(struct logger *lg)
{
    const char *env = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    lg->journal = env && sscanf(env, "%llu:%llu", &dev, &ino) == 2 &&
                  fstat(STDERR_FILENO, &st) == 0 && (unsigned long long)st.st_dev == dev &&
                  (unsigned long long)st.st_ino == ino;
}

int log_level_from_name(const char *name, enum log_level *out)
{
    for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

/* Appends s to buf at *pos, quoting and escaping as logfmt needs. Truncates
 * silently at the buffer's end: a long value must not lose the line. */
static void append_value(char *buf, size_t cap, size_t *pos, const char *s)
{
    int quote = *s == '\0' || strpbrk(s, " \"=\\") != NULL;
    for (const char *p = s; *p && !quote; p++)
        quote = (unsigned char)*p < 0x20;
    if (quote && *pos < cap)
        buf[(*pos)++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p && *pos + 6 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            buf[(*pos)++] = '\\';
            buf[(*pos)++] = (char)*p;
        } else if (*p < 0x20) {
            *pos += (size_t)snprintf(buf + *pos, cap - *pos, "\\x%02x", *p);
        } else {
            buf[(*pos)++] = (char)*p;
        }
    }
    if (quote && *pos < cap)
        buf[(*pos)++] = '"';
}

static void append_raw(char *buf, size_t cap, size_t *pos, const char *s)
{
    size_t n = strlen(s);
    if (n > cap - *pos)
        n = cap - *pos;
    memcpy(buf + *pos, s, n);
    *pos += n;
}

/* " key=value", the value quoted and escaped as needed (NULL as ""). */
static void append_pair(char *buf, size_t cap, size_t *pos, const char *k, const char *v)
{
    append_raw(buf, cap, pos, " ");
    append_raw(buf, cap, pos, k);
    append_raw(buf, cap, pos, "=");
    append_value(buf, cap, pos, v ? v : "");
}

/* Formats and writes one line: msg, the pairs in ap, then extra_k=extra_v
 * when extra_k is not NULL. */
static void write_line(const struct logger *lg, enum log_level level, const char *msg, va_list ap,
                       const char *extra_k, const char *extra_v)
{
    char buf[2048];
    size_t cap = sizeof buf - 1, pos = 0;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    if (lg && lg->journal)
        append_raw(buf, cap, &pos, journal_prefix[level]);
    pos += strftime(buf + pos, cap - pos, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    pos += (size_t)snprintf(buf + pos, cap - pos, ".%03ldZ level=%s msg=", ts.tv_nsec / 1000000,
                            level_names[level]);
    append_value(buf, cap, &pos, msg);

    for (;;) {
        const char *k = va_arg(ap, const char *);
        if (!k)
            break;
        const char *v = va_arg(ap, const char *);
        append_pair(buf, cap, &pos, k, v);
    }
    if (extra_k)
        append_pair(buf, cap, &pos, extra_k, extra_v);
    buf[pos++] = '\n';
    /* One write per line; a failed write to stderr has nowhere to be reported. */
    ssize_t w = write(STDERR_FILENO, buf, pos);
    (void)w;
}

void log_event(const struct logger *lg, enum log_level level, const char *msg, ...)
{
    if (lg && level < lg->level)
        return;
    va_list ap;
    va_start(ap, msg);
    write_line(lg, level, msg, ap, NULL, NULL);
    va_end(ap);
}

int log_limit_allow(struct log_limit *ll, int64_t now_us, uint64_t *suppressed_out)
{
    /* The difference in unsigned arithmetic: exact for now_us >= last_us,
     * where the signed one could overflow. */
    int due = !ll->started || now_us < ll->last_us || ll->interval_us <= 0 ||
              (uint64_t)now_us - (uint64_t)ll->last_us >= (uint64_t)ll->interval_us;
    if (!due) {
        ll->suppressed++;
        return 0;
    }
    *suppressed_out = ll->suppressed;
    ll->suppressed = 0;
    ll->last_us = now_us;
    ll->started = 1;
    return 1;
}

void log_limited(const struct logger *lg, struct log_limit *ll, int64_t now_us,
                 enum log_level level, const char *msg, ...)
{
    uint64_t suppressed;
    if ((lg && level < lg->level) || !log_limit_allow(ll, now_us, &suppressed))
        return;
    char n[24];
    snprintf(n, sizeof n, "%llu", (unsigned long long)suppressed);
    va_list ap;
    va_start(ap, msg);
    write_line(lg, level, msg, ap, suppressed ? "suppressed" : NULL, n);
    va_end(ap);
}
