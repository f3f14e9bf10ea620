/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_grpc_wire.c: the hand-written RateLimitResponse (grpc_wire.c) is
 * byte for byte what protobuf-c packs from the same answer, built as the
 * gRPC front built it before (the reference below), on fixed edge cases
 * and 20 000 random answers; and protobuf-c unpacks it back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/decision.h"
#include "core/rate_headers.h"
#include "front/grpc/grpc_wire.h"
#include "lib/buf.h"
#include "tap.h"

#include "envoy/service/ratelimit/v3/rls.pb-c.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse Response;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus Status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit Limit;
typedef Envoy__Config__Core__V3__HeaderValue Header;

static uint32_t clamp_u32(int64_t v)
{
    return v < 0 ? 0 : v > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* The reference: a's RateLimitResponse packed by protobuf-c, prefixed. */
static void reference(struct buf *out, const struct rls_answer *a)
{
    Response resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    Status sts[REQUEST_MAX_CHECKS], *stp[REQUEST_MAX_CHECKS];
    Limit lims[REQUEST_MAX_CHECKS];
    Google__Protobuf__Duration durs[REQUEST_MAX_CHECKS];
    Header hs[RATE_HEADERS_MAX], *hsp[RATE_HEADERS_MAX];
    char *vals[RATE_HEADERS_MAX];
    resp.overall_code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)a->overall;
    for (size_t i = 0; i < a->nstatuses; i++) {
        const struct rls_status *r = &a->statuses[i];
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&sts[i]);
        sts[i].code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)r->code;
        sts[i].limit_remaining = clamp_u32(r->limit_remaining);
        if (r->has_limit) {
            envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(&lims[i]);
            lims[i].requests_per_unit = clamp_u32(r->requests_per_unit);
            lims[i].unit =
                (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)r->unit;
            lims[i].name = (char *)(r->limit_name ? r->limit_name : "");
            sts[i].current_limit = &lims[i];
            google__protobuf__duration__init(&durs[i]);
            durs[i].seconds = r->until_reset_s < 0 ? 0 : r->until_reset_s;
            sts[i].duration_until_reset = &durs[i];
        }
        stp[i] = &sts[i];
    }
    for (size_t i = 0; i < a->nheaders; i++) {
        envoy__config__core__v3__header_value__init(&hs[i]);
        hs[i].key = (char *)a->headers[i].name;
        vals[i] = calloc(1, a->headers[i].len + 1);
        memcpy(vals[i], a->headers[i].value, a->headers[i].len);
        hs[i].value = vals[i];
        hsp[i] = &hs[i];
    }
    resp.n_statuses = a->nstatuses;
    resp.statuses = stp;
    resp.n_response_headers_to_add = a->nheaders;
    resp.response_headers_to_add = hsp;
    size_t n = protobuf_c_message_get_packed_size(&resp.base);
    uint8_t *p = (uint8_t *)buf_reserve(out, GRPC_PREFIX + n);
    p[0] = 0;
    p[1] = (uint8_t)(n >> 24);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 8);
    p[4] = (uint8_t)n;
    out->len += GRPC_PREFIX + protobuf_c_message_pack(&resp.base, p + GRPC_PREFIX);
    for (size_t i = 0; i < a->nheaders; i++)
        free(vals[i]);
}

/* Both encodings of a; 1 when they are the same bytes (and the prefix's
 * length is the message's). */
static int same(const struct rls_answer *a)
{
    struct buf got = {0}, want = {0};
    size_t n = grpc_wire_rls_response(&got, a);
    reference(&want, a);
    int eq = n == got.len && got.len == want.len && memcmp(got.data, want.data, got.len) == 0;
    if (!eq)
        printf("#   %zu bytes, want %zu\n", got.len, want.len);
    buf_free(&got);
    buf_free(&want);
    return eq;
}

static int64_t pick(const int64_t *vals, size_t n)
{
    return vals[(size_t)rand() % n];
}

static void test_fixed(void)
{
    struct rls_answer a = {.outcome = RLS_DECIDED};
    ok(same(&a), "an empty answer (overall UNKNOWN, nothing else): no bytes past the prefix");
    struct buf b = {0};
    is_int(grpc_wire_rls_response(&b, &a), GRPC_PREFIX, "the prefix alone");
    buf_free(&b);

    struct rls_status st[3] = {
        {.code = RLS_CODE_OK, .limit_remaining = 4294967295LL},
        {.code = RLS_CODE_OVER_LIMIT,
         .has_limit = 1,
         .requests_per_unit = 0,
         .unit = RLS_UNIT_UNKNOWN,
         .limit_name = NULL,
         .until_reset_s = 0},
        {.code = RLS_CODE_OK,
         .has_limit = 1,
         .requests_per_unit = INT64_MAX,
         .unit = RLS_UNIT_WEEK,
         .limit_name = "policy/tier",
         .limit_remaining = -5,
         .until_reset_s = -1},
    };
    static const char v1[] = "10", v2[] = "1\0hidden";
    struct rls_header h[3] = {
        {"X-RateLimit-Limit", v1, 2}, {"Retry-After", v2, sizeof v2 - 1}, {"X-Empty", "", 0}};
    a = (struct rls_answer){.outcome = RLS_DECIDED,
                            .overall = RLS_CODE_OVER_LIMIT,
                            .statuses = st,
                            .nstatuses = 3,
                            .headers = h,
                            .nheaders = 3};
    ok(same(&a),
       "unlimited remaining, an empty limit and duration (written, empty), clamped numbers, a "
       "value cut at its NUL, an empty value");
}

static void test_random(void)
{
    static const int64_t nums[] = {
        0,         1,       127,      128,        16383,
        16384,     2097151, 2097152,  UINT32_MAX, (int64_t)UINT32_MAX + 1,
        INT64_MAX, -1,      INT64_MIN};
    static const char *names[] = {NULL, "", "a", "fw/minute", "x_y_z/with spaces and more"};
    static const char *hnames[] = {"X-RateLimit-Limit", "X-RateLimit-Remaining", "Retry-After",
                                   "RateLimit-Policy", "RateLimit"};
    char values[RATE_HEADERS_MAX][300];
    struct rls_status st[REQUEST_MAX_CHECKS];
    struct rls_header h[RATE_HEADERS_MAX];
    int bad = 0;
    srand(20);
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)rand() % (REQUEST_MAX_CHECKS + 1);
        if (round % 4)
            n %= 4;
        for (size_t i = 0; i < n; i++)
            st[i] = (struct rls_status){
                .code = (enum rls_code)(rand() % 3),
                .has_limit = rand() % 2,
                .requests_per_unit = pick(nums, sizeof nums / sizeof nums[0]),
                .unit = (enum rls_unit)(rand() % 8),
                .limit_name = names[(size_t)rand() % (sizeof names / sizeof names[0])],
                .limit_remaining = pick(nums, sizeof nums / sizeof nums[0]),
                .until_reset_s = pick(nums, sizeof nums / sizeof nums[0]),
            };
        size_t nh = (size_t)rand() % (RATE_HEADERS_MAX + 1);
        for (size_t i = 0; i < nh; i++) {
            /* Lengths across the one- and two-byte varints (127, 128). */
            size_t len = (size_t)rand() % sizeof values[i];
            for (size_t k = 0; k < len; k++)
                values[i][k] = (char)('0' + rand() % 75);
            h[i] = (struct rls_header){hnames[(size_t)rand() % 5], values[i], len};
        }
        struct rls_answer a = {.outcome = RLS_DECIDED,
                               .overall = (enum rls_code)(rand() % 3),
                               .statuses = st,
                               .nstatuses = n,
                               .headers = h,
                               .nheaders = nh};
        if (!same(&a)) {
            bad++;
            printf("#   round %d differs (%zu statuses, %zu headers)\n", round, n, nh);
            if (bad > 5)
                break;
        }
    }
    ok(bad == 0, "20 000 random answers (0 to 64 statuses, 0 to 9 headers): the same bytes as "
                 "protobuf-c's");
}

/* What protobuf-c reads back from the hand-written bytes. */
static void test_unpack(void)
{
    struct rls_status st[2] = {
        {.code = RLS_CODE_OVER_LIMIT,
         .has_limit = 1,
         .requests_per_unit = 600,
         .unit = RLS_UNIT_MINUTE,
         .limit_name = "p/t",
         .limit_remaining = 0,
         .until_reset_s = 42},
        {.code = RLS_CODE_OK, .limit_remaining = 4294967295LL},
    };
    struct rls_header h[1] = {{"Retry-After", "42", 2}};
    struct rls_answer a = {.outcome = RLS_DECIDED,
                           .overall = RLS_CODE_OVER_LIMIT,
                           .statuses = st,
                           .nstatuses = 2,
                           .headers = h,
                           .nheaders = 1};
    struct buf b = {0};
    size_t n = grpc_wire_rls_response(&b, &a);
    const uint8_t *p = (const uint8_t *)b.data;
    is_int((size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4], n - GRPC_PREFIX,
           "the prefix carries the message's length");
    Response *r = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n - GRPC_PREFIX,
                                                                             p + GRPC_PREFIX);
    ok(r != NULL, "protobuf-c unpacks it");
    if (r) {
        is_int(r->overall_code, 2, "overall_code OVER_LIMIT");
        is_int(r->n_statuses, 2, "two statuses");
        is_int(r->statuses[0]->current_limit->requests_per_unit, 600, "requests_per_unit");
        is_int(r->statuses[0]->current_limit->unit, 2, "unit MINUTE");
        is_str(r->statuses[0]->current_limit->name, "p/t", "the limit's name");
        is_int(r->statuses[0]->duration_until_reset->seconds, 42, "duration_until_reset");
        ok(r->statuses[1]->current_limit == NULL, "no current_limit without a limit");
        is_int(r->statuses[1]->limit_remaining, 4294967295LL, "limit_remaining");
        is_str(r->response_headers_to_add[0]->value, "42", "the header's value");
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
    }
    buf_free(&b);
}

int main(void)
{
    test_fixed();
    test_random();
    test_unpack();
    return tap_done();
}
