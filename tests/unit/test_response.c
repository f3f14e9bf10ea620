/*
 * test_response.c: the binding tier, the JSON shapes and the headers.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "request.h"
#include "response.h"
#include "tap.h"

/* The answers to a decided, locally decided or unavailable request, as the
 * core hands them to the front. */
static void render(const struct check_request *req, const struct tier_result *results,
                   enum verdict_kind kind, struct answer *ans)
{
    struct verdict v = {.kind = kind, .req = req, .results = results};
    decision_summarize(req, results, &v.sum);
    response_verdict(&v, ans);
}

static void render_unavailable(const struct check_request *req, const char *why,
                               struct answer *ans)
{
    struct verdict v = {.kind = VERDICT_UNAVAILABLE, .req = req, .why = why};
    response_verdict(&v, ans);
}

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

static const char *header(const struct answer *a, const char *name)
{
    for (size_t i = 0; i < a->nheaders; i++)
        if (strcmp(a->headers[i].name, name) == 0)
            return a->headers[i].value;
    return NULL;
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
        {.allowed = 0, .limit = 100, .remaining = 0, .reset_us = 3600000000LL,
         .retry_us = 1500001},
    };
    struct answer a;
    render(&req, r, VERDICT_DECIDED, &a);
    json_t *b = body_of(&a);
    is_int(a.status, 429, "denied is 429");
    ok(json_is_false(json_object_get(b, "allowed")), "allowed:false");
    is_int(jint(b, "limit"), 100, "binding tier is the denying one with the longest wait");
    is_int(jint(b, "retry_after_ms"), 1501, "retry_after_ms rounded up to the ms");
    is_str(header(&a, "Retry-After"), "2", "Retry-After in seconds, rounded up");
    is_str(header(&a, "X-RateLimit-Limit"), "100", "X-RateLimit-Limit from the binding tier");
    is_str(header(&a, "X-RateLimit-Remaining"), "0", "X-RateLimit-Remaining");
    is_str(header(&a, "X-RateLimit-Reset"), "3600", "X-RateLimit-Reset in seconds");
    json_t *t0 = json_array_get(json_object_get(json_array_get(json_object_get(b, "checks"), 0),
                                                "tiers"),
                                0);
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
    render(&req, r, VERDICT_DECIDED, &a);
    is_str(header(&a, "Retry-After"), "1", "Retry-After is at least 1");
    answer_free(&a);
    r[1] = (struct tier_result){.allowed = 0, .limit = 100, .remaining = 3, .retry_us = -1,
                                .cost_exceeds_limit = 1};
    render(&req, r, VERDICT_DECIDED, &a);
    b = body_of(&a);
    ok(json_is_null(json_object_get(b, "retry_after_ms")), "no finite wait: retry_after_ms null");
    ok(header(&a, "Retry-After") == NULL, "and no Retry-After header");
    t0 = json_array_get(
        json_object_get(json_array_get(json_object_get(b, "checks"), 0), "tiers"), 1);
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
    render(&req, r, VERDICT_DECIDED, &a);
    json_t *b = body_of(&a);
    is_int(a.status, 200, "allowed is 200");
    is_int(jint(b, "limit"), 100, "ties on remaining: the largest reset binds");
    is_int(jint(b, "retry_after_ms"), 0, "retry_after_ms 0 when allowed");
    ok(header(&a, "Retry-After") == NULL, "no Retry-After when allowed");
    json_decref(b);
    answer_free(&a);
    r[0].remaining = 3;
    render(&req, r, VERDICT_DECIDED, &a);
    is_str(header(&a, "X-RateLimit-Limit"), "10", "the fewest remaining binds");
    is_str(header(&a, "X-RateLimit-Reset"), "2", "reset 1.2 s rounds up to 2");
    answer_free(&a);
    request_free(&req);
}

static void test_shadow(void)
{
    struct check_request req;
    parse("{\"checks\":[{\"policy\":\"two\",\"key\":\"k\"},{\"policy\":\"shadowed\",\"key\":\"k\"}]}",
          &req);
    struct tier_result r[3] = {
        {.allowed = 1, .limit = 10, .remaining = 9, .reset_us = 100000},
        {.allowed = 1, .limit = 100, .remaining = 99, .reset_us = 1000},
        {.allowed = 0, .limit = 1, .remaining = 0, .reset_us = 5000000, .retry_us = 5000000},
    };
    struct answer a;
    render(&req, r, VERDICT_DECIDED, &a);
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
    render(&req, &r[2], VERDICT_DECIDED, &a);
    is_int(a.status, 200, "a request of only shadow checks is allowed");
    ok(header(&a, "Retry-After") == NULL, "with no Retry-After");
    answer_free(&a);
    request_free(&req);
}

static void test_leaky_delay(void)
{
    struct check_request req;
    parse("{\"policy\":\"shaped\",\"key\":\"k\"}", &req);
    struct tier_result r = {.allowed = 1, .limit = 4, .remaining = 1, .reset_us = 300000,
                            .delay_us = 200000};
    struct answer a;
    render(&req, &r, VERDICT_DECIDED, &a);
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
    render_unavailable(&req, "down", &a);
    json_t *b = body_of(&a);
    is_int(a.status, 200, "failure_mode open answers 200");
    ok(json_is_true(json_object_get(b, "allowed")) && json_is_true(json_object_get(b, "degraded")),
       "allowed and degraded");
    json_decref(b);
    answer_free(&a);
    request_free(&req);

    parse("{\"checks\":[{\"policy\":\"two\",\"key\":\"k\"},{\"policy\":\"closed\",\"key\":\"k\"}]}",
          &req);
    render_unavailable(&req, "down", &a);
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
    response_error(400, "invalid_key", "the \"key\" is empty", &a);
    json_t *b = body_of(&a);
    is_int(a.status, 400, "error status");
    is_str(json_string_value(json_object_get(b, "error")), "invalid_key", "error code");
    is_str(json_string_value(json_object_get(b, "message")), "the \"key\" is empty",
           "message escaped as JSON");
    json_decref(b);
    answer_free(&a);
    answer_free(&a);

    /* A message cut inside a UTF-8 character, and stray bytes. */
    response_error(400, "unknown_policy", "unknown policy \"a\xc3\xa9\xc3\"", &a);
    b = body_of(&a);
    is_int(a.status, 400, "a message with a cut UTF-8 character still answers 400");
    is_str(json_string_value(json_object_get(b, "message")), "unknown policy \"a\xc3\xa9?\"",
           "the broken byte becomes ?");
    json_decref(b);
    answer_free(&a);
    response_error(400, "x", "\xff\xfe ok \xe2\x82", &a);
    b = body_of(&a);
    is_str(json_string_value(json_object_get(b, "message")), "?? ok ??", "invalid bytes become ?");
    json_decref(b);
    answer_free(&a);
    /* overlong '/', a surrogate, past U+10FFFF, lead byte F5; then valid
     * 2-, 3- and 4-byte characters. */
    response_error(400, "x",
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
    config_unref(cfg);
    return tap_done();
}
