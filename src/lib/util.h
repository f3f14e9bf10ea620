/* SPDX-License-Identifier: Apache-2.0 */
/*
 * util.h: small helpers shared by every module: range-checked number and
 * duration parsing, clocks, allocation that never returns NULL.
 *
 * Parsers never abort: they return 0 on success or -1 and write a short
 * human-readable reason into the caller's buffer.
 */
#ifndef RATELIMITD_UTIL_H
#define RATELIMITD_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define RL_ERRLEN 256
#define RL_WUR __attribute__((warn_unused_result))

/* Parses a decimal integer in [min, max], the whole string, no sign unless
 * min < 0, no spaces. */
int util_parse_int64(const char *s, int64_t min, int64_t max, int64_t *out, char *err,
                     size_t errlen) RL_WUR;

/* Parses "<integer><unit>" with unit ms, s, m, h or d into microseconds.
 * Zero and negative durations are rejected; so is anything above max_us. */
int util_parse_duration(const char *s, int64_t max_us, int64_t *out_us, char *err,
                        size_t errlen) RL_WUR;

/* Writes a duration for messages as the largest unit that divides it exactly
 * ("60s", "1500ms", "250us") and returns buf. UTIL_DURATION_BUF is enough. */
#define UTIL_DURATION_BUF 32
const char *util_format_duration(int64_t us, char *buf, size_t buflen);

/* Microseconds on CLOCK_MONOTONIC: for deadlines and intervals only. */
int64_t util_monotonic_us(void);

/* Microseconds since the Unix epoch on CLOCK_REALTIME: for limit windows
 * under `clock: local`, and the calendar bounds sent to Redis. */
int64_t util_realtime_us(void);

/* Writes the wall-clock time `us` (µs since the epoch) as RFC 3339 in UTC
 * to the second ("2026-11-29T13:30:47Z") into buf (UTIL_RFC3339_BUF
 * bytes), and returns buf. */
#define UTIL_RFC3339_BUF 32
const char *util_format_rfc3339(int64_t us, char *buf);

/* Writes v in decimal (no NUL) into out, which has room for
 * UTIL_INT_CHARS bytes, and returns the length. snprintf's format machinery
 * was a tenth of the daemon's user time per answer. */
#define UTIL_INT_CHARS 20
size_t util_format_int(char *out, long long v);

/* Ceiling of a / b for a >= 0, b > 0. */
int64_t util_ceil_div(int64_t a, int64_t b);

/* Compares a[0..alen) with b[0..blen) in time that depends only on alen
 * (the attacker's input), not on where they differ: for secrets. */
int util_consttime_equal(const char *a, size_t alen, const char *b, size_t blen);

/* Allocation that aborts on out-of-memory: running out of memory is a broken
 * invariant of the host, not bad input. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

#endif
