/*
 * response.c: every HTTP answer, rendered into a struct buf (response.h).
 *
 * The body is written first, where the response starts in the buffer; then
 * the head (which needs the body's length) is measured, the body moved up
 * by that much and the head written in front of it. Bodies are a few
 * hundred bytes, so the move costs less than a second buffer would.
 *
 * The rate-limit headers follow the mode of the binding check's policy
 * (policy.h enum header_mode): X-RateLimit-*, the IETF RateLimit and
 * RateLimit-Policy structured fields, both or none; Retry-After always.
 */
#include <stdlib.h>
#include <string.h>

#include "json_out.h"
#include "response.h"
#include "util.h"

/*
 * The answer's own headers, between Cache-Control and Connection. A value
 * is either a caller's string (pointed to, not copied) or written into
 * `space`, whose size is the sum of the worst cases of every value one
 * answer can carry, so no valid value is ever cut:
 *   X-RateLimit-Limit, -Remaining, -Reset, -Delay-Ms, Retry-After:
 *     one integer each;
 *   RateLimit-Policy: one member per tier (POLICY_MAX_TIERS), ", " apart;
 *   RateLimit: one member.
 * A member is "<policy>/<tier>" quoted with two integer parameters.
 */
#define MAX_HEADERS 8
#define SF_INT_MAX 999999999999999LL /* RFC 9651 sf-integer: at most 15 digits */
#define SF_INT_CHARS 15
#define SF_MEMBER_MAX (2 + POLICY_NAME_MAX + 1 + POLICY_NAME_MAX + 2 * (3 + SF_INT_CHARS))
#define HEADER_SPACE (5 * UTIL_INT_CHARS + (POLICY_MAX_TIERS + 1) * (SF_MEMBER_MAX + 2))

struct headers {
    size_t n;
    struct {
        const char *name;
        const char *value; /* into space, or a caller's string */
        size_t len;
    } h[MAX_HEADERS];
    size_t used;     /* bytes of space taken */
    size_t value_at; /* where the value being written starts */
    char space[HEADER_SPACE];
};

static void headers_init(struct headers *hs)
{
    hs->n = hs->used = hs->value_at = 0;
}

/* Appends to the value being written. Running out of space would mean the
 * bound above is wrong: a broken invariant, not bad input. */
static void value_put(struct headers *hs, const char *s, size_t len)
{
    if (len > HEADER_SPACE - hs->used)
        abort();
    memcpy(hs->space + hs->used, s, len);
    hs->used += len;
}

static void value_put_str(struct headers *hs, const char *s)
{
    value_put(hs, s, strlen(s));
}

static void value_put_int(struct headers *hs, int64_t v)
{
    char s[UTIL_INT_CHARS];
    value_put(hs, s, util_format_int(s, v));
}

/* Ends the value being written as the value of header name. */
static void value_end(struct headers *hs, const char *name)
{
    if (hs->n == MAX_HEADERS)
        abort(); /* MAX_HEADERS counts every header an answer can carry */
    hs->h[hs->n].name = name;
    hs->h[hs->n].value = hs->space + hs->value_at;
    hs->h[hs->n].len = hs->used - hs->value_at;
    hs->n++;
    hs->value_at = hs->used;
}

static void add_header_int(struct headers *hs, const char *name, int64_t v)
{
    value_put_int(hs, v);
    value_end(hs, name);
}

/* A header whose value is the caller's, pointed to rather than copied: it
 * is read only while the answer is rendered, within the caller's call. */
static void add_header_ref(struct headers *hs, const char *name, const char *value)
{
    if (hs->n == MAX_HEADERS)
        abort(); /* as in value_end */
    hs->h[hs->n].name = name;
    hs->h[hs->n].value = value;
    hs->h[hs->n].len = strlen(value);
    hs->n++;
}

/* The head is assembled with plain copies: snprintf's format parsing cost
 * more than the rest of the answer. With dst NULL, only counts. */
struct head {
    char *dst;
    size_t n;
};

static void put(struct head *h, const char *s, size_t len)
{
    if (h->dst)
        memcpy(h->dst + h->n, s, len);
    h->n += len;
}

static void put_str(struct head *h, const char *s)
{
    put(h, s, strlen(s));
}

static void put_int(struct head *h, long long v)
{
    char s[UTIL_INT_CHARS];
    put(h, s, util_format_int(s, v));
}

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
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Error";
    }
}

/* Writes (or, with dst NULL, measures) the head of a response. */
static size_t write_head(char *dst, int status, const char *content_type, const struct headers *hs,
                         unsigned flags, size_t body_len)
{
    struct head h = {dst, 0};
    put_str(&h, "HTTP/1.1 ");
    put_int(&h, status);
    put(&h, " ", 1);
    put_str(&h, reason_phrase(status));
    put_str(&h, "\r\nContent-Type: ");
    put_str(&h, content_type ? content_type : "application/json");
    put_str(&h, "\r\nCache-Control: no-store\r\n");
    for (size_t i = 0; hs && i < hs->n; i++) {
        put_str(&h, hs->h[i].name);
        put(&h, ": ", 2);
        put(&h, hs->h[i].value, hs->h[i].len);
        put(&h, "\r\n", 2);
    }
    if (flags & RESPONSE_CLOSE)
        put_str(&h, "Connection: close\r\n");
    else if (flags & RESPONSE_KEEP_ALIVE)
        put_str(&h, "Connection: keep-alive\r\n");
    put_str(&h, "Content-Length: ");
    put_int(&h, (long long)body_len);
    put(&h, "\r\n\r\n", 4);
    return h.n;
}

/* Ends the response whose body starts at out->data + start: appends the
 * final newline, then puts the head in front of the body. The head is
 * measured first, so it is written straight into place whatever its size. */
static void finish(struct buf *out, size_t start, int status, const char *content_type,
                   const struct headers *hs, unsigned flags)
{
    buf_append_char(out, '\n');
    size_t body_len = out->len - start;
    size_t n = write_head(NULL, status, content_type, hs, flags, body_len);
    buf_reserve(out, n);
    memmove(out->data + start + n, out->data + start, body_len);
    write_head(out->data + start, status, content_type, hs, flags, body_len);
    out->len = start + n + ((flags & RESPONSE_HEAD) ? 0 : body_len);
}

static int64_t us_to_ms(int64_t us)
{
    return us <= 0 ? 0 : util_ceil_div(us, 1000);
}

static void ms_or_null(struct json_out *j, int64_t us)
{
    if (us < 0)
        json_out_null(j);
    else
        json_out_int(j, us_to_ms(us));
}

static void tier_json(struct json_out *j, const struct tier *t, const struct tier_result *r)
{
    json_out_begin(j, '{');
    json_out_key(j, "name");
    json_out_cstr(j, t->name);
    json_out_key(j, "algorithm");
    json_out_cstr(j, policy_algorithm_name(t->algorithm));
    json_out_key(j, "allowed");
    json_out_bool(j, r->allowed);
    json_out_key(j, "limit");
    json_out_int(j, r->limit);
    json_out_key(j, "remaining");
    json_out_int(j, r->remaining);
    json_out_key(j, "reset_ms");
    json_out_int(j, us_to_ms(r->reset_us));
    json_out_key(j, "retry_after_ms");
    ms_or_null(j, r->allowed ? 0 : r->retry_us);
    if (policy_algorithm_has_delay(t->algorithm)) {
        json_out_key(j, "delay_ms");
        json_out_int(j, us_to_ms(r->delay_us));
    }
    if (r->cost_exceeds_limit) {
        json_out_key(j, "reason");
        json_out_cstr(j, "cost_exceeds_limit");
    }
    json_out_end(j, '}');
}

/* "policy", "key" of one check. */
static void check_names(struct json_out *j, const struct check_item *c)
{
    json_out_key(j, "policy");
    json_out_cstr(j, c->policy->name);
    json_out_key(j, "key");
    json_out_str(j, c->key, c->keylen);
}

static void checks_json(struct json_out *j, const struct check_request *req,
                        const struct tier_result *results)
{
    const struct tier_result *r = results;
    json_out_key(j, "checks");
    json_out_begin(j, '[');
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        const struct policy *p = c->policy;
        int check_allowed = 1;
        for (size_t t = 0; t < p->ntiers; t++)
            check_allowed &= r[t].allowed;
        json_out_begin(j, '{');
        check_names(j, c);
        json_out_key(j, "allowed");
        json_out_bool(j, check_allowed || p->shadow);
        if (p->shadow && !check_allowed) {
            json_out_key(j, "shadow_denied");
            json_out_bool(j, 1);
        }
        json_out_key(j, "tiers");
        json_out_begin(j, '[');
        for (size_t t = 0; t < p->ntiers; t++, r++)
            tier_json(j, &p->tiers[t], r);
        json_out_end(j, ']');
        json_out_end(j, '}');
    }
    json_out_end(j, ']');
}

/* Seconds, rounded up, for headers: the same rounding as the JSON's
 * milliseconds, then up again (1.2 s is 2, 0 stays 0). */
static int64_t us_to_s(int64_t us)
{
    return util_ceil_div(us_to_ms(us), 1000);
}

static int wants_x(enum header_mode m)
{
    return m == HEADERS_X_RATELIMIT || m == HEADERS_BOTH;
}

static int wants_ietf(enum header_mode m)
{
    return m == HEADERS_IETF || m == HEADERS_BOTH;
}

/* ;<key>=<v> with v held to the sf-integer range (valid tiers never reach
 * its top: a limit times its window in microseconds stays below 2^53). */
static void sf_param(struct headers *hs, const char *key, int64_t v)
{
    value_put(hs, ";", 1);
    value_put_str(hs, key);
    value_put(hs, "=", 1);
    value_put_int(hs, v < 0 ? 0 : v > SF_INT_MAX ? SF_INT_MAX : v);
}

/* The sf-string naming a tier: "<policy>" for a one-tier policy, else
 * "<policy>/<tier>". Names are [A-Za-z0-9_.-], so nothing needs escaping
 * and '/' cannot be part of either name. */
static void sf_tier_name(struct headers *hs, const struct policy *p, const struct tier *t)
{
    value_put(hs, "\"", 1);
    value_put_str(hs, p->name);
    if (p->ntiers > 1) {
        value_put(hs, "/", 1);
        value_put_str(hs, t->name);
    }
    value_put(hs, "\"", 1);
}

/* RateLimit-Policy: every tier of p, "<name>";q=<limit>;w=<window s>. q is
 * the configured limit per window for every algorithm (for the bucket
 * algorithms the refill per window, not the burst), w the window rounded up
 * to whole seconds (so at least 1). Known from the config alone. */
static void ietf_policy(struct headers *hs, const struct policy *p)
{
    for (size_t i = 0; i < p->ntiers; i++) {
        if (i > 0)
            value_put(hs, ", ", 2);
        sf_tier_name(hs, p, &p->tiers[i]);
        sf_param(hs, "q", p->tiers[i].limit);
        sf_param(hs, "w", util_ceil_div(p->tiers[i].window_us, 1000000));
    }
    value_end(hs, "RateLimit-Policy");
}

/* RateLimit: the binding tier, "<name>";r=<remaining>;t=<seconds>. */
static void ietf_limit(struct headers *hs, const struct policy *p, const struct tier *t,
                       int64_t remaining, int64_t reset_s)
{
    sf_tier_name(hs, p, t);
    sf_param(hs, "r", remaining);
    sf_param(hs, "t", reset_s);
    value_end(hs, "RateLimit");
}

/* The tier (config) of result r, one of results. */
static const struct tier *tier_of(const struct check_request *req,
                                  const struct tier_result *results, const struct tier_result *r,
                                  const struct check_item *c)
{
    size_t idx = (size_t)(r - results);
    for (const struct check_item *i = req->checks; i < c; i++)
        idx -= i->policy->ntiers;
    return &c->policy->tiers[idx];
}

/*
 * The headers of a decided (or local) answer, in the binding check's
 * policy's mode. Retry-After is sent in every mode (it is HTTP's own field).
 * t of RateLimit is the Retry-After value when denied with a finite wait,
 * so both name the same moment (as the draft asks), else the binding
 * tier's reset, as X-RateLimit-Reset.
 */
static void decision_headers(struct headers *hs, const struct verdict *v)
{
    const struct decision_summary *sum = &v->sum;
    const struct tier_result *bind = sum->binding;
    const struct check_item *c = decision_check_of(v->req, v->results, bind);
    enum header_mode mode = c->policy->headers;
    int64_t reset_s = us_to_s(bind->reset_us);
    int64_t retry_s = 0;
    if (!sum->allowed && sum->retry_us >= 0) {
        retry_s = us_to_s(sum->retry_us);
        if (retry_s < 1)
            retry_s = 1;
    }
    if (wants_x(mode)) {
        add_header_int(hs, "X-RateLimit-Limit", bind->limit);
        add_header_int(hs, "X-RateLimit-Remaining", bind->remaining);
        add_header_int(hs, "X-RateLimit-Reset", reset_s);
        if (sum->any_leaky && us_to_ms(sum->delay_us) > 0)
            add_header_int(hs, "X-RateLimit-Delay-Ms", us_to_ms(sum->delay_us));
    }
    if (retry_s > 0)
        add_header_int(hs, "Retry-After", retry_s);
    if (wants_ietf(mode)) {
        ietf_policy(hs, c->policy);
        ietf_limit(hs, c->policy, tier_of(v->req, v->results, bind, c), bind->remaining,
                   retry_s > 0 ? retry_s : reset_s);
    }
}

/*
 * The headers of an answer given without any state (failure_mode open or
 * closed, overloaded): what the config alone tells, for the tier that
 * would bind when nothing is known (decision_unknown_binding): its
 * capacity as X-RateLimit-Limit (what `limit` means in decided answers),
 * and its policy's RateLimit-Policy. No Remaining, Reset or RateLimit:
 * they would be guesses. Retry-After: 1 when the request is refused.
 */
static void config_headers(struct headers *hs, const struct check_request *req, int refused)
{
    const struct tier *t;
    const struct check_item *c = decision_unknown_binding(req, &t);
    enum header_mode mode = c->policy->headers;
    if (wants_x(mode))
        add_header_int(hs, "X-RateLimit-Limit", policy_tier_capacity(t));
    if (refused)
        add_header_ref(hs, "Retry-After", "1");
    if (wants_ietf(mode))
        ietf_policy(hs, c->policy);
}

static int decision(struct buf *out, const struct verdict *v, int local, unsigned flags)
{
    const struct decision_summary *sum = &v->sum;
    const struct tier_result *bind = sum->binding;
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_key(&j, "allowed");
    json_out_bool(&j, sum->allowed);
    json_out_key(&j, "limit");
    json_out_int(&j, bind->limit);
    json_out_key(&j, "remaining");
    json_out_int(&j, bind->remaining);
    json_out_key(&j, "reset_ms");
    json_out_int(&j, us_to_ms(bind->reset_us));
    json_out_key(&j, "retry_after_ms");
    ms_or_null(&j, sum->retry_us);
    if (sum->any_leaky) {
        json_out_key(&j, "delay_ms");
        json_out_int(&j, us_to_ms(sum->delay_us));
    }
    if (sum->shadow_denied) {
        json_out_key(&j, "shadow_denied");
        json_out_bool(&j, 1);
    }
    if (v->req->dry_run) {
        json_out_key(&j, "dry_run");
        json_out_bool(&j, 1);
    }
    if (local) {
        json_out_key(&j, "degraded");
        json_out_bool(&j, 1);
        json_out_key(&j, "local");
        json_out_bool(&j, 1);
    }
    checks_json(&j, v->req, v->results);
    json_out_end(&j, '}');

    struct headers hs;
    headers_init(&hs);
    decision_headers(&hs, v);
    int status = verdict_status(v);
    finish(out, start, status, NULL, &hs, flags);
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
    json_out_key(&j, "allowed");
    json_out_bool(&j, !closed);
    if (closed) {
        json_out_key(&j, "error");
        json_out_cstr(&j, "backend_unavailable");
    } else {
        json_out_key(&j, "degraded");
        json_out_bool(&j, 1);
    }
    json_out_key(&j, "message");
    json_out_cstr(&j, v->why ? v->why : "the backend could not decide");
    json_out_key(&j, "checks");
    json_out_begin(&j, '[');
    for (size_t i = 0; i < req->nchecks; i++) {
        json_out_begin(&j, '{');
        check_names(&j, &req->checks[i]);
        json_out_key(&j, "failure_mode");
        json_out_cstr(&j, mode_names[req->checks[i].policy->failure_mode]);
        json_out_end(&j, '}');
    }
    json_out_end(&j, ']');
    json_out_end(&j, '}');
    struct headers hs;
    headers_init(&hs);
    config_headers(&hs, req, closed);
    finish(out, start, closed ? 503 : 200, NULL, &hs, flags);
    return closed ? 503 : 200;
}

/* {"error": code, "message": message} with the headers in hs. */
static void error_answer(struct buf *out, int status, const char *code, const char *message,
                         const struct headers *hs, unsigned flags)
{
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_key(&j, "error");
    json_out_cstr(&j, code);
    json_out_key(&j, "message");
    json_out_cstr(&j, message);
    json_out_end(&j, '}');
    finish(out, start, status, NULL, hs, flags);
}

int response_verdict(struct buf *out, const struct verdict *v, unsigned flags)
{
    struct headers hs;
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
    headers_init(&hs);
    config_headers(&hs, v->req, 1);
    error_answer(out, 503, "overloaded", "too many checks in flight", &hs, flags);
    return 503;
}

void response_auth_skipped(struct buf *out, const char *policy, const char *missing, unsigned flags)
{
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_key(&j, "allowed");
    json_out_bool(&j, 1);
    json_out_key(&j, "skipped");
    json_out_bool(&j, 1);
    json_out_key(&j, "policy");
    json_out_cstr(&j, policy);
    json_out_key(&j, "missing");
    json_out_cstr(&j, missing);
    json_out_end(&j, '}');
    finish(out, start, 200, NULL, NULL, flags);
}

void response_error(struct buf *out, int status, const char *code, const char *message,
                    const char *hname, const char *hvalue, unsigned flags)
{
    struct headers hs;
    headers_init(&hs);
    if (hname)
        add_header_ref(&hs, hname, hvalue);
    error_answer(out, status, code, message, &hs, flags);
}

void response_body(struct buf *out, int status, const char *content_type, const char *body,
                   size_t len, unsigned flags)
{
    size_t start = out->len;
    buf_append(out, body, len);
    /* finish adds the one final newline: drop the body's own. */
    if (len && body[len - 1] == '\n')
        out->len--;
    finish(out, start, status, content_type, NULL, flags);
}

void response_continue(struct buf *out)
{
    buf_append_str(out, "HTTP/1.1 100 Continue\r\n\r\n");
}
