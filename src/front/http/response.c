/* SPDX-License-Identifier: Apache-2.0 */
/*
 * response.c: every HTTP answer, rendered into a struct buf (response.h).
 *
 * The body is written first, where the response starts in the buffer; then
 * the head (which needs the body's length) is measured, the body moved up
 * by that much and the head written in front of it. Bodies are a few
 * hundred bytes, so the move costs less than a second buffer would.
 *
 * The rate-limit headers of a verdict come from rate_headers.c, shared with
 * Envoy's answers (rls.c).
 */
#include <stdlib.h>
#include <string.h>

#include "core/lease_id.h"
#include "core/rate_headers.h"
#include "core/rls.h"
#include "front/http/response.h"
#include "lib/json_out.h"
#include "lib/util.h"

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Payload Too Large";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

/* Appends the head of a response to out, with plain copies: snprintf's
 * format parsing cost more than the rest of the answer. */
static void write_head(struct buf *out, int status, const char *content_type,
                       const struct rate_headers *hs, unsigned flags, size_t body_len)
{
    buf_append_lit(out, "HTTP/1.1 ");
    buf_append_int(out, status);
    buf_append_char(out, ' ');
    buf_append_str(out, reason_phrase(status));
    buf_append_lit(out, "\r\nContent-Type: ");
    buf_append_str(out, content_type ? content_type : "application/json");
    buf_append_lit(out, "\r\nCache-Control: no-store\r\n");
    for (size_t i = 0; hs && i < hs->n; i++) {
        buf_append_str(out, hs->h[i].name);
        buf_append_lit(out, ": ");
        buf_append(out, hs->h[i].value, hs->h[i].len);
        buf_append_lit(out, "\r\n");
    }
    if (flags & RESPONSE_CLOSE)
        buf_append_lit(out, "Connection: close\r\n");
    else if (flags & RESPONSE_KEEP_ALIVE)
        buf_append_lit(out, "Connection: keep-alive\r\n");
    buf_append_lit(out, "Content-Length: ");
    buf_append_int(out, (long long)body_len);
    buf_append_lit(out, "\r\n\r\n");
}

/* Ends the response whose body starts at out->data + start: appends the
 * final newline, then puts the head in front of the body. The head is
 * written once, after the body, and the body copied after it again, so
 * that one move puts both in place: cheaper than measuring the head
 * first, which cost a second pass over it (bench/instructions.py). */
static void finish(struct buf *out, size_t start, int status, const char *content_type,
                   const struct rate_headers *hs, unsigned flags)
{
    buf_append_char(out, '\n');
    size_t body_len = out->len - start;
    write_head(out, status, content_type, hs, flags, body_len);
    size_t n = out->len - start - body_len;
    buf_reserve(out, body_len);
    memcpy(out->data + out->len, out->data + start, body_len);
    memmove(out->data + start, out->data + start + body_len, n + body_len);
    out->len = start + n + ((flags & RESPONSE_HEAD) ? 0 : body_len);
}

static void ms_or_null(struct json_out *j, int64_t us)
{
    if (us < 0)
        json_out_null(j);
    else
        json_out_int(j, rate_headers_ms(us));
}

void response_tier_json(struct json_out *j, const struct tier *t, const struct tier_result *now,
                        const struct tier_result *next, enum response_tier_form form,
                        const char *limit_source)
{
    json_out_begin(j, '{');
    json_out_lkey(j, "name");
    json_out_cstr(j, t->name);
    json_out_lkey(j, "algorithm");
    json_out_cstr(j, policy_algorithm_name(t->algorithm));
    if (form == RESPONSE_TIER_CHECK) {
        json_out_lkey(j, "allowed");
        json_out_bool(j, next->allowed);
    }
    json_out_lkey(j, "limit");
    json_out_int(j, now->limit);
    if (limit_source) {
        json_out_lkey(j, "limit_source");
        json_out_cstr(j, limit_source);
    }
    json_out_lkey(j, "remaining");
    json_out_int(j, now->remaining);
    json_out_lkey(j, "reset_ms");
    json_out_int(j, rate_headers_ms(now->reset_us));
    if (form == RESPONSE_TIER_INSPECT) {
        json_out_lkey(j, "allowed");
        json_out_bool(j, next->allowed);
    }
    json_out_lkey(j, "retry_after_ms");
    ms_or_null(j, next->allowed ? 0 : next->retry_us);
    if (policy_algorithm_has_delay(t->algorithm)) {
        json_out_lkey(j, "delay_ms");
        json_out_int(j, rate_headers_ms(next->delay_us));
    }
    if (form == RESPONSE_TIER_CHECK && next->cost_exceeds_limit) {
        json_out_lkey(j, "reason");
        json_out_cstr(j, "cost_exceeds_limit");
    }
    json_out_end(j, '}');
}

/* "policy", "key" of one check. */
static void check_names(struct json_out *j, const struct check_item *c)
{
    json_out_lkey(j, "policy");
    json_out_cstr(j, c->policy->name);
    json_out_lkey(j, "key");
    json_out_str(j, c->key, c->keylen);
}

static void checks_json(struct json_out *j, const struct check_request *req,
                        const struct tier_result *results, const struct decision_summary *sum)
{
    const struct tier_result *r = results;
    json_out_lkey(j, "checks");
    json_out_begin(j, '[');
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        const struct policy *p = c->policy;
        int check_allowed = decision_check_allowed(sum, i);
        json_out_begin(j, '{');
        check_names(j, c);
        json_out_lkey(j, "allowed");
        json_out_bool(j, check_allowed || p->shadow);
        if (p->shadow && !check_allowed) {
            json_out_lkey(j, "shadow_denied");
            json_out_bool(j, 1);
        }
        json_out_lkey(j, "tiers");
        json_out_begin(j, '[');
        for (size_t t = 0; t < p->ntiers; t++, r++)
            response_tier_json(j, &p->tiers[t], r, r, RESPONSE_TIER_CHECK, NULL);
        json_out_end(j, ']');
        json_out_end(j, '}');
    }
    json_out_end(j, ']');
}

/* The leases the answer hands out (core/lease.h): "leases" in the body,
 * and their ids, comma-separated, in hdr (NUL-terminated; empty if none). */
static void leases_json(struct json_out *j, const struct verdict *v, int local, struct buf *hdr)
{
    const struct tier_result *r = v->results;
    char id[LEASE_ID_MAX + 1];
    int any = 0;
    for (size_t i = 0; i < v->req->nchecks; i++) {
        const struct check_item *c = &v->req->checks[i];
        int taken = lease_taken(v, i);
        for (size_t t = 0; t < c->policy->ntiers; t++, r++) {
            const struct tier *tier = &c->policy->tiers[t];
            if (!taken || tier->algorithm != ALG_CONCURRENCY)
                continue;
            int n = lease_id_encode(local, c->policy->name, tier->name, c->key, c->keylen, c->cost,
                                    v->req->lease_nonce, id, sizeof id);
            if (n < 0)
                continue; /* LEASE_ID_MAX bounds every valid id */
            if (!any) {
                json_out_lkey(j, "leases");
                json_out_begin(j, '[');
            }
            json_out_begin(j, '{');
            check_names(j, c);
            json_out_lkey(j, "tier");
            json_out_cstr(j, tier->name);
            json_out_lkey(j, "id");
            json_out_str(j, id, (size_t)n);
            json_out_lkey(j, "expires_ms");
            json_out_int(j, (r->now_us + tier->lease_timeout_us) / 1000);
            json_out_end(j, '}');
            if (any)
                buf_append_str(hdr, ", ");
            buf_append(hdr, id, (size_t)n);
            any = 1;
        }
    }
    if (any)
        json_out_end(j, ']');
    buf_append_char(hdr, '\0');
}

static int decision(struct buf *out, const struct verdict *v, int local, unsigned flags)
{
    const struct decision_summary *sum = &v->sum;
    const struct tier_result *bind = sum->binding;
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_lkey(&j, "allowed");
    json_out_bool(&j, sum->allowed);
    json_out_lkey(&j, "limit");
    json_out_int(&j, bind->limit);
    json_out_lkey(&j, "remaining");
    json_out_int(&j, bind->remaining);
    json_out_lkey(&j, "reset_ms");
    json_out_int(&j, rate_headers_ms(bind->reset_us));
    json_out_lkey(&j, "retry_after_ms");
    ms_or_null(&j, sum->retry_us);
    if (sum->any_leaky) {
        json_out_lkey(&j, "delay_ms");
        json_out_int(&j, rate_headers_ms(sum->delay_us));
    }
    if (sum->shadow_denied) {
        json_out_lkey(&j, "shadow_denied");
        json_out_bool(&j, 1);
    }
    if (v->req->dry_run) {
        json_out_lkey(&j, "dry_run");
        json_out_bool(&j, 1);
    }
    if (v->req->report) {
        json_out_lkey(&j, "reported");
        json_out_bool(&j, 1);
    }
    if (local) {
        json_out_lkey(&j, "degraded");
        json_out_bool(&j, 1);
        json_out_lkey(&j, "local");
        json_out_bool(&j, 1);
    }
    checks_json(&j, v->req, v->results, sum);
    struct buf lease_ids = {0};
    if (v->req->lease_nonce[0])
        leases_json(&j, v, local, &lease_ids);
    json_out_end(&j, '}');

    struct rate_headers hs;
    rate_headers_init(&hs);
    rate_headers_verdict(&hs, v);
    if (lease_ids.len > 1)
        rate_headers_add_ref(&hs, "X-RateLimit-Lease", lease_ids.data);
    int status = response_status(v);
    finish(out, start, status, NULL, &hs, flags);
    buf_free(&lease_ids);
    return status;
}

static int unavailable(struct buf *out, const struct verdict *v, unsigned flags)
{
    static const char *const mode_names[] = {
        [FAILURE_OPEN] = "open", [FAILURE_CLOSED] = "closed", [FAILURE_LOCAL] = "local"};
    const struct check_request *req = v->req;
    int closed = request_failure_mode(req) == FAILURE_CLOSED;
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_lkey(&j, "allowed");
    json_out_bool(&j, !closed);
    if (closed) {
        json_out_lkey(&j, "error");
        json_out_cstr(&j, request_code_name(RC_BACKEND_UNAVAILABLE));
    } else {
        json_out_lkey(&j, "degraded");
        json_out_bool(&j, 1);
    }
    if (req->report) {
        /* open: answered, not charged; closed: 503, for the caller to
         * send again */
        json_out_lkey(&j, "reported");
        json_out_bool(&j, 0);
    }
    json_out_lkey(&j, "message");
    json_out_cstr(&j, v->why ? v->why : "the backend could not decide");
    json_out_lkey(&j, "checks");
    json_out_begin(&j, '[');
    for (size_t i = 0; i < req->nchecks; i++) {
        json_out_begin(&j, '{');
        check_names(&j, &req->checks[i]);
        json_out_lkey(&j, "failure_mode");
        json_out_cstr(&j, mode_names[req->checks[i].policy->failure_mode]);
        json_out_end(&j, '}');
    }
    json_out_end(&j, ']');
    json_out_end(&j, '}');
    struct rate_headers hs;
    rate_headers_init(&hs);
    rate_headers_verdict(&hs, v);
    finish(out, start, closed ? 503 : 200, NULL, &hs, flags);
    return closed ? 503 : 200;
}

/* {"error": code, "message": message} with code's status and the headers
 * in hs. */
static void error_answer(struct buf *out, enum request_code code, const char *message,
                         const struct rate_headers *hs, unsigned flags)
{
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_lkey(&j, "error");
    json_out_cstr(&j, request_code_name(code));
    json_out_lkey(&j, "message");
    json_out_cstr(&j, message);
    json_out_end(&j, '}');
    finish(out, start, request_code_status(code), NULL, hs, flags);
}

int response_status(const struct verdict *v)
{
    /* A report always succeeds once charged: its figures say what now
     * applies, a denial of later checks included. */
    if (v->req->report && (v->kind == VERDICT_DECIDED || v->kind == VERDICT_LOCAL))
        return 200;
    switch (verdict_outcome(v)) {
    case OUTCOME_ALLOWED:
        return 200;
    case OUTCOME_DENIED:
        if (v->req->use_deny_status)
            return (int)decision_check_of(v->req, v->results, v->sum.binding)->policy->deny_status;
        return 429;
    case OUTCOME_UNAVAILABLE:
        break;
    }
    return 503;
}

int response_verdict(struct buf *out, const struct verdict *v, unsigned flags)
{
    struct rate_headers hs;
    switch (v->kind) {
    case VERDICT_DECIDED:
        return decision(out, v, 0, flags);
    case VERDICT_LOCAL:
        return decision(out, v, 1, flags);
    case VERDICT_UNAVAILABLE:
        return unavailable(out, v, flags);
    case VERDICT_OVERLOADED:
        break;
    }
    rate_headers_init(&hs);
    rate_headers_verdict(&hs, v);
    error_answer(out, RC_OVERLOADED, "too many checks in flight", &hs, flags);
    return 503;
}

/* A protobuf Duration as protojson writes it: seconds with 0, 3, 6 or 9
 * decimals ("42s", "1.500s"). */
/* protojson's Duration of whole seconds: "42s". */
static void json_duration(struct json_out *j, int64_t s)
{
    char text[UTIL_INT_CHARS + 1];
    size_t n = util_format_int(text, s < 0 ? 0 : s);
    text[n++] = 's';
    json_out_str(j, text, n);
}

static const char *rls_code_name(enum rls_code c)
{
    return c == RLS_CODE_OK ? "OK" : c == RLS_CODE_OVER_LIMIT ? "OVER_LIMIT" : "UNKNOWN";
}

static void rls_status_json(struct json_out *j, const struct rls_status *st)
{
    json_out_begin(j, '{');
    if (st->code != RLS_CODE_UNKNOWN) {
        json_out_lkey(j, "code");
        json_out_cstr(j, rls_code_name(st->code));
    }
    if (st->has_limit) {
        json_out_lkey(j, "currentLimit");
        json_out_begin(j, '{');
        if (st->requests_per_unit) {
            json_out_lkey(j, "requestsPerUnit");
            json_out_int(j, st->requests_per_unit);
        }
        if (st->unit != RLS_UNIT_UNKNOWN) {
            json_out_lkey(j, "unit");
            json_out_cstr(j, rls_unit_name(st->unit));
        }
        if (st->limit_name && *st->limit_name) {
            json_out_lkey(j, "name");
            json_out_cstr(j, st->limit_name);
        }
        json_out_end(j, '}');
    }
    if (st->limit_remaining) {
        json_out_lkey(j, "limitRemaining");
        json_out_int(j, st->limit_remaining);
    }
    if (st->has_limit) {
        json_out_lkey(j, "durationUntilReset");
        json_duration(j, st->until_reset_s);
    }
    json_out_end(j, '}');
}

int response_rls(struct buf *out, const struct rls_answer *a, unsigned flags)
{
    if (a->outcome == RLS_UNAVAILABLE) {
        response_error(out, RC_BACKEND_UNAVAILABLE, a->message, "Retry-After", "1", flags);
        return 503;
    }
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    if (a->overall != RLS_CODE_UNKNOWN) {
        json_out_lkey(&j, "overallCode");
        json_out_cstr(&j, rls_code_name(a->overall));
    }
    if (a->nstatuses) {
        json_out_lkey(&j, "statuses");
        json_out_begin(&j, '[');
        for (size_t i = 0; i < a->nstatuses; i++)
            rls_status_json(&j, &a->statuses[i]);
        json_out_end(&j, ']');
    }
    if (a->nheaders) {
        json_out_lkey(&j, "responseHeadersToAdd");
        json_out_begin(&j, '[');
        for (size_t i = 0; i < a->nheaders; i++) {
            json_out_begin(&j, '{');
            json_out_lkey(&j, "key");
            json_out_cstr(&j, a->headers[i].name);
            json_out_lkey(&j, "value");
            json_out_str(&j, a->headers[i].value, a->headers[i].len);
            json_out_end(&j, '}');
        }
        json_out_end(&j, ']');
    }
    json_out_end(&j, '}');
    int status = a->overall == RLS_CODE_OVER_LIMIT ? 429 : 200;
    finish(out, start, status, NULL, NULL, flags);
    return status;
}

void response_auth_skipped(struct buf *out, const char *policy, const char *missing, unsigned flags)
{
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_lkey(&j, "allowed");
    json_out_bool(&j, 1);
    json_out_lkey(&j, "skipped");
    json_out_bool(&j, 1);
    json_out_lkey(&j, "policy");
    json_out_cstr(&j, policy);
    json_out_lkey(&j, "missing");
    json_out_cstr(&j, missing);
    json_out_end(&j, '}');
    finish(out, start, 200, NULL, NULL, flags);
}

void response_error(struct buf *out, enum request_code code, const char *message, const char *hname,
                    const char *hvalue, unsigned flags)
{
    struct rate_headers hs;
    rate_headers_init(&hs);
    if (hname)
        rate_headers_add_ref(&hs, hname, hvalue);
    error_answer(out, code, message, &hs, flags);
}

void response_body_headers(struct buf *out, int status, const char *content_type,
                           const struct rate_headers *hs, const char *body, size_t len,
                           unsigned flags)
{
    size_t start = out->len;
    buf_append(out, body, len);
    /* finish adds the one final newline: drop the body's own. */
    if (len && body[len - 1] == '\n')
        out->len--;
    finish(out, start, status, content_type, hs, flags);
}

void response_body(struct buf *out, int status, const char *content_type, const char *body,
                   size_t len, unsigned flags)
{
    response_body_headers(out, status, content_type, NULL, body, len, flags);
}

void response_continue(struct buf *out)
{
    buf_append_str(out, "HTTP/1.1 100 Continue\r\n\r\n");
}
