/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rls.h: Envoy's rate limit service (ShouldRateLimit), front-neutral. A
 * front (gRPC in grpc.c, POST /json in http_routes.c) decodes a request into
 * struct rls_request; rls_start matches each descriptor in the config's
 * domains (domains.h), turns the matched ones into ONE check_request (so
 * every descriptor is decided atomically: if any is over limit, nothing is
 * consumed anywhere), hands it to the core (check.c) and maps the verdict
 * back to Envoy's answer: overall code, one status per descriptor, and the
 * X-RateLimit-* / Retry-After (or IETF) headers of the `headers:` mode.
 * Quota descriptors (quota_mode, envoy_quota_mode) and envoy_shadow_mode
 * may make the answer OK while a status is OVER_LIMIT: what allowed is then
 * taken in a second atomic call (rls.c).
 */
#ifndef RATELIMITD_RLS_H
#define RATELIMITD_RLS_H

#include <stddef.h>
#include <stdint.h>

#include "config/domains.h"
#include "core/request_error.h"

struct core;
struct rls_call;

/* A decoded request. Everything is the front's and is read only during
 * rls_start. */
struct rls_descriptor {
    const struct descriptor_entry *entries;
    size_t nentries;
    int64_t hits_addend; /* the descriptor's own hits_addend; -1: not set */
    /* Envoy's per-request limit override (RateLimitDescriptor.limit), when
     * has_limit: it replaces the config's limit for this descriptor. */
    int has_limit;
    enum rls_unit limit_unit;
    int64_t limit_requests_per_unit;
};

/* Which front asked, for the metrics (ratelimitd_rls_requests_total). A
 * zeroed request is gRPC's. */
enum rls_front { RLS_FRONT_GRPC = 0, RLS_FRONT_JSON = 1 };

struct rls_request {
    enum rls_front front;
    const char *domain;
    size_t domainlen;
    const struct rls_descriptor *descriptors;
    size_t ndescriptors;
    int64_t hits_addend; /* request-level; 0 (proto3's unset) means 1 */
};

/* Envoy's RateLimitResponse.Code, with its numbering. */
enum rls_code { RLS_CODE_UNKNOWN = 0, RLS_CODE_OK = 1, RLS_CODE_OVER_LIMIT = 2 };

/* One descriptor's status, in request order. */
struct rls_status {
    enum rls_code code;
    int has_limit; /* matched a limit that was decided: the fields below are set */
    int64_t requests_per_unit;
    enum rls_unit unit;
    const char *limit_name; /* rate_limit.name, or NULL */
    int64_t limit_remaining;
    int64_t until_reset_s; /* whole seconds, rounded up (rls_whole_seconds) */
};

struct rls_header {
    const char *name;
    const char *value;
    size_t len;
};

enum rls_outcome {
    RLS_DECIDED,     /* overall and statuses are set (failure_mode open and
                      * local answers too: open is OK, local decided in memory) */
    RLS_UNAVAILABLE, /* failure_mode closed, or overloaded: gRPC UNAVAILABLE,
                      * HTTP 503; message says why */
};

/* The answer. Everything it points to is valid only during the reply. */
struct rls_answer {
    enum rls_outcome outcome;
    enum rls_code overall;
    const struct rls_status *statuses; /* one per request descriptor */
    size_t nstatuses;
    const struct rls_header *headers; /* response_headers_to_add */
    size_t nheaders;
    const char *message; /* RLS_UNAVAILABLE: why */
    int degraded;        /* decided without the backend (failure_mode open/local) */
};

typedef void (*rls_reply_fn)(void *ctx, const struct rls_answer *a);

/*
 * Decides req on core against core->config. On a request that cannot be
 * decided (no domain, no descriptors, an empty entry key, too many
 * descriptors, a key over POLICY_KEY_MAX...) returns -1 with err set
 * (status 400 and a code: the gRPC front answers INVALID_ARGUMENT) and
 * never calls reply. Otherwise returns 0 and calls reply(ctx, answer)
 * exactly once, possibly before returning; *handle is then set for
 * rls_cancel, or to NULL when reply was already called.
 */
int rls_start(struct core *core, const struct rls_request *req, rls_reply_fn reply, void *ctx,
              struct rls_call **handle, struct request_error *err) RL_WUR;

/* Metrics: rls_start counts ratelimitd_rls_requests_total under req->front
 * (its own refusals as code="invalid", then the answer's code) and every
 * descriptor in ratelimitd_rls_descriptors_total; a front counts only the
 * requests it refuses before rls_start (a body it cannot decode), with
 * metrics_rls_request(..., METRICS_RLS_INVALID). */

/* The front no longer wants the answer (its stream was reset): reply will
 * not be called. */
void rls_cancel(struct rls_call *c);

/* The pure parts, exported for the unit tests. */

/* The check's key of a descriptor: esc(domain) "|" esc(k1) "=" esc(v1)
 * "|" ... where esc turns '%', '|', '=' and NUL into %25, %7C, %3D and %00,
 * so that two distinct descriptors never share a key. Writes at most
 * outlen bytes into out (not NUL-terminated) and returns the length, or -1
 * when the key would be longer than outlen. */
long rls_key(const char *domain, size_t domainlen, const struct descriptor_entry *entries, size_t n,
             char *out, size_t outlen) RL_WUR;

/* duration_until_reset from a tier's reset in microseconds: whole seconds,
 * rounded up (0.2 s is 1 s, 0 stays 0), as envoyproxy/ratelimit sends them. */
int64_t rls_whole_seconds(int64_t us);

/* current_limit for a `policy:` limit, from its binding tier t: the
 * smallest unit at least as long as the window, and the limit scaled to it,
 * rounded up (10 per 1s: 10 per SECOND; 100 per 10s: 600 per MINUTE); held
 * to UINT32_MAX, the field's type in Envoy's proto. */
void rls_tier_unit(const struct tier *t, enum rls_unit *unit, int64_t *requests_per_unit);

#endif
