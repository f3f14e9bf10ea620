/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_response.c: the binding tier, the JSON shapes and the headers.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "front/http/check_json.h"
#include "front/http/response.h"
#include "lib/buf.h"
#include "lib/json_out.h"
#include "tap.h"

static const char yaml[] =
    "policies:\n"
    "  two:\n"
    "    tiers:\n"
    "      - {name: burst, algorithm: token_bucket, limit: 5, window: 1s, burst: 10}\n"
    "      - {name: hourly, algorithm: sliding_window_log, limit: 100, window: 1h}\n"
    "  shadowed:\n"
    "    shadow: true\n"
    "    tiers:\n"
    "      - {name: t, algorithm: fixed_window, limit: 1, window: 1m}\n"
    "  closed:\n"
    "    failure_mode: closed\n"
    "    tiers:\n"
    "      - {name: t, algorithm: fixed_window, limit: 1, window: 1m}\n"
    "  shaped:\n"
    "    tiers:\n"
    "      - {name: q, algorithm: leaky_bucket, limit: 10, window: 1s, burst: 3}\n"
    "  ietf1:\n"
    "    headers: ietf\n"
    "    tiers:\n"
    "      - {name: t, algorithm: fixed_window, limit: 3, window: 500ms}\n"
    "  both2:\n"
    "    headers: both\n"
    "    tiers:\n"
    "      - {name: a, algorithm: token_bucket, limit: 5, window: 1s, burst: 10}\n"
    "      - {name: b, algorithm: sliding_window_log, limit: 100, window: 1h}\n"
    "  none1:\n"
    "    headers: none\n"
    "    tiers:\n"
    "      - {name: t, algorithm: gcra, limit: 2, window: 1s}\n"
    "  leaky:\n"
    "    headers: both\n"
    "    tiers:\n"
    "      - {name: q, algorithm: leaky_bucket, limit: 10, window: 1s, burst: 3}\n"
    "  cl:\n"
    "    headers: ietf\n"
    "    failure_mode: closed\n"
    "    tiers:\n"
    "      - {name: x, algorithm: fixed_window, limit: 60, window: 1m}\n"
    "  slowshadow:\n"
    "    shadow: true\n"
    "    tiers:\n"
    "      - {name: s, algorithm: fixed_window, limit: 1, window: 1d}\n";

static struct config *cfg;

/* Parses body into req (the test's own input: must be valid). */
static void parse(const char *body, struct check_request *req)
{
    struct request_error e;
    if (check_json_parse(cfg, body, strlen(body), req, &e) < 0) {
        printf("# bad test input %s: %s\n", body, e.message);
        exit(1);
    }
}

/* One rendered response, taken apart again. */
struct answer {
    int status;
    char head[8192];
    char *body; /* without the final newline */
};

static void take_apart(struct buf *b, struct answer *a)
{
    buf_append_char(b, '\0');
    memset(a, 0, sizeof *a);
    a->status = atoi(b->data + 9);
    const char *end = strstr(b->data, "\r\n\r\n");
    size_t hl = (size_t)(end - b->data) + 2;
    memcpy(a->head, b->data, hl < sizeof a->head ? hl : sizeof a->head - 1);
    a->body = strdup(end + 4);
    size_t n = strlen(a->body);
    if (!ok(n > 0 && a->body[n - 1] == '\n', "the body ends with a newline"))
        return;
    a->body[n - 1] = '\0';
    char cl[64];
    snprintf(cl, sizeof cl, "\r\nContent-Length: %zu\r\n", n);
    ok(strstr(a->head, cl) != NULL, "Content-Length is the body's length");
    /* The body is what jansson itself prints for the tree it parses
     * (JSON_COMPACT, key order kept): byte for byte today's bodies. */
    json_t *j = json_loads(a->body, 0, NULL);
    char *again = j ? json_dumps(j, JSON_COMPACT) : NULL;
    ok(again && strcmp(again, a->body) == 0, "body byte-identical to jansson's: %s", a->body);
    free(again);
    json_decref(j);
}

static void render_verdict(const struct verdict *v, struct answer *a)
{
    struct buf b = {0};
    int status = response_verdict(&b, v, 0);
    take_apart(&b, a);
    is_int(status, a->status, "response_verdict returns the status it wrote");
    buf_free(&b);
}

/* What the core hands over for results decided by the backend. */
static void response_decision(const struct check_request *req, const struct tier_result *r,
                              struct answer *a)
{
    struct verdict v = {.kind = VERDICT_DECIDED, .req = req, .results = r};
    decision_summarize(req, r, &v.sum);
    render_verdict(&v, a);
}

static void response_unavailable(const struct check_request *req, const char *why, struct answer *a)
{
    struct verdict v = {.kind = VERDICT_UNAVAILABLE, .req = req, .why = why};
    render_verdict(&v, a);
}

static void render_error(enum request_code code, const char *message, struct answer *a)
{
    struct buf b = {0};
    response_error(&b, code, message, NULL, NULL, 0);
    take_apart(&b, a);
    buf_free(&b);
}

static void answer_free(struct answer *a)
{
    free(a->body);
    a->body = NULL;
}

/* The value of header name, or NULL (in a static buffer). */
static const char *header(const struct answer *a, const char *name)
{
    static char value[128];
    char pat[128];
    snprintf(pat, sizeof pat, "\r\n%s: ", name);
    const char *p = strstr(a->head, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    size_t n = strcspn(p, "\r");
    snprintf(value, sizeof value, "%.*s", (int)n, p);
    return value;
}

static json_t *body_of(const struct answer *a)
{
    return json_loads(a->body, 0, NULL);
}

static long long jint(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void test_denied_binding(void)
{
    struct check_request req;
    parse("{\"policy\":\"two\",\"key\":\"k\"}", &req);
    struct tier_result r[2] = {
        {.allowed = 0, .limit = 10, .remaining = 0, .reset_us = 1800000, .retry_us = 200000},
        {.allowed = 0, .limit = 100, .remaining = 0, .reset_us = 3600000000LL, .retry_us = 1500001},
    };
    struct answer a;
    response_decision(&req, r, &a);
    json_t *b = body_of(&a);
    is_int(a.status, 429, "denied is 429");
    ok(json_is_false(json_object_get(b, "allowed")), "allowed:false");
    is_int(jint(b, "limit"), 100, "binding tier is the denying one with the longest wait");
    is_int(jint(b, "retry_after_ms"), 1501, "retry_after_ms rounded up to the ms");
    is_str(header(&a, "Retry-After"), "2", "Retry-After in seconds, rounded up");
    is_str(header(&a, "X-RateLimit-Limit"), "100", "X-RateLimit-Limit from the binding tier");
    is_str(header(&a, "X-RateLimit-Remaining"), "0", "X-RateLimit-Remaining");
    is_str(header(&a, "X-RateLimit-Reset"), "3600", "X-RateLimit-Reset in seconds");
    json_t *t0 = json_array_get(
        json_object_get(json_array_get(json_object_get(b, "checks"), 0), "tiers"), 0);
    is_str(json_string_value(json_object_get(t0, "name")), "burst", "tiers listed in order");
    is_str(json_string_value(json_object_get(t0, "algorithm")), "token_bucket",
           "tier names its algorithm");
    is_int(jint(t0, "retry_after_ms"), 200, "per-tier retry_after_ms");
    ok(json_object_get(t0, "delay_ms") == NULL, "no delay_ms outside leaky_bucket");
    json_decref(b);
    answer_free(&a);

    /* A short wait still gives Retry-After: 1; a tier with no finite wait
     * binds and removes the header. */
    r[1].allowed = 1;
    r[1].retry_us = 0;
    r[0].retry_us = 1;
    response_decision(&req, r, &a);
    is_str(header(&a, "Retry-After"), "1", "Retry-After is at least 1");
    answer_free(&a);
    r[1] = (struct tier_result){
        .allowed = 0, .limit = 100, .remaining = 3, .retry_us = -1, .cost_exceeds_limit = 1};
    response_decision(&req, r, &a);
    b = body_of(&a);
    ok(json_is_null(json_object_get(b, "retry_after_ms")), "no finite wait: retry_after_ms null");
    ok(header(&a, "Retry-After") == NULL, "and no Retry-After header");
    t0 = json_array_get(json_object_get(json_array_get(json_object_get(b, "checks"), 0), "tiers"),
                        1);
    is_str(json_string_value(json_object_get(t0, "reason")), "cost_exceeds_limit",
           "reason cost_exceeds_limit");
    json_decref(b);
    answer_free(&a);
    request_free(&req);
}

static void test_allowed_binding(void)
{
    struct check_request req;
    parse("{\"policy\":\"two\",\"key\":\"k\"}", &req);
    struct tier_result r[2] = {
        {.allowed = 1, .limit = 10, .remaining = 4, .reset_us = 1200000},
        {.allowed = 1, .limit = 100, .remaining = 4, .reset_us = 3600000000LL},
    };
    struct answer a;
    response_decision(&req, r, &a);
    json_t *b = body_of(&a);
    is_int(a.status, 200, "allowed is 200");
    is_int(jint(b, "limit"), 100, "ties on remaining: the largest reset binds");
    is_int(jint(b, "retry_after_ms"), 0, "retry_after_ms 0 when allowed");
    ok(header(&a, "Retry-After") == NULL, "no Retry-After when allowed");
    json_decref(b);
    answer_free(&a);
    r[0].remaining = 3;
    response_decision(&req, r, &a);
    is_str(header(&a, "X-RateLimit-Limit"), "10", "the fewest remaining binds");
    is_str(header(&a, "X-RateLimit-Reset"), "2", "reset 1.2 s rounds up to 2");
    answer_free(&a);
    request_free(&req);
}

static void test_shadow(void)
{
    struct check_request req;
    parse(
        "{\"checks\":[{\"policy\":\"two\",\"key\":\"k\"},{\"policy\":\"shadowed\",\"key\":\"k\"}]}",
        &req);
    struct tier_result r[3] = {
        {.allowed = 1, .limit = 10, .remaining = 9, .reset_us = 100000},
        {.allowed = 1, .limit = 100, .remaining = 99, .reset_us = 1000},
        {.allowed = 0, .limit = 1, .remaining = 0, .reset_us = 5000000, .retry_us = 5000000},
    };
    struct answer a;
    response_decision(&req, r, &a);
    json_t *b = body_of(&a);
    is_int(a.status, 200, "a shadow policy that would deny answers allowed");
    ok(json_is_true(json_object_get(b, "shadow_denied")), "with shadow_denied:true");
    is_int(jint(b, "limit"), 10, "shadow tiers never bind");
    json_t *c1 = json_array_get(json_object_get(b, "checks"), 1);
    ok(json_is_true(json_object_get(c1, "allowed")) &&
           json_is_true(json_object_get(c1, "shadow_denied")),
       "the shadow check says allowed and shadow_denied");
    json_decref(b);
    answer_free(&a);
    request_free(&req);

    parse("{\"policy\":\"shadowed\",\"key\":\"k\"}", &req);
    response_decision(&req, &r[2], &a);
    is_int(a.status, 200, "a request of only shadow checks is allowed");
    ok(header(&a, "Retry-After") == NULL, "with no Retry-After");
    answer_free(&a);
    request_free(&req);
}

static void test_leaky_delay(void)
{
    struct check_request req;
    parse("{\"policy\":\"shaped\",\"key\":\"k\"}", &req);
    struct tier_result r = {
        .allowed = 1, .limit = 4, .remaining = 1, .reset_us = 300000, .delay_us = 200000};
    struct answer a;
    response_decision(&req, &r, &a);
    json_t *b = body_of(&a);
    is_int(jint(b, "delay_ms"), 200, "top-level delay_ms from the leaky bucket");
    json_t *t = json_array_get(
        json_object_get(json_array_get(json_object_get(b, "checks"), 0), "tiers"), 0);
    is_int(jint(t, "delay_ms"), 200, "per-tier delay_ms");
    json_decref(b);
    answer_free(&a);
    request_free(&req);
}

static void test_unavailable(void)
{
    struct check_request req;
    struct answer a;
    parse("{\"policy\":\"two\",\"key\":\"k\"}", &req);
    response_unavailable(&req, "down", &a);
    json_t *b = body_of(&a);
    is_int(a.status, 200, "failure_mode open answers 200");
    ok(json_is_true(json_object_get(b, "allowed")) && json_is_true(json_object_get(b, "degraded")),
       "allowed and degraded");
    json_decref(b);
    answer_free(&a);
    request_free(&req);

    parse("{\"checks\":[{\"policy\":\"two\",\"key\":\"k\"},{\"policy\":\"closed\",\"key\":\"k\"}]}",
          &req);
    response_unavailable(&req, "down", &a);
    b = body_of(&a);
    is_int(a.status, 503, "any closed policy makes it 503");
    ok(json_is_false(json_object_get(b, "allowed")), "allowed:false");
    is_str(json_string_value(json_object_get(b, "error")), "backend_unavailable",
           "error backend_unavailable");
    is_str(header(&a, "Retry-After"), "1", "Retry-After: 1");
    json_decref(b);
    answer_free(&a);
    request_free(&req);
}

static void test_error(void)
{
    struct answer a;
    render_error(RC_INVALID_KEY, "the \"key\" is empty", &a);
    json_t *b = body_of(&a);
    is_int(a.status, 400, "error status");
    is_str(json_string_value(json_object_get(b, "error")), "invalid_key", "error code");
    is_str(json_string_value(json_object_get(b, "message")), "the \"key\" is empty",
           "message escaped as JSON");
    json_decref(b);
    answer_free(&a);
    answer_free(&a);

    /* A message cut inside a UTF-8 character, and stray bytes. */
    render_error(RC_UNKNOWN_POLICY, "unknown policy \"a\xc3\xa9\xc3\"", &a);
    b = body_of(&a);
    is_int(a.status, 400, "a message with a cut UTF-8 character still answers 400");
    is_str(json_string_value(json_object_get(b, "message")), "unknown policy \"a\xc3\xa9?\"",
           "the broken byte becomes ?");
    json_decref(b);
    answer_free(&a);
    render_error(RC_INVALID_KEY, "\xff\xfe ok \xe2\x82", &a);
    b = body_of(&a);
    is_str(json_string_value(json_object_get(b, "message")), "?? ok ??", "invalid bytes become ?");
    json_decref(b);
    answer_free(&a);
    /* overlong '/', a surrogate, past U+10FFFF, lead byte F5; then valid
     * 2-, 3- and 4-byte characters. */
    render_error(RC_INVALID_KEY,
                 "\xe0\x80\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xf5\x80\x80\x80|"
                 "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
                 &a);
    b = body_of(&a);
    is_int(a.status, 400, "overlong, surrogate and out-of-range sequences: still a 400");
    is_str(json_string_value(json_object_get(b, "message")),
           "???|???|????|????|\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
           "each of their bytes becomes ?, valid characters stay");
    json_decref(b);
    answer_free(&a);
}

/* The whole response, byte for byte, as the README shows it. */
static void test_exact_bytes(void)
{
    struct check_request req;
    parse("{\"policy\":\"two\",\"key\":\"ip:1.2.3.4\"}", &req);
    struct tier_result r[2] = {
        {.allowed = 1, .limit = 10, .remaining = 9, .reset_us = 200000},
        {.allowed = 1, .limit = 100, .remaining = 99, .reset_us = 3600000000LL},
    };
    struct verdict v = {.kind = VERDICT_DECIDED, .req = &req, .results = r};
    decision_summarize(&req, r, &v.sum);
    static const char body[] =
        "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"reset_ms\":200,\"retry_after_ms\":0,"
        "\"checks\":[{\"policy\":\"two\",\"key\":\"ip:1.2.3.4\",\"allowed\":true,\"tiers\":["
        "{\"name\":\"burst\",\"algorithm\":\"token_bucket\",\"allowed\":true,\"limit\":10,"
        "\"remaining\":9,\"reset_ms\":200,\"retry_after_ms\":0},{\"name\":\"hourly\","
        "\"algorithm\":\"sliding_window_log\",\"allowed\":true,\"limit\":100,\"remaining\":99,"
        "\"reset_ms\":3600000,\"retry_after_ms\":0}]}]}\n";
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: application/json\r\n"
                               "Cache-Control: no-store\r\n"
                               "X-RateLimit-Limit: 10\r\n"
                               "X-RateLimit-Remaining: 9\r\n"
                               "X-RateLimit-Reset: 1\r\n"
                               "Content-Length: 397\r\n\r\n";
    is_int(sizeof body - 1, 397, "the body's length");
    struct buf b = {0};
    buf_append_str(&b, "before");
    is_int(response_verdict(&b, &v, 0), 200, "200");
    buf_append_char(&b, '\0');
    struct buf want = {0};
    buf_append_str(&want, "before");
    buf_append_str(&want, head);
    buf_append_str(&want, body);
    buf_append_char(&want, '\0');
    is_str(b.data, want.data, "the whole response, appended after what the buffer held");
    b.len = 0;
    response_verdict(&b, &v, RESPONSE_HEAD | RESPONSE_CLOSE);
    buf_append_char(&b, '\0');
    ok(strstr(b.data, "Connection: close\r\nContent-Length: 397\r\n\r\n") != NULL &&
           strcmp(strstr(b.data, "\r\n\r\n"), "\r\n\r\n") == 0,
       "HEAD: the same head (with Connection: close) and no body");
    b.len = 0;
    response_verdict(&b, &v, RESPONSE_KEEP_ALIVE);
    buf_append_char(&b, '\0');
    ok(strstr(b.data, "\r\nConnection: keep-alive\r\nContent-Length") != NULL,
       "Connection: keep-alive for an HTTP/1.0 client that asked");
    buf_free(&b);
    buf_free(&want);
    request_free(&req);
}

/* One tier's figures, written for a check and for an inspection: the
 * exact bytes of both forms (their field orders are public). */
static void tier_bytes(const struct tier_result *now, const struct tier_result *next,
                       enum response_tier_form form, const char *want, const char *what)
{
    const struct policy *p = config_find_policy(cfg, "shaped");
    struct buf b = {0};
    struct json_out j = json_out_start(&b);
    response_tier_json(&j, &p->tiers[0], now, next, form, NULL);
    buf_append_char(&b, '\0');
    is_str(b.data, want, "%s", what);
    buf_free(&b);
}

static void test_tier_json(void)
{
    struct tier_result over = {
        .limit = 10, .reset_us = 1500, .retry_us = -1, .cost_exceeds_limit = 1};
    tier_bytes(
        &over, &over, RESPONSE_TIER_CHECK,
        "{\"name\":\"q\",\"algorithm\":\"leaky_bucket\",\"allowed\":false,\"limit\":10,"
        "\"remaining\":0,\"reset_ms\":2,\"retry_after_ms\":null,\"delay_ms\":0,"
        "\"reason\":\"cost_exceeds_limit\"}",
        "a check's tier: allowed after algorithm, a retry never possible is null, the reason");
    struct tier_result now = {.allowed = 1, .limit = 10, .remaining = 3, .reset_us = 999};
    struct tier_result next = {.allowed = 1,
                               .limit = 10,
                               .remaining = 2,
                               .retry_us = 5000,
                               .delay_us = 2001,
                               .cost_exceeds_limit = 1};
    tier_bytes(
        &now, &next, RESPONSE_TIER_INSPECT,
        "{\"name\":\"q\",\"algorithm\":\"leaky_bucket\",\"limit\":10,\"remaining\":3,"
        "\"reset_ms\":1,\"allowed\":true,\"retry_after_ms\":0,\"delay_ms\":3}",
        "an inspection's tier: figures from now, allowed after reset_ms from next, no reason");
    next.allowed = 0;
    next.retry_us = 2500;
    tier_bytes(&now, &next, RESPONSE_TIER_INSPECT,
               "{\"name\":\"q\",\"algorithm\":\"leaky_bucket\",\"limit\":10,\"remaining\":3,"
               "\"reset_ms\":1,\"allowed\":false,\"retry_after_ms\":3,\"delay_ms\":3}",
               "an inspection's denied tier: the retry in ms, rounded up");
}

static void test_local_and_overloaded(void)
{
    struct check_request req;
    parse("{\"policy\":\"two\",\"key\":\"k\",\"dry_run\":true}", &req);
    struct tier_result r[2] = {
        {.allowed = 1, .limit = 10, .remaining = 9, .reset_us = 200000},
        {.allowed = 1, .limit = 100, .remaining = 99, .reset_us = 1000},
    };
    struct verdict v = {.kind = VERDICT_LOCAL, .req = &req, .results = r};
    decision_summarize(&req, r, &v.sum);
    struct answer a;
    render_verdict(&v, &a);
    json_t *b = body_of(&a);
    is_int(a.status, 200, "a local decision answers like a decided one");
    ok(json_is_true(json_object_get(b, "degraded")) && json_is_true(json_object_get(b, "local")) &&
           json_is_true(json_object_get(b, "dry_run")),
       "marked degraded and local (and dry_run)");
    json_decref(b);
    answer_free(&a);
    v.kind = VERDICT_DECIDED;
    v.cached = 1;
    render_verdict(&v, &a);
    ok(strstr(a.body, "local") == NULL && strstr(a.body, "cached") == NULL,
       "cached changes nothing visible");
    answer_free(&a);

    v = (struct verdict){.kind = VERDICT_OVERLOADED, .req = &req};
    render_verdict(&v, &a);
    b = body_of(&a);
    is_int(a.status, 503, "overloaded is 503");
    is_str(json_string_value(json_object_get(b, "error")), "overloaded", "error overloaded");
    is_str(header(&a, "Retry-After"), "1", "with Retry-After: 1");
    json_decref(b);
    answer_free(&a);
    request_free(&req);
}

static void test_bodies(void)
{
    struct buf b = {0};
    response_body(&b, 200, "text/plain; version=0.0.4; charset=utf-8", "a 1\n", 4, 0);
    buf_append_char(&b, '\0');
    is_str(b.data,
           "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
           "Cache-Control: no-store\r\nContent-Length: 4\r\n\r\na 1\n",
           "a text body keeps its one final newline");
    b.len = 0;
    response_error(&b, RC_METHOD_NOT_ALLOWED, "use GET", "Allow", "GET, HEAD", RESPONSE_CLOSE);
    buf_append_char(&b, '\0');
    is_str(b.data,
           "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n"
           "Cache-Control: no-store\r\nAllow: GET, HEAD\r\nConnection: close\r\n"
           "Content-Length: 51\r\n\r\n{\"error\":\"method_not_allowed\",\"message\":\"use GET\"}\n",
           "an error with its extra header");
    b.len = 0;
    response_continue(&b);
    is_int(b.len, 25, "100 Continue");
    buf_free(&b);
}

/* Which check a tier result belongs to, for per-policy answer settings. */
static void test_check_of(void)
{
    struct check_request req;
    parse("{\"checks\":[{\"policy\":\"two\",\"key\":\"a\"},"
          "{\"policy\":\"shaped\",\"key\":\"b\"}]}",
          &req);
    struct tier_result r[3] = {{0}};
    ok(decision_check_of(&req, r, &r[0]) == &req.checks[0] &&
           decision_check_of(&req, r, &r[1]) == &req.checks[0],
       "both tiers of the first policy belong to the first check");
    ok(decision_check_of(&req, r, &r[2]) == &req.checks[1], "the third tier to the second");
    request_free(&req);
}

/* The answer's own headers: everything between Cache-Control and
 * Content-Length (Connection is never asked for here). */
static const char *own_headers(const struct answer *a)
{
    static char out[8192];
    const char *p = strstr(a->head, "Cache-Control: no-store\r\n");
    const char *e = strstr(a->head, "Content-Length: ");
    if (!p || !e || e < p)
        return "(malformed head)";
    p += strlen("Cache-Control: no-store\r\n");
    snprintf(out, sizeof out, "%.*s", (int)(e - p), p);
    return out;
}

static void decided_headers(const char *body, const struct tier_result *r, const char *want,
                            const char *what)
{
    struct check_request req;
    struct answer a;
    parse(body, &req);
    response_decision(&req, r, &a);
    is_str(own_headers(&a), want, "%s", what);
    answer_free(&a);
    request_free(&req);
}

/* Every mode, allowed and denied, byte for byte. */
static void test_header_modes(void)
{
    struct tier_result one = {.allowed = 1, .limit = 3, .remaining = 2, .reset_us = 400000};
    decided_headers("{\"policy\":\"ietf1\",\"key\":\"k\"}", &one,
                    "RateLimit-Policy: \"ietf1\";q=3;w=1\r\n"
                    "RateLimit: \"ietf1\";r=2;t=1\r\n",
                    "ietf, one tier: the policy's name; a 500ms window is w=1");
    one = (struct tier_result){
        .allowed = 0, .limit = 3, .remaining = 0, .reset_us = 400000, .retry_us = 400000};
    decided_headers("{\"policy\":\"ietf1\",\"key\":\"k\"}", &one,
                    "Retry-After: 1\r\n"
                    "RateLimit-Policy: \"ietf1\";q=3;w=1\r\n"
                    "RateLimit: \"ietf1\";r=0;t=1\r\n",
                    "ietf denied: Retry-After stays, no X-RateLimit-*");

    struct tier_result two[2] = {
        {.allowed = 1, .limit = 10, .remaining = 4, .reset_us = 1200000},
        {.allowed = 1, .limit = 100, .remaining = 50, .reset_us = 3600000000LL},
    };
    decided_headers("{\"policy\":\"both2\",\"key\":\"k\"}", two,
                    "X-RateLimit-Limit: 10\r\n"
                    "X-RateLimit-Remaining: 4\r\n"
                    "X-RateLimit-Reset: 2\r\n"
                    "RateLimit-Policy: \"both2/a\";q=5;w=1, \"both2/b\";q=100;w=3600\r\n"
                    "RateLimit: \"both2/a\";r=4;t=2\r\n",
                    "both, two tiers: policy/tier names, q is the limit (not the burst)");
    two[1] = (struct tier_result){
        .allowed = 0, .limit = 100, .remaining = 0, .reset_us = 3599000000LL, .retry_us = 36000001};
    decided_headers("{\"policy\":\"both2\",\"key\":\"k\"}", two,
                    "X-RateLimit-Limit: 100\r\n"
                    "X-RateLimit-Remaining: 0\r\n"
                    "X-RateLimit-Reset: 3599\r\n"
                    "Retry-After: 37\r\n"
                    "RateLimit-Policy: \"both2/a\";q=5;w=1, \"both2/b\";q=100;w=3600\r\n"
                    "RateLimit: \"both2/b\";r=0;t=37\r\n",
                    "both denied: t is the Retry-After moment");
    two[1].retry_us = -1;
    two[1].cost_exceeds_limit = 1;
    decided_headers("{\"policy\":\"both2\",\"key\":\"k\",\"cost\":101}", two,
                    "X-RateLimit-Limit: 100\r\n"
                    "X-RateLimit-Remaining: 0\r\n"
                    "X-RateLimit-Reset: 3599\r\n"
                    "RateLimit-Policy: \"both2/a\";q=5;w=1, \"both2/b\";q=100;w=3600\r\n"
                    "RateLimit: \"both2/b\";r=0;t=3599\r\n",
                    "no finite wait: no Retry-After, t is the reset");

    struct tier_result g = {
        .allowed = 0, .limit = 2, .remaining = 0, .reset_us = 900000, .retry_us = 400000};
    decided_headers("{\"policy\":\"none1\",\"key\":\"k\"}", &g, "Retry-After: 1\r\n",
                    "none: only Retry-After");
    g = (struct tier_result){.allowed = 1, .limit = 2, .remaining = 1, .reset_us = 500000};
    decided_headers("{\"policy\":\"none1\",\"key\":\"k\"}", &g, "", "none, allowed: nothing");

    struct tier_result q = {
        .allowed = 1, .limit = 4, .remaining = 1, .reset_us = 300000, .delay_us = 199001};
    decided_headers("{\"policy\":\"leaky\",\"key\":\"k\"}", &q,
                    "X-RateLimit-Limit: 4\r\n"
                    "X-RateLimit-Remaining: 1\r\n"
                    "X-RateLimit-Reset: 1\r\n"
                    "X-RateLimit-Delay-Ms: 200\r\n"
                    "RateLimit-Policy: \"leaky\";q=10;w=1\r\n"
                    "RateLimit: \"leaky\";r=1;t=1\r\n",
                    "leaky_bucket with a delay: X-RateLimit-Delay-Ms, rounded up");
    q.delay_us = 0;
    q.remaining = 3;
    decided_headers("{\"policy\":\"shaped\",\"key\":\"k\"}", &q,
                    "X-RateLimit-Limit: 4\r\n"
                    "X-RateLimit-Remaining: 3\r\n"
                    "X-RateLimit-Reset: 1\r\n",
                    "leaky_bucket without a delay: no X-RateLimit-Delay-Ms");

    /* Two checks: the binding tier's policy decides the mode. */
    struct tier_result mix[2] = {
        {.allowed = 1, .limit = 3, .remaining = 2, .reset_us = 400000},
        {.allowed = 1, .limit = 2, .remaining = 0, .reset_us = 800000},
    };
    decided_headers("{\"checks\":[{\"policy\":\"ietf1\",\"key\":\"k\"},"
                    "{\"policy\":\"none1\",\"key\":\"k\"}]}",
                    mix, "", "the binding check (none1) decides: no fields");
    mix[1].remaining = 2;
    mix[1].reset_us = 100000;
    decided_headers("{\"checks\":[{\"policy\":\"ietf1\",\"key\":\"k\"},"
                    "{\"policy\":\"none1\",\"key\":\"k\"}]}",
                    mix,
                    "RateLimit-Policy: \"ietf1\";q=3;w=1\r\n"
                    "RateLimit: \"ietf1\";r=2;t=1\r\n",
                    "the binding check (ietf1) decides: its fields");
}

/* Answers without state: what the config tells of the slowest tier. */
static void test_failure_headers(void)
{
    struct check_request req;
    struct answer a;
    parse("{\"checks\":[{\"policy\":\"both2\",\"key\":\"k\"},{\"policy\":\"cl\",\"key\":\"k\"}]}",
          &req);
    response_unavailable(&req, "down", &a);
    is_int(a.status, 503, "closed: 503");
    is_str(own_headers(&a),
           "X-RateLimit-Limit: 100\r\n"
           "Retry-After: 1\r\n"
           "RateLimit-Policy: \"both2/a\";q=5;w=1, \"both2/b\";q=100;w=3600\r\n",
           "unavailable: the slowest tier (100/1h) binds, in its policy's mode; no RateLimit");
    answer_free(&a);
    struct verdict v = {.kind = VERDICT_OVERLOADED, .req = &req};
    render_verdict(&v, &a);
    is_str(own_headers(&a),
           "X-RateLimit-Limit: 100\r\n"
           "Retry-After: 1\r\n"
           "RateLimit-Policy: \"both2/a\";q=5;w=1, \"both2/b\";q=100;w=3600\r\n",
           "overloaded: the same headers");
    answer_free(&a);
    request_free(&req);

    parse("{\"checks\":[{\"policy\":\"slowshadow\",\"key\":\"k\"},{\"policy\":\"two\",\"key\":"
          "\"k\"}]}",
          &req);
    response_unavailable(&req, "down", &a);
    is_int(a.status, 200, "open: 200");
    is_str(own_headers(&a), "X-RateLimit-Limit: 100\r\n",
           "open: a shadow tier never binds; the limit of the slowest other tier, no Retry-After");
    answer_free(&a);
    request_free(&req);

    parse("{\"policy\":\"shaped\",\"key\":\"k\"}", &req);
    response_unavailable(&req, "down", &a);
    is_str(own_headers(&a), "X-RateLimit-Limit: 4\r\n",
           "X-RateLimit-Limit is the capacity, as in decided answers (leaky: burst + 1)");
    answer_free(&a);
    request_free(&req);
}

/* The largest values: a 64-byte policy name, 16 tiers with 64-byte names,
 * the largest limit and window. Nothing is cut. */
static void test_header_bounds(void)
{
    char pname[65], tname[16][65], text[8192], want[8192];
    memset(pname, 'P', 64);
    pname[64] = '\0';
    size_t n =
        (size_t)snprintf(text, sizeof text, "headers: both\npolicies:\n  %s:\n    tiers:\n", pname);
    size_t w = 0;
    for (int i = 0; i < 16; i++) {
        memset(tname[i], 'a' + i, 64);
        tname[i][64] = '\0';
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "      - {name: %s, algorithm: fixed_window, limit: 1000000000, "
                              "window: 366d}\n",
                              tname[i]);
        w += (size_t)snprintf(want + w, sizeof want - w, "%s\"%s/%s\";q=1000000000;w=31622400",
                              i ? ", " : "", pname, tname[i]);
    }
    char err[RL_ERRLEN];
    struct config *big = config_load_string("big.yaml", text, n, err, sizeof err);
    if (!ok(big != NULL, "a 16-tier policy with 64-byte names loads")) {
        printf("# %s\n", err);
        return;
    }
    struct check_request req = {.nchecks = 1};
    struct check_item item = {.policy = &big->policies[0], .key = "k", .keylen = 1, .cost = 1};
    req.checks = &item;
    struct tier_result r[16];
    for (int i = 0; i < 16; i++)
        r[i] = (struct tier_result){.allowed = 1,
                                    .limit = 1000000000,
                                    .remaining = 999999999 - i,
                                    .reset_us = 31622400000000LL};
    struct answer a;
    response_decision(&req, r, &a);
    const char *p = strstr(a.head, "\r\nRateLimit-Policy: ");
    ok(p && strncmp(p + 20, want, w) == 0 && strncmp(p + 20 + w, "\r\n", 2) == 0,
       "RateLimit-Policy holds all 16 members whole (%zu bytes)", w);
    char rl[256];
    snprintf(rl, sizeof rl, "\r\nRateLimit: \"%s/%s\";r=999999984;t=31622400\r\n", pname,
             tname[15]);
    ok(strstr(a.head, rl) != NULL, "RateLimit names the binding (16th) tier whole");
    answer_free(&a);
    config_unref(big);
}

int main(void)
{
    char err[RL_ERRLEN];
    cfg = config_load_string("test.yaml", yaml, strlen(yaml), err, sizeof err);
    if (!ok(cfg != NULL, "test config loads")) {
        printf("# %s\n", err);
        return tap_done();
    }
    test_denied_binding();
    test_allowed_binding();
    test_shadow();
    test_leaky_delay();
    test_unavailable();
    test_error();
    test_exact_bytes();
    test_tier_json();
    test_local_and_overloaded();
    test_bodies();
    test_check_of();
    test_header_modes();
    test_failure_headers();
    test_header_bounds();
    config_unref(cfg);
    return tap_done();
}
