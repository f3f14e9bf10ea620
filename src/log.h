/*
 * log.h: one logfmt line per event on stderr
 * (ts=... level=... msg="..." key=value ...).
 *
 * The level threshold lives in a struct the caller owns (normally the
 * server's), so there is no hidden global; log lines are written with a
 * single write(2) so lines from a future worker thread never interleave.
 */
#ifndef RATELIMITD_LOG_H
#define RATELIMITD_LOG_H

enum log_level { LOG_LVL_DEBUG, LOG_LVL_INFO, LOG_LVL_WARN, LOG_LVL_ERROR };

struct logger {
    enum log_level level;
    int journal; /* stderr is the systemd journal: prefix lines with <N> */
};

/* Sets lg->journal if stderr is connected to journald ($JOURNAL_STREAM
 * names its device and inode), so each line carries its syslog priority. */
void log_detect_journal(struct logger *lg);

/* Parses "debug", "info", "warn" or "error"; -1 if none of them. */
int log_level_from_name(const char *name, enum log_level *out);

/*
 * Logs msg followed by the key/value pairs given as alternating const char *
 * arguments and terminated by NULL. Values are quoted when they contain
 * spaces, quotes or '='; control bytes are escaped.
 */
void log_event(const struct logger *lg, enum log_level level, const char *msg, ...)
    __attribute__((sentinel));

#endif
