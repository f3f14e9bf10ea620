/*
 * test_response.c: the binding tier, the JSON shapes and the headers.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "config.h"
#include "request.h"
#include "response.h"
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
    "      - {name: q, algorithm: leaky_bucket, limit: 10, window: 1s, burst: 3}\n";

static struct config *cfg;

/* Parses body into req (the test's own input: must be valid). */
static void parse(const char *body, struct check_request *req)
{
    struct request_error e;
    if (request_parse(cfg, body, strlen(body), req, &e) < 0) {
        printf("# bad test input %s: %s\n", body, e.message);
        exit(1);
    }
}

/* One rendered response, taken apart again. */
struct answer {
    int status;
    char head[2048];
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

static void render_error(int status, const char *code, const char *message, struct answer *a)
{
    struct buf b = {0};
    response_error(&b, status, code, message, NULL, NULL, 0);
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
    render_error(400, "invalid_key", "the \"key\" is empty", &a);
    json_t *b = body_of(&a);
    is_int(a.status, 400, "error status");
    is_str(json_string_value(json_object_get(b, "error")), "invalid_key", "error code");
    is_str(json_string_value(json_object_get(b, "message")), "the \"key\" is empty",
           "message escaped as JSON");
    json_decref(b);
    answer_free(&a);
    answer_free(&a);

    /* A message cut inside a UTF-8 character, and stray bytes. */
    render_error(400, "unknown_policy", "unknown policy \"a\xc3\xa9\xc3\"", &a);
    b = body_of(&a);
    is_int(a.status, 400, "a message with a cut UTF-8 character still answers 400");
    is_str(json_string_value(json_object_get(b, "message")), "unknown policy \"a\xc3\xa9?\"",
           "the broken byte becomes ?");
    json_decref(b);
    answer_free(&a);
    render_error(400, "x", "\xff\xfe ok \xe2\x82", &a);
    b = body_of(&a);
    is_str(json_string_value(json_object_get(b, "message")), "?? ok ??", "invalid bytes become ?");
    json_decref(b);
    answer_free(&a);
    /* overlong '/', a surrogate, past U+10FFFF, lead byte F5; then valid
     * 2-, 3- and 4-byte characters. */
    render_error(400, "x",
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
    response_error(&b, 405, "method_not_allowed", "use GET", "Allow", "GET, HEAD", RESPONSE_CLOSE);
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
    test_local_and_overloaded();
    test_bodies();
    test_check_of();
    config_unref(cfg);
    return tap_done();
}
