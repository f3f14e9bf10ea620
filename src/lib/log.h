/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h: one logfmt line per event on stderr
 * (ts=... level=... msg="..." key=value ...).
 *
 * The level threshold lives in a struct the caller owns (normally the
 * server's), so there is no hidden global; log lines are written with a
 * single write(2) so lines from a future worker thread never interleave.
 *
 * Lines that a flood of requests could repeat (a late check, a Redis error)
 * go through a struct log_limit: at most one line per interval per call
 * site, the next one saying how many were suppressed.
 */
#ifndef RATELIMITD_LOG_H
#define RATELIMITD_LOG_H

#include "lib/util.h"
#include <stdint.h>

enum log_level { LOG_LVL_DEBUG, LOG_LVL_INFO, LOG_LVL_WARN, LOG_LVL_ERROR };

struct logger {
    enum log_level level;
    int journal; /* stderr is the systemd journal: prefix lines with <N> */
};

/* Sets lg->journal if stderr is connected to journald ($JOURNAL_STREAM
 * names its device and inode), so each line carries its syslog priority. */
void log_detect_journal(struct logger *lg);

/* Parses "debug", "info", "warn" or "error"; -1 if none of them. */
int log_level_from_name(const char *name, enum log_level *out) RL_WUR;

/*
 * Logs msg followed by the key/value pairs given as alternating const char *
 * arguments and terminated by NULL. Values are quoted when they contain
 * spaces, quotes or '='; control bytes are escaped.
 */
void log_event(const struct logger *lg, enum log_level level, const char *msg, ...)
    __attribute__((sentinel));

/*
 * The rate limit of one message site: one struct per call site per worker,
 * owned by the caller (no globals, no locks: a worker's sites are used from
 * its thread only). Start it zeroed except for the interval:
 *     struct log_limit late = {.interval_us = 1000000};
 */
struct log_limit {
    int64_t interval_us; /* at most one line per interval */
    int64_t last_us;     /* when the last line was let through */
    uint64_t suppressed; /* lines refused since then */
    int started;         /* a line has been let through */
};

/*
 * Whether a line may be written at now_us (a monotonic clock, µs): yes for
 * the first line, and once interval_us has passed since the last line let
 * through (or the clock reads earlier than it, which a monotonic clock does
 * not, so that a wrong clock cannot silence a site for good). On yes,
 * returns 1, stores in *suppressed_out how many lines were refused since the
 * last one (to be reported with this one) and starts counting afresh; on no,
 * counts this line as suppressed and returns 0. Pure: no I/O.
 */
int log_limit_allow(struct log_limit *ll, int64_t now_us, uint64_t *suppressed_out);

/*
 * log_event through a limit: writes the line only if log_limit_allow lets
 * it (a line under the logger's level neither writes nor counts), followed
 * by suppressed=N when N earlier lines of this site were suppressed. The
 * count of lines suppressed after the last written one is only reported by
 * the next line written; metrics count the events themselves.
 */
void log_limited(const struct logger *lg, struct log_limit *ll, int64_t now_us,
                 enum log_level level, const char *msg, ...) __attribute__((sentinel));

#endif
