/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rls.c: the pure parts of the Envoy rate limit service: the check's
 * key of a descriptor, the unit a `policy:` limit reports, the decoding of
 * POST /json bodies and the protojson answer; durations in whole seconds
 * and response_headers_to_add as the `headers:` mode says.
 */
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/rate_headers.h"
#include "core/rls.h"
#include "front/http/response.h"
#include "front/http/rls_json.h"
#include "lib/buf.h"
#include "tap.h"

#define E(k, v)                                                                                    \
    {                                                                                              \
        k, sizeof k - 1, v, sizeof v - 1                                                           \
    }

static void test_keys(void)
{
    static const struct {
        const char *domain;
        struct descriptor_entry e[2];
        size_t n;
        const char *want;
    } cases[] = {
        {"edge", {E("remote_address", "10.0.0.1")}, 1, "edge|remote_address=10.0.0.1"},
        {"edge", {E("a", "1"), E("b", "2")}, 2, "edge|a=1|b=2"},
        /* '|' and '=' inside a part cannot be mistaken for separators */
        {"edge", {E("a", "1|b=2")}, 1, "edge|a=1%7Cb%3D2"},
        {"ed|ge", {E("a=", "%")}, 1, "ed%7Cge|a%3D=%25"},
        {"edge", {E("k", "")}, 1, "edge|k="},
    };
    char out[POLICY_KEY_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long n = rls_key(cases[i].domain, strlen(cases[i].domain), cases[i].e, cases[i].n, out,
                         sizeof out);
        ok(n >= 0 && (size_t)n == strlen(cases[i].want) &&
               memcmp(out, cases[i].want, (size_t)n) == 0,
           "key %s", cases[i].want);
    }
    /* a NUL in a value is escaped: keys never hold NUL */
    struct descriptor_entry nul = {"k", 1, "a\0b", 3};
    long n = rls_key("d", 1, &nul, 1, out, sizeof out);
    ok(n == 9 && memcmp(out, "d|k=a%00b", 9) == 0, "NUL escaped as %%00");
    /* two descriptors that would collide without escaping */
    struct descriptor_entry x[2] = {E("a", "1|b=2"), E("c", "3")};
    struct descriptor_entry y[3] = {E("a", "1"), E("b", "2"), E("c", "3")};
    char kx[64], ky[64];
    long nx = rls_key("d", 1, x, 2, kx, sizeof kx), ny = rls_key("d", 1, y, 2, ky, sizeof ky);
    ok(nx > 0 && ny > 0 && (nx != ny || memcmp(kx, ky, (size_t)nx) != 0),
       "a|b in a value differs from two entries");
    /* too long: -1, never a cut key */
    is_int(rls_key("domain", 6, y, 1, out, 8), -1, "a key over the buffer is -1");
    is_int(rls_key("domain", 6, y, 1, out, 10), 10, "a key of exactly the buffer fits");
    /* escaping grows the key: 300 '%' are 900 bytes, 400 are over the limit */
    char big[400];
    memset(big, '%', sizeof big);
    struct descriptor_entry b = {"k", 1, big, 300};
    is_int(rls_key("d", 1, &b, 1, out, sizeof out), 904, "escaped length counted");
    b.valuelen = 400;
    is_int(rls_key("d", 1, &b, 1, out, sizeof out), -1, "escaped past POLICY_KEY_MAX: -1");
}

static void test_units(void)
{
    static const struct {
        int64_t limit, window_us;
        enum rls_unit unit;
        int64_t rpu;
    } cases[] = {
        {10, 1000000, RLS_UNIT_SECOND, 10},
        {100, 10000000, RLS_UNIT_MINUTE, 600},
        {5, 60000000, RLS_UNIT_MINUTE, 5},
        {5, 500000, RLS_UNIT_SECOND, 10},
        {1, 3000000, RLS_UNIT_MINUTE, 20},
        {7, 61000000, RLS_UNIT_HOUR, 414}, /* 7*3600/61 = 413.1: rounded up */
        {1000, 3600000000LL, RLS_UNIT_HOUR, 1000},
        {3, 86400000000LL, RLS_UNIT_DAY, 3},
        {3, 2 * 86400000000LL, RLS_UNIT_WEEK, 11}, /* 3*7/2 = 10.5 */
        {30, 30 * 86400000000LL, RLS_UNIT_MONTH, 30},
        {12, 365 * 86400000000LL, RLS_UNIT_YEAR, 12},
        {1, 2 * 365 * 86400000000LL, RLS_UNIT_YEAR, 1},    /* longer than a year: at least 1 */
        {1000000000, 1000, RLS_UNIT_SECOND, 4294967295LL}, /* held to uint32 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tier t = {.algorithm = ALG_FIXED_WINDOW,
                         .limit = cases[i].limit,
                         .window_us = cases[i].window_us};
        enum rls_unit u;
        int64_t rpu;
        rls_tier_unit(&t, &u, &rpu);
        ok(u == cases[i].unit && rpu == cases[i].rpu, "%lld per %lld us: %lld per %s",
           (long long)cases[i].limit, (long long)cases[i].window_us, (long long)cases[i].rpu,
           rls_unit_name(cases[i].unit));
        if (u != cases[i].unit || rpu != cases[i].rpu)
            printf("#   got %lld per %s\n", (long long)rpu, rls_unit_name(u));
    }
}

struct bad_case {
    const char *body;
    const char *code;
    const char *needle;
};

static void test_json_bad(void)
{
    static const struct bad_case bad[] = {
        {"", "invalid_json", "empty body"},
        {"[]", "invalid_request", "JSON object"},
        {"{\"descriptors\":[]}", "missing_field", "\"domain\""},
        {"{\"domain\":1}", "invalid_type", "\"domain\""},
        {"{\"domain\":\"d\",\"colour\":1}", "unknown_field", "\"colour\""},
        {"{\"domain\":\"d\",\"descriptors\":{}}", "invalid_type", "\"descriptors\""},
        {"{\"domain\":\"d\",\"descriptors\":[5]}", "invalid_type", "descriptors[0]"},
        {"{\"domain\":\"d\",\"descriptors\":[{\"entries\":[{\"value\":\"v\"}]}]}", "missing_field",
         "\"key\""},
        {"{\"domain\":\"d\",\"descriptors\":[{\"entries\":[{\"key\":1}]}]}", "invalid_type",
         "\"key\""},
        {"{\"domain\":\"d\",\"descriptors\":[{\"entries\":[{\"key\":\"k\",\"x\":1}]}]}",
         "unknown_field", "\"x\""},
        {"{\"domain\":\"d\",\"descriptors\":[{\"entries\":5}]}", "invalid_type", "\"entries\""},
        {"{\"domain\":\"d\",\"hits_addend\":-1}", "invalid_cost", "hits_addend"},
        {"{\"domain\":\"d\",\"hits_addend\":1.5}", "invalid_cost", "hits_addend"},
        {"{\"domain\":\"d\",\"hits_addend\":\"x1\"}", "invalid_cost", "hits_addend"},
        {"{\"domain\":\"d\",\"hits_addend\":1000000001}", "invalid_cost", "hits_addend"},
        {"{\"domain\":\"d\",\"hits_addend\":1,\"hitsAddend\":2}", "invalid_request", "both"},
        {"{\"domain\":\"d\",\"descriptors\":[{\"hits_addend\":-2}]}", "invalid_cost",
         "descriptors[0]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct rls_json j;
        struct request_error err;
        int rc = rls_json_parse(bad[i].body, strlen(bad[i].body), &j, &err);
        ok(rc == -1 && request_code_status(err.code) == 400 &&
               strcmp(request_code_name(err.code), bad[i].code) == 0 &&
               strstr(err.message, bad[i].needle),
           "bad body %s: %s", bad[i].body, bad[i].code);
        if (rc == 0)
            rls_json_free(&j);
        else if (strcmp(request_code_name(err.code), bad[i].code) != 0 ||
                 !strstr(err.message, bad[i].needle))
            printf("#   got %s: %s\n", request_code_name(err.code), err.message);
    }
    /* 65 descriptors: over REQUEST_MAX_CHECKS */
    struct buf b = {0};
    buf_append_str(&b, "{\"domain\":\"d\",\"descriptors\":[");
    for (int i = 0; i <= REQUEST_MAX_CHECKS; i++)
        buf_append_str(&b,
                       i ? ",{\"entries\":[{\"key\":\"k\"}]}" : "{\"entries\":[{\"key\":\"k\"}]}");
    buf_append_str(&b, "]}");
    struct rls_json j;
    struct request_error err;
    ok(rls_json_parse(b.data, b.len, &j, &err) == -1 && strstr(err.message, "over the limit"),
       "65 descriptors refused");
    buf_free(&b);
}

static void test_json_good(void)
{
    const char *body =
        "{\"domain\":\"edge\",\"hitsAddend\":3,\"descriptors\":["
        "{\"entries\":[{\"key\":\"a\",\"value\":\"1\"},{\"key\":\"b\"}]},"
        "{\"entries\":[{\"key\":\"c\",\"value\":\"x\\u0000y\"}],\"hits_addend\":\"7\"}]}";
    struct rls_json j;
    struct request_error err;
    int rc = rls_json_parse(body, strlen(body), &j, &err);
    ok(rc == 0, "a good body decodes");
    if (rc < 0) {
        printf("#   %s\n", err.message);
        return;
    }
    const struct rls_request *r = &j.req;
    ok(r->front == RLS_FRONT_JSON, "front json");
    ok(r->domainlen == 4 && memcmp(r->domain, "edge", 4) == 0, "domain");
    is_int(r->hits_addend, 3, "hitsAddend (camelCase)");
    is_int(r->ndescriptors, 2, "two descriptors");
    is_int(r->descriptors[0].nentries, 2, "first has two entries");
    is_int(r->descriptors[0].hits_addend, -1, "unset hits_addend is -1");
    ok(r->descriptors[0].entries[1].keylen == 1 && r->descriptors[0].entries[1].valuelen == 0,
       "a missing value is empty");
    is_int(r->descriptors[1].hits_addend, 7, "hits_addend as a uint64 string");
    ok(r->descriptors[1].entries[0].valuelen == 3, "a NUL inside a value is kept");
    rls_json_free(&j);
    rls_json_free(&j); /* freeing twice is safe */

    rc = rls_json_parse("{\"domain\":\"d\"}", 14, &j, &err);
    ok(rc == 0 && j.req.ndescriptors == 0 && j.req.hits_addend == 0,
       "no descriptors decodes (rls_start refuses it)");
    if (rc == 0)
        rls_json_free(&j);
}

/* The body of an HTTP answer in b (after the blank line). */
static const char *body_of(const struct buf *b)
{
    const char *p = strstr(b->data, "\r\n\r\n");
    return p ? p + 4 : "";
}

static void test_render(void)
{
    struct rls_status st[3] = {
        {.code = RLS_CODE_OVER_LIMIT,
         .has_limit = 1,
         .requests_per_unit = 5,
         .unit = RLS_UNIT_MINUTE,
         .limit_name = "login",
         .limit_remaining = 0,
         .until_reset_s = 42},
        {.code = RLS_CODE_OK},
        {.code = RLS_CODE_OK,
         .has_limit = 1,
         .requests_per_unit = 10,
         .unit = RLS_UNIT_SECOND,
         .limit_remaining = 4,
         .until_reset_s = 2},
    };
    struct rls_header h[1] = {{"X-RateLimit-Limit", "5", 1}};
    struct rls_answer a = {.outcome = RLS_DECIDED,
                           .overall = RLS_CODE_OVER_LIMIT,
                           .statuses = st,
                           .nstatuses = 3,
                           .headers = h,
                           .nheaders = 1};
    struct buf b = {0};
    is_int(response_rls(&b, &a, 0), 429, "OVER_LIMIT is 429");
    buf_append_char(&b, '\0');
    is_str(
        body_of(&b),
        "{\"overallCode\":\"OVER_LIMIT\",\"statuses\":[{\"code\":\"OVER_LIMIT\",\"currentLimit\":"
        "{\"requestsPerUnit\":5,\"unit\":\"MINUTE\",\"name\":\"login\"},"
        "\"durationUntilReset\":\"42s\"},{\"code\":\"OK\"},{\"code\":\"OK\",\"currentLimit\":"
        "{\"requestsPerUnit\":10,\"unit\":\"SECOND\"},\"limitRemaining\":4,"
        "\"durationUntilReset\":\"2s\"}],\"responseHeadersToAdd\":[{\"key\":"
        "\"X-RateLimit-Limit\",\"value\":\"5\"}]}\n",
        "protojson: zero fields left out, enums by name, durations in whole seconds");
    b.len = 0;
    st[0].until_reset_s = 1;
    a.overall = RLS_CODE_OK;
    a.nstatuses = 1;
    a.nheaders = 0;
    is_int(response_rls(&b, &a, 0), 200, "OK is 200");
    buf_append_char(&b, '\0');
    ok(strstr(body_of(&b), "\"durationUntilReset\":\"1s\"") != NULL, "1 s: \"1s\"");
    ok(strstr(body_of(&b), "responseHeadersToAdd") == NULL, "no headers: field left out");
    b.len = 0;
    struct rls_answer u = {.outcome = RLS_UNAVAILABLE, .message = "redis is unavailable"};
    is_int(response_rls(&b, &u, 0), 503, "unavailable is 503");
    buf_append_char(&b, '\0');
    ok(strstr(b.data, "Retry-After: 1\r\n") && strstr(body_of(&b), "backend_unavailable"),
       "503 backend_unavailable with Retry-After");
    buf_free(&b);
}

static void test_whole_seconds(void)
{
    static const struct {
        int64_t us, s;
    } cases[] = {
        {0, 0},       {-5, 0},      {1, 1},         {637000, 1},    {999999, 1},
        {1000000, 1}, {1000001, 2}, {37620000, 38}, {60000000, 60}, {3600000000LL, 3600},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        is_int(rls_whole_seconds(cases[i].us), cases[i].s, "%lld us is %lld s",
               (long long)cases[i].us, (long long)cases[i].s);
}

/* The headers of a one-check verdict of policy `name` (one tier). */
static size_t verdict_headers(const struct config *c, const char *name, int allowed, int envoy,
                              struct rate_headers *hs)
{
    struct check_item it = {
        .policy = config_find_policy(c, name), .key = "k", .keylen = 1, .cost = 1};
    struct check_request req = {.nchecks = 1, .checks = &it};
    struct tier_result r = {.allowed = allowed,
                            .limit = 5,
                            .remaining = allowed ? 3 : 0,
                            .reset_us = 1200000,
                            .retry_us = allowed ? 0 : 1200000};
    struct verdict v = {.kind = VERDICT_DECIDED, .req = &req, .results = &r};
    decision_summarize(&req, &r, &v.sum);
    rate_headers_init(hs);
    if (envoy)
        rate_headers_verdict_envoy(hs, &v);
    else
        rate_headers_verdict(hs, &v);
    return hs->n;
}

static int has_header(const struct rate_headers *hs, const char *name)
{
    for (size_t i = 0; i < hs->n; i++)
        if (strcmp(hs->h[i].name, name) == 0)
            return 1;
    return 0;
}

static void test_envoy_headers(void)
{
    static const char yaml[] = "policies:\n"
                               "  x: {tiers: [{name: t, algorithm: fixed_window, limit: 5, "
                               "window: 1m}]}\n"
                               "  none: {headers: none, tiers: [{name: t, algorithm: "
                               "fixed_window, limit: 5, window: 1m}]}\n"
                               "  ietf: {headers: ietf, tiers: [{name: t, algorithm: "
                               "fixed_window, limit: 5, window: 1m}]}\n";
    char err[512];
    struct config *c = config_load_string("t.yaml", yaml, sizeof yaml - 1, err, sizeof err);
    if (!c) {
        printf("# %s\n", err);
        exit(1);
    }
    struct rate_headers hs;
    is_int(verdict_headers(c, "none", 0, 1, &hs), 0,
           "Envoy, headers: none, denied: nothing at all (no Retry-After)");
    is_int(verdict_headers(c, "none", 1, 1, &hs), 0, "Envoy, headers: none, allowed: nothing");
    is_int(verdict_headers(c, "none", 0, 0, &hs), 1, "/check, headers: none, denied: one header");
    ok(has_header(&hs, "Retry-After"), "/check keeps Retry-After in every mode");
    is_int(verdict_headers(c, "x", 0, 1, &hs), 4, "Envoy, x-ratelimit, denied: 4 headers");
    ok(has_header(&hs, "X-RateLimit-Limit") && has_header(&hs, "Retry-After"),
       "X-RateLimit-* with Retry-After");
    is_int(verdict_headers(c, "x", 1, 1, &hs), 3, "Envoy, x-ratelimit, allowed: 3 headers");
    ok(!has_header(&hs, "Retry-After"), "no Retry-After when allowed");
    verdict_headers(c, "ietf", 0, 1, &hs);
    ok(has_header(&hs, "RateLimit") && has_header(&hs, "RateLimit-Policy") &&
           has_header(&hs, "Retry-After") && !has_header(&hs, "X-RateLimit-Limit"),
       "Envoy, ietf, denied: RateLimit, RateLimit-Policy, Retry-After");
    config_unref(c);
}

int main(void)
{
    test_keys();
    test_units();
    test_json_bad();
    test_json_good();
    test_render();
    test_whole_seconds();
    test_envoy_headers();
    return tap_done();
}
