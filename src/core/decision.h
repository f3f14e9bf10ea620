/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decision.h: the neutral types that travel between a front (HTTP/1.1,
 * forward-auth, gRPC), the decision core (check.c) and a backend (Redis,
 * memory). No front type and no backend type appears here.
 *
 *   front:   bytes -> struct check_request        (check_json.c decodes /check)
 *   core:    check_start(core, request) -> one struct verdict
 *   backend: decide(request, now) -> one struct tier_result per tier
 *   front:   struct verdict -> bytes               (response.c renders HTTP)
 *
 * Also owns the one pure rule every front shares: which tier "binds" (sets
 * the top-level figures and the X-RateLimit-* headers), decision_summarize.
 */
#ifndef RATELIMITD_DECISION_H
#define RATELIMITD_DECISION_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

#define REQUEST_MAX_CHECKS 64
#define REQUEST_MAX_COST 1000000000LL /* a report's cost is within +-this */

/* One (policy, key, cost) of a request. */
struct check_item {
    const struct policy *policy; /* points into the config snapshot */
    char *key;                   /* owned; may not contain NUL */
    size_t keylen;
    int64_t cost; /* costs of duplicate (policy, key) pairs are added */
    /* A policy made for this check alone (Envoy's per-request limit
     * override), which `policy` then points to; freed with the request.
     * NULL for every policy of the config snapshot. */
    struct policy *owned;
    /* Bit i: tier i's limits are a run-time override's (overrides.h),
     * set by check_start; file_override: policy is a variant of the policy
     * file's overrides (set by the admin API, which reports both). */
    uint16_t runtime_tiers;
    unsigned char file_override;
};

/* What a caller asks: every check is decided together, atomically. */
struct check_request {
    int dry_run;
    int use_deny_status; /* forward-auth: a denial answers the binding check's
                          * policy's deny_status, not 429 (response_status) */
    int inspect;         /* not counted as checks: the admin API looking (a dry run), or
                          * an Envoy request's second round (rls.c), whose checks the
                          * first round counted already */
    /* The random part of every lease the request takes (core/lease.h),
     * set by check_start when a check has a concurrency tier; "" if none.
     * LEASE_NONCE_LEN + 1 bytes (asserted in lease_id.h, which includes
     * this header). */
    char lease_nonce[23];
    int report; /* POST /report: every cost is charged with no decision (a cost < 0
                 * gives back), and every tier then reports what a check of cost 1
                 * would see; never a dry run */
    /* A local lease call instead of a check (core/local_lease.h), for a
     * request of one check whose every tier leases; never a dry run or a
     * report. LEASE_BLOCK_TAKE: decide the check's cost and, if allowed,
     * take up to block_units units in all (the reply's lease_granted);
     * LEASE_BLOCK_GIVE: give the check's cost back to every tier still in
     * the window of block_taken_us (a take's tier_result.now_us). */
    enum lease_block_op { LEASE_BLOCK_NONE, LEASE_BLOCK_TAKE, LEASE_BLOCK_GIVE } block_op;
    int64_t block_units;
    int64_t block_taken_us;
    size_t nchecks;
    struct check_item *checks; /* owned */
};

/* Frees what a request owns; safe on a zeroed or freed struct. */
void request_free(struct check_request *r);

/* How many tiers the request's checks have in all (the number of results). */
size_t request_tiers(const struct check_request *r);

/* The failure mode for the whole request when the backend cannot decide:
 * the strictest of its policies' (closed, then local, then open). */
enum failure_mode request_failure_mode(const struct check_request *r);

/* One tier's outcome, as a backend reports it (times in microseconds). */
struct tier_result {
    int allowed;
    int64_t limit;
    int64_t remaining;
    int64_t reset_us;
    int64_t retry_us; /* -1: no finite wait */
    int64_t delay_us; /* leaky_bucket only */
    int cost_exceeds_limit;
    int64_t now_us; /* the decider's clock (a concurrency lease expires at
                     * now_us + lease_timeout); 0: unknown */
};

/*
 * The request-level figures of a decision. The binding tier: when denied,
 * the denying tier with the longest wait (no finite wait counts as
 * longest); when allowed, the tier with the fewest remaining, ties broken by
 * the longest reset. Tiers of shadow checks never bind unless the request
 * has nothing else, since a shadow policy must not change what callers see.
 */
struct decision_summary {
    int allowed;                       /* every tier of every non-shadow check allowed */
    uint64_t check_allowed;            /* bit i: every tier of check i allowed (shadow or
                                        * not); read with decision_check_allowed */
    int shadow_denied;                 /* allowed, but a shadow check would have denied */
    const struct tier_result *binding; /* points into the results; never NULL */
    int64_t retry_us;                  /* 0 when allowed; the binding tier's wait (-1: never) */
    int any_leaky;                     /* a leaky_bucket tier is involved: report delay */
    int64_t delay_us;                  /* longest delay of an allowed leaky_bucket tier */
};

/* A request has at most 64 checks: one bit each in check_allowed. */
_Static_assert(REQUEST_MAX_CHECKS <= 64, "check_allowed has one bit per check");

/* Pure: fills *out from results (one per tier, check order then tier
 * order). The request has at least one check with at least one tier. */
void decision_summarize(const struct check_request *req, const struct tier_result *results,
                        struct decision_summary *out);

/* Pure: the decision alone, the first step of decision_summarize: sets
 * allowed, check_allowed and shadow_denied from each result's `allowed`
 * (nothing else of a result is read) and zeroes the rest of *out (binding
 * NULL). For a decider that needs the per-check answer before it has the
 * figures (limiter_local.c), so that the rule is written once, here. */
void decision_summarize_allowed(const struct check_request *req, const struct tier_result *results,
                                struct decision_summary *out);

/* 1 if every tier of check i (< req->nchecks) allowed, else 0. */
static inline int decision_check_allowed(const struct decision_summary *sum, size_t i)
{
    return (int)((sum->check_allowed >> i) & 1);
}

/* The check that tier result r (one of results) belongs to: the policy whose
 * per-policy answer settings (headers, deny_status) an answer follows. */
const struct check_item *decision_check_of(const struct check_request *req,
                                           const struct tier_result *results,
                                           const struct tier_result *r);

/* The tier that binds when the backend could not decide and nothing is
 * known of any key's state (a failure_mode answer): of the tiers of the
 * non-shadow checks (of every check if all are shadow), the one with the
 * smallest limit per window, the first of equals in request order. Its
 * configured figures are what such an answer can still tell a client.
 * Sets *tier and returns the check it belongs to. Pure. */
const struct check_item *decision_unknown_binding(const struct check_request *req,
                                                  const struct tier **tier);

enum verdict_kind {
    VERDICT_DECIDED,     /* the backend decided (or the deny cache, as it would) */
    VERDICT_LOCAL,       /* the backend could not; decided in this process's
                          * memory per failure_mode local (degraded) */
    VERDICT_UNAVAILABLE, /* not decided: failure_mode open (allowed, degraded)
                          * or closed (denied) per request_failure_mode */
    VERDICT_OVERLOADED,  /* max_inflight reached with overload: reject */
};

/* The one answer to a check. Everything it points to is valid only during
 * the reply callback. */
struct verdict {
    enum verdict_kind kind;
    const struct check_request *req;
    const struct tier_result *results; /* DECIDED, LOCAL: one per tier */
    struct decision_summary sum;       /* DECIDED, LOCAL */
    const char *why;                   /* UNAVAILABLE: a short reason */
    int cached;                        /* DECIDED by the local deny cache */
    uint64_t taken; /* DECIDED and denied: checks whose cost was taken all the same
                     * (bit i: check i; backend_reply.taken), else 0 */
};

/* What a verdict means for the caller, whatever the front: each front maps
 * it to its own answer (front/http/response.c: 200, 429 or the policy's
 * deny_status, 503). The metrics and the access log classify by it. */
enum verdict_outcome {
    OUTCOME_ALLOWED,     /* decided allowed, or failure_mode open (degraded) */
    OUTCOME_DENIED,      /* decided denied (by the binding check's policy) */
    OUTCOME_UNAVAILABLE, /* failure_mode closed, or overloaded */
};

/* Pure: the outcome of v. */
enum verdict_outcome verdict_outcome(const struct verdict *v);

#endif
