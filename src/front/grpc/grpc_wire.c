/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_wire.c: the RateLimitResponse's wire format (grpc_wire.h). Each
 * message's size is computed once, bottom-up, from the answer; then the
 * bytes are written in field-number order, as protobuf-c writes them.
 *
 * Owns the encoding only; not the mapping of a verdict to statuses
 * (rls.c), not the buffer nor the framing around it (grpc.c).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/decision.h"
#include "front/grpc/grpc_wire.h"

/* Wire types. */
#define WT_VARINT 0
#define WT_LEN 2

/* RateLimitResponse and the messages in it: the field numbers of
 * proto/envoy/service/ratelimit/v3/rls.proto and its imports. */
enum {
    RESP_OVERALL_CODE = 1,
    RESP_STATUSES = 2,
    RESP_HEADERS = 3,
    STATUS_CODE = 1,
    STATUS_CURRENT_LIMIT = 2,
    STATUS_LIMIT_REMAINING = 3,
    STATUS_DURATION = 4,
    LIMIT_REQUESTS_PER_UNIT = 1,
    LIMIT_UNIT = 2,
    LIMIT_NAME = 3,
    DURATION_SECONDS = 1,
    HEADER_KEY = 1,
    HEADER_VALUE = 2,
};

static uint32_t clamp_u32(int64_t v)
{
    return v < 0 ? 0 : v > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Every field number here is below 16: its tag is one byte. */
static uint8_t *put_tag(uint8_t *p, unsigned field, unsigned wt)
{
    *p++ = (uint8_t)(field << 3 | wt);
    return p;
}

/* A varint field, left out when 0 (proto3). Enums are int32 on the wire:
 * ours are never negative. */
static size_t num_len(uint64_t v)
{
    return v ? 1 + varint_len(v) : 0;
}

static uint8_t *put_num(uint8_t *p, unsigned field, uint64_t v)
{
    if (!v)
        return p;
    return put_varint(put_tag(p, field, WT_VARINT), v);
}

/* A length-delimited field (string or message) of len bytes. */
static size_t len_field(size_t len)
{
    return 1 + varint_len(len) + len;
}

static uint8_t *put_len(uint8_t *p, unsigned field, size_t len)
{
    return put_varint(put_tag(p, field, WT_LEN), len);
}

/* A string field, left out when empty (proto3). */
static size_t str_len(size_t len)
{
    return len ? len_field(len) : 0;
}

static uint8_t *put_str(uint8_t *p, unsigned field, const char *s, size_t len)
{
    if (!len)
        return p;
    p = put_len(p, field, len);
    memcpy(p, s, len);
    return p + len;
}

/* One status's fields, computed once for both passes. */
struct status_wire {
    uint32_t remaining, rpu;
    const char *name;
    size_t namelen;
    uint64_t seconds;
    size_t limit_size, duration_size, size;
};

static void status_measure(const struct rls_status *r, struct status_wire *w)
{
    *w = (struct status_wire){.remaining = clamp_u32(r->limit_remaining)};
    w->size = num_len((uint64_t)r->code) + num_len(w->remaining);
    if (r->has_limit) {
        w->rpu = clamp_u32(r->requests_per_unit);
        w->name = r->limit_name ? r->limit_name : "";
        w->namelen = strlen(w->name);
        w->seconds = r->until_reset_s < 0 ? 0 : (uint64_t)r->until_reset_s;
        w->limit_size = num_len(w->rpu) + num_len((uint64_t)r->unit) + str_len(w->namelen);
        w->duration_size = num_len(w->seconds);
        w->size += len_field(w->limit_size) + len_field(w->duration_size);
    }
}

static uint8_t *status_put(uint8_t *p, const struct rls_status *r, const struct status_wire *w)
{
    p = put_len(p, RESP_STATUSES, w->size);
    p = put_num(p, STATUS_CODE, (uint64_t)r->code);
    if (r->has_limit) {
        p = put_len(p, STATUS_CURRENT_LIMIT, w->limit_size);
        p = put_num(p, LIMIT_REQUESTS_PER_UNIT, w->rpu);
        p = put_num(p, LIMIT_UNIT, (uint64_t)r->unit);
        p = put_str(p, LIMIT_NAME, w->name, w->namelen);
    }
    p = put_num(p, STATUS_LIMIT_REMAINING, w->remaining);
    if (r->has_limit) {
        p = put_len(p, STATUS_DURATION, w->duration_size);
        p = put_num(p, DURATION_SECONDS, w->seconds);
    }
    return p;
}

/* A header's value is counted but may not hold a NUL: protobuf-c's strings
 * end at the first, so this one does too. */
static size_t header_value_len(const struct rls_header *h)
{
    const char *nul = memchr(h->value, '\0', h->len);
    return nul ? (size_t)(nul - h->value) : h->len;
}

size_t grpc_wire_rls_response(struct buf *out, const struct rls_answer *a)
{
    struct status_wire sw[REQUEST_MAX_CHECKS];
    size_t n = a->nstatuses;
    if (n > REQUEST_MAX_CHECKS)
        abort(); /* rls.c refuses more descriptors: a broken invariant */
    size_t size = num_len((uint64_t)a->overall);
    for (size_t i = 0; i < n; i++) {
        status_measure(&a->statuses[i], &sw[i]);
        size += len_field(sw[i].size);
    }
    for (size_t i = 0; i < a->nheaders; i++) {
        const struct rls_header *h = &a->headers[i];
        size += len_field(str_len(strlen(h->name)) + str_len(header_value_len(h)));
    }
    uint8_t *start = (uint8_t *)buf_reserve(out, GRPC_PREFIX + size), *p = start;
    *p++ = 0; /* not compressed */
    *p++ = (uint8_t)(size >> 24);
    *p++ = (uint8_t)(size >> 16);
    *p++ = (uint8_t)(size >> 8);
    *p++ = (uint8_t)size;
    p = put_num(p, RESP_OVERALL_CODE, (uint64_t)a->overall);
    for (size_t i = 0; i < n; i++)
        p = status_put(p, &a->statuses[i], &sw[i]);
    for (size_t i = 0; i < a->nheaders; i++) {
        const struct rls_header *h = &a->headers[i];
        size_t klen = strlen(h->name), vlen = header_value_len(h);
        p = put_len(p, RESP_HEADERS, str_len(klen) + str_len(vlen));
        p = put_str(p, HEADER_KEY, h->name, klen);
        p = put_str(p, HEADER_VALUE, h->value, vlen);
    }
    out->len += (size_t)(p - start);
    return (size_t)(p - start);
}
