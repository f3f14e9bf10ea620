/*
 * response.c: every HTTP answer, rendered into a struct buf (response.h).
 *
 * The body is written first, where the response starts in the buffer; then
 * the head (which needs the body's length) is built in a small array on the
 * stack and the body moved up behind it. Bodies are a few hundred bytes, so
 * the move costs less than a second buffer would.
 */
#include <stdio.h>
#include <string.h>

#include "json_out.h"
#include "response.h"
#include "util.h"

#define HEAD_MAX 1024
#define MAX_HEADERS 6

/* The answer's own headers, between Cache-Control and Connection. */
struct headers {
    size_t n;
    struct {
        const char *name;
        char value[32];
        size_t len;
    } h[MAX_HEADERS];
};

/* Keeps at most 31 bytes of value: every value here is a number or a short
 * fixed word. */
static void add_header(struct headers *hs, const char *name, const char *value)
{
    if (hs->n == MAX_HEADERS)
        return;
    size_t len = strnlen(value, sizeof hs->h[0].value - 1);
    hs->h[hs->n].name = name;
    memcpy(hs->h[hs->n].value, value, len);
    hs->h[hs->n].len = len;
    hs->n++;
}

static void add_header_int(struct headers *hs, const char *name, int64_t v)
{
    char s[UTIL_INT_CHARS + 1];
    s[util_format_int(s, v)] = '\0';
    add_header(hs, name, s);
}

/* The head is assembled with plain copies: snprintf's format parsing cost
 * more than the rest of the answer. */
static size_t put(char *head, size_t n, const char *s, size_t len)
{
    memcpy(head + n, s, len);
    return n + len;
}

static size_t put_str(char *head, size_t n, const char *s)
{
    return put(head, n, s, strlen(s));
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

/* Ends the response whose body starts at out->data + start: appends the
 * final newline, then puts the head in front of the body. */
static void finish(struct buf *out, size_t start, int status, const char *content_type,
                   const struct headers *hs, unsigned flags)
{
    buf_append_char(out, '\n');
    size_t body_len = out->len - start;
    char head[HEAD_MAX];
    size_t n = put_str(head, 0, "HTTP/1.1 ");
    n += util_format_int(head + n, status);
    n = put(head, n, " ", 1);
    n = put_str(head, n, reason_phrase(status));
    n = put_str(head, n, "\r\nContent-Type: ");
    n = put_str(head, n, content_type ? content_type : "application/json");
    n = put_str(head, n, "\r\nCache-Control: no-store\r\n");
    for (size_t i = 0; hs && i < hs->n; i++) {
        n = put_str(head, n, hs->h[i].name);
        n = put(head, n, ": ", 2);
        n = put(head, n, hs->h[i].value, hs->h[i].len);
        n = put(head, n, "\r\n", 2);
    }
    if (flags & RESPONSE_CLOSE)
        n = put_str(head, n, "Connection: close\r\n");
    else if (flags & RESPONSE_KEEP_ALIVE)
        n = put_str(head, n, "Connection: keep-alive\r\n");
    n = put_str(head, n, "Content-Length: ");
    n += util_format_int(head + n, (long long)body_len);
    n = put(head, n, "\r\n\r\n", 4);
    /* The fixed names and 31-byte values above cannot reach HEAD_MAX. */
    buf_reserve(out, n);
    memmove(out->data + start + n, out->data + start, body_len);
    memcpy(out->data + start, head, n);
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

    struct headers hs = {0};
    add_header_int(&hs, "X-RateLimit-Limit", bind->limit);
    add_header_int(&hs, "X-RateLimit-Remaining", bind->remaining);
    add_header_int(&hs, "X-RateLimit-Reset", util_ceil_div(us_to_ms(bind->reset_us), 1000));
    if (!sum->allowed && sum->retry_us >= 0) {
        int64_t s = util_ceil_div(us_to_ms(sum->retry_us), 1000);
        add_header_int(&hs, "Retry-After", s < 1 ? 1 : s);
    }
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
    struct headers hs = {0};
    if (closed)
        add_header(&hs, "Retry-After", "1");
    finish(out, start, closed ? 503 : 200, NULL, &hs, flags);
    return closed ? 503 : 200;
}

int response_verdict(struct buf *out, const struct verdict *v, unsigned flags)
{
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
    response_error(out, 503, "overloaded", "too many checks in flight", "Retry-After", "1", flags);
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
    size_t start = out->len;
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_key(&j, "error");
    json_out_cstr(&j, code);
    json_out_key(&j, "message");
    json_out_cstr(&j, message);
    json_out_end(&j, '}');
    struct headers hs = {0};
    if (hname)
        add_header(&hs, hname, hvalue);
    finish(out, start, status, NULL, &hs, flags);
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
