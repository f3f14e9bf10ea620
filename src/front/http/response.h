/* SPDX-License-Identifier: Apache-2.0 */
/*
 * response.h: every answer the HTTP front gives, rendered straight into the
 * connection's output buffer as a complete HTTP/1.1 response: status line,
 * Content-Type, Cache-Control: no-store, the answer's own headers
 * (X-RateLimit-* or RateLimit / RateLimit-Policy per the policy's
 * `headers:` mode, Retry-After, Allow, WWW-Authenticate), Connection when
 * asked, Content-Length, and the body, which always ends with one "\n".
 *
 * Owns the JSON shapes (json_out.c writes them; no tree, no allocation past
 * the buffer's own growth). Does not own the X-RateLimit-* / Retry-After
 * rules (rate_headers.c, shared with Envoy's answers), which tier binds (decision_summarize) nor
 * when a connection closes (http.c says so with RESPONSE_CLOSE).
 */
#ifndef RATELIMITD_RESPONSE_H
#define RATELIMITD_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "core/decision.h"
#include "core/request_error.h"
#include "lib/buf.h"

struct rate_headers;

/* How one response is written (flags, or-ed). */
#define RESPONSE_HEAD 1u       /* the request was HEAD: headers only */
#define RESPONSE_CLOSE 2u      /* Connection: close (the front then closes) */
#define RESPONSE_KEEP_ALIVE 4u /* Connection: keep-alive (an HTTP/1.0 client asked) */

/* A verdict's answer: DECIDED and LOCAL 200/429 with the figures of
 * v->sum.binding (LOCAL adds "degraded":true,"local":true); UNAVAILABLE 503
 * backend_unavailable with Retry-After: 1 if the request fails closed, else
 * 200 allowed and degraded; OVERLOADED 503 overloaded with Retry-After: 1.
 * Without a decision the headers are what the config tells of the tier
 * decision_unknown_binding picks (X-RateLimit-Limit, RateLimit-Policy).
 * Appends to out; returns the status. */
int response_verdict(struct buf *out, const struct verdict *v, unsigned flags);

/* The HTTP status of a verdict's outcome (verdict_outcome): 200 allowed
 * (or degraded open), 429 denied (or, with use_deny_status, the binding
 * check's policy's deny_status), 503 failure_mode closed or overloaded.
 * The access log prints it for every front. */
int response_status(const struct verdict *v);

struct json_out;
struct rls_answer;

/* Which answer a tier's figures are written for (response_tier_json):
 * their field orders differ, and both are public as they are. */
enum response_tier_form {
    /* A check's: "allowed" after "algorithm", and "reason" when the cost
     * is over the limit. */
    RESPONSE_TIER_CHECK,
    /* The admin API's inspection: "allowed" after "reset_ms". */
    RESPONSE_TIER_INSPECT,
};

/* One tier's figures as a JSON object into j: the one writer of a tier for
 * every answer. now gives limit, remaining and reset_ms; next gives
 * allowed, retry_after_ms and delay_ms (leaky_bucket only). A check passes
 * its result as both; an inspection its state at cost 0 (now) and what a
 * request of cost 1 would get (next). limit_source (NULL: left out) is
 * where the limit in force came from (an inspection's). */
void response_tier_json(struct json_out *j, const struct tier *t, const struct tier_result *now,
                        const struct tier_result *next, enum response_tier_form form,
                        const char *limit_source);

/* An Envoy rate limit service answer (POST /json): RLS_DECIDED as the
 * protojson of RateLimitResponse (enum names as strings, zero fields left
 * out, durations as "<seconds>s"), 200 for OK and 429 for OVER_LIMIT;
 * RLS_UNAVAILABLE 503 backend_unavailable with Retry-After: 1. Appends to
 * out; returns the status. */
int response_rls(struct buf *out, const struct rls_answer *a, unsigned flags);

/* A forward-auth request allowed without counting (missing_key: skip):
 * 200 {"allowed":true,"skipped":true,"policy":policy,"missing":missing},
 * where missing is "ip" or the name of the absent header. No X-RateLimit-*
 * headers: nothing was counted. */
void response_auth_skipped(struct buf *out, const char *policy, const char *missing,
                           unsigned flags);

/* {"error": code, "message": message} with code's status, and one extra
 * header when hname is not NULL (hvalue is not copied: it must stay valid
 * until the call returns). message may hold any bytes: invalid UTF-8
 * becomes '?'. */
void response_error(struct buf *out, enum request_code code, const char *message, const char *hname,
                    const char *hvalue, unsigned flags);

/* A body given whole (NUL-terminated JSON such as {"status":"ok"}, or the
 * metrics text with its content type; NULL: application/json). */
void response_body(struct buf *out, int status, const char *content_type, const char *body,
                   size_t len, unsigned flags);

/* The same with headers of the caller's (hs: NULL for none), such as the
 * status page's Content-Security-Policy. */
void response_body_headers(struct buf *out, int status, const char *content_type,
                           const struct rate_headers *hs, const char *body, size_t len,
                           unsigned flags);

/* "HTTP/1.1 100 Continue" and its blank line. */
void response_continue(struct buf *out);

#endif
