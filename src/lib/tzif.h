/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tzif.h: a time zone read from a TZif file (RFC 8536, versions 1 to 3),
 * asked for its UTC offset at an instant and for the first instant of a
 * local wall-clock time. Front-neutral and process-neutral: it never
 * touches the TZ environment variable, tzset() or localtime_r(), so any
 * number of zones live side by side in one process.
 *
 * A zone is immutable once loaded; the config snapshot that loads it owns
 * it (tzif_free), and any thread may read it.
 */
#ifndef RATELIMITD_TZIF_H
#define RATELIMITD_TZIF_H

#include <stddef.h>
#include <stdint.h>

#include "lib/util.h"

#define TZIF_NAME_MAX 255
#define TZIF_DEFAULT_DIR "/usr/share/zoneinfo"

struct tzif_zone;

/* True if name is an acceptable IANA zone name: 1 to TZIF_NAME_MAX bytes
 * of [A-Za-z0-9_+-./], no leading '/', no "." or ".." component. */
int tzif_name_valid(const char *name);

/*
 * Reads the zone `name` from dir (NULL: $TZDIR if set, else
 * TZIF_DEFAULT_DIR): dir/name, parsed with tzif_parse. Returns 0 and a zone
 * the caller owns, or -1 with a message (no such zone, not a TZif file...).
 */
int tzif_load(const char *dir, const char *name, struct tzif_zone **out, char *err,
              size_t errlen) RL_WUR;

/*
 * Parses len bytes of a TZif file. The version 2+ 64-bit block is used
 * when present (the version 1 block otherwise), and its footer's POSIX TZ
 * string answers for instants after the last transition. Files with leap
 * second records ("right/" zones) are refused: windows count POSIX seconds.
 * Returns 0 and a zone the caller owns, or -1 with a message.
 */
int tzif_parse(const unsigned char *data, size_t len, const char *name, struct tzif_zone **out,
               char *err, size_t errlen) RL_WUR;

/* UTC without reading a file (the default zone of a calendar tier); the
 * caller owns it. */
struct tzif_zone *tzif_new_utc(void);

/* Frees the zone; NULL is a no-op. */
void tzif_free(struct tzif_zone *z);

/* The name it was loaded under. */
const char *tzif_name(const struct tzif_zone *z);

/* Seconds east of UTC in effect at instant t (seconds since the epoch). */
int32_t tzif_offset(const struct tzif_zone *z, int64_t t);

/* The first instant after t at which the offset may change (a transition of
 * the table or of the footer's rule), or INT64_MAX if none follows. */
int64_t tzif_next_transition(const struct tzif_zone *z, int64_t t);

/*
 * The first instant u (seconds since the epoch) at which the wall clock
 * reads local or later, i.e. the least u with u + offset(u) >= local,
 * local being wall-clock seconds since 1970-01-01 00:00. A wall time that a
 * spring-forward gap skips maps to the gap's end; one that a fall-back
 * repeats, to its first occurrence.
 */
int64_t tzif_first_instant(const struct tzif_zone *z, int64_t local);

/* Proleptic Gregorian dates: days since 1970-01-01 of (y, m 1-12, d 1-31),
 * and back. Exact over every int32 year. */
int64_t tzif_days_from_civil(int64_t y, int m, int d);
void tzif_civil_from_days(int64_t days, int64_t *y, int *m, int *d);

/* Days in month m (1-12) of year y. */
int tzif_days_in_month(int64_t y, int m);

#endif
