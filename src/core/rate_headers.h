/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rate_headers.h: the rate-limit header fields of one verdict, for every
 * front that sends them: the HTTP answers of /check and /auth (response.c)
 * and Envoy's response_headers_to_add (rls.c), so both say exactly the
 * same. X-RateLimit-*, the IETF RateLimit and RateLimit-Policy structured
 * fields (per the binding check's policy's `headers:` mode), Retry-After.
 *
 * Fills a fixed-size list (no allocation); does not write any bytes of a
 * response nor decide which tier binds (decision_summarize).
 */
#ifndef RATELIMITD_RATE_HEADERS_H
#define RATELIMITD_RATE_HEADERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/decision.h"
#include "lib/util.h"

/*
 * A value is either a caller's string (pointed to, not copied) or written
 * into `space`, whose size is the sum of the worst cases of every value one
 * answer can carry, so no valid value is ever cut:
 *   X-RateLimit-Limit, -Remaining, -Reset, -Delay-Ms, Retry-After:
 *     one integer each;
 *   RateLimit-Policy: one member per tier (POLICY_MAX_TIERS), ", " apart;
 *   RateLimit: one member.
 * A member is "<policy>/<tier>" quoted with two integer parameters.
 */
#define RATE_HEADERS_MAX 9           /* and X-RateLimit-Lease, which the HTTP front adds */
#define RATE_HEADERS_SF_INT_CHARS 15 /* RFC 9651 sf-integer: at most 15 digits */
#define RATE_HEADERS_SF_MEMBER_MAX                                                                 \
    (2 + POLICY_NAME_MAX + 1 + POLICY_NAME_MAX + 2 * (3 + RATE_HEADERS_SF_INT_CHARS))
#define RATE_HEADERS_SPACE                                                                         \
    (5 * UTIL_INT_CHARS + (POLICY_MAX_TIERS + 1) * (RATE_HEADERS_SF_MEMBER_MAX + 2))

struct rate_header {
    const char *name;
    const char *value; /* into space, or a caller's string; not NUL-terminated */
    size_t len;
};

struct rate_headers {
    size_t n;
    struct rate_header h[RATE_HEADERS_MAX];
    size_t used;     /* bytes of space taken */
    size_t value_at; /* where the value being written starts */
    char space[RATE_HEADERS_SPACE];
};

/* An empty list. */
void rate_headers_init(struct rate_headers *hs);

/* Adds a header whose value is the caller's, pointed to rather than copied:
 * it must stay valid as long as hs is read. */
void rate_headers_add_ref(struct rate_headers *hs, const char *name, const char *value);

/*
 * Adds the headers of verdict v (with v->sum filled for DECIDED and LOCAL):
 *   DECIDED, LOCAL: the binding tier's figures in the binding check's
 *     policy's mode; Retry-After when denied with a finite wait;
 *   UNAVAILABLE, OVERLOADED: what the config alone tells of the tier
 *     decision_unknown_binding picks (X-RateLimit-Limit, RateLimit-Policy),
 *     and Retry-After: 1 when the request is refused (failure_mode closed,
 *     or overloaded).
 */
void rate_headers_verdict(struct rate_headers *hs, const struct verdict *v);

/* The same for Envoy's response_headers_to_add (rls.c), where the mode says
 * everything that is added: with `headers: none` nothing at all, not even
 * Retry-After (envoyproxy/ratelimit adds no header unless asked; Envoy's
 * own enable_x_ratelimit_headers may be the one asked). */
void rate_headers_verdict_envoy(struct rate_headers *hs, const struct verdict *v);

/* Microseconds as the whole milliseconds every answer reports: rounded up
 * (a wait of 1 µs is 1 ms, never 0), negative as 0. */
int64_t rate_headers_ms(int64_t us);

#endif
