/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_call.c: the calls of the gRPC front (grpc.h): a stream's request
 * headers and message as nghttp2 hands them over, the message decoded
 * with protobuf-c and handed to rls.c (ShouldRateLimit) or answered here
 * (Health/Check), and the answer submitted to the stream.
 *
 * One stream is one struct stream: the request message (at most max_body
 * bytes past its 5-byte gRPC prefix), the pending rls call, the packed
 * answer for the data provider. The answer is written once the client ends
 * its stream; every error is a trailers-only answer (one HEADERS frame with
 * grpc-status and a percent-encoded grpc-message), so a failed call never
 * costs the connection. A stream the client resets cancels its call.
 *
 * Owns the streams (and the front's spare ones), their calls and their
 * answers; not the connection, its session's settings, its bytes and its
 * timers (grpc.c), not the decision (rls.c), not the answer's wire format
 * (grpc_wire.c).
 */
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "core/metrics.h"
#include "core/rls.h"
#include "front/grpc/grpc_arena.h"
#include "front/grpc/grpc_call.h"
#include "front/grpc/grpc_conn.h"
#include "front/grpc/grpc_wire.h"
#include "front/listener.h"
#include "lib/buf.h"

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"

/* Streams kept for reuse by the front (with their buffers, each held to
 * GRPC_SPARE_BUF bytes): a steady load allocates no stream. */
#define GRPC_SPARE_STREAMS 64
#define GRPC_SPARE_BUF 4096

#define PATH_RLS "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define PATH_HEALTH "/grpc.health.v1.Health/Check"
#define RLS_SERVICE "envoy.service.ratelimit.v3.RateLimitService"

/* gRPC status codes (grpc/doc/statuscodes.md). */
enum grpc_status {
    GRPC_OK = 0,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_NOT_FOUND = 5,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_UNAVAILABLE = 14,
    GRPC_UNAUTHENTICATED = 16,
};

/* ---- streams ---- */

/* A buffer a spare stream keeps: emptied, and freed when it grew large. */
static void buf_recycle(struct buf *b)
{
    if (b->cap > GRPC_SPARE_BUF)
        buf_free(b);
    b->len = 0;
}

void grpc_call_stream_free(struct stream *st)
{
    struct grpc *g = st->c->g;
    if (st->call)
        rls_cancel(st->call);
    LIST_REMOVE(st, link);
    if (g->nspare < GRPC_SPARE_STREAMS) {
        buf_recycle(&st->body);
        buf_recycle(&st->resp);
        LIST_INSERT_HEAD(&g->spare, st, link);
        g->nspare++;
        return;
    }
    buf_free(&st->body);
    buf_free(&st->resp);
    free(st);
}

/* A zeroed stream, reusing a spare one and its buffers when there is one. */
static struct stream *stream_new(struct grpc *g)
{
    struct stream *st = LIST_FIRST(&g->spare);
    if (!st)
        return xcalloc(1, sizeof *st);
    LIST_REMOVE(st, link);
    g->nspare--;
    struct buf body = st->body, resp = st->resp;
    *st = (struct stream){.body = body, .resp = resp};
    return st;
}

/* grpc-message is percent-encoded (the gRPC HTTP/2 protocol): every byte
 * outside printable ASCII, and '%' itself. */
static void percent_encode(char *out, size_t outlen, const char *msg)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 4 <= outlen; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof n - 1, strlen(v), NGHTTP2_NV_FLAG_NONE              \
    }

/* A trailers-only answer: one HEADERS frame ending the stream. */
static void answer_error(struct stream *st, enum grpc_status code, const char *message)
{
    char status[12], msg[RL_ERRLEN * 3 + 1];
    snprintf(status, sizeof status, "%d", (int)code);
    percent_encode(msg, sizeof msg, message);
    const nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                              NV("grpc-status", status), NV("grpc-message", msg)};
    st->answered = 1;
    /* Fails only for a stream already closed or out of memory: the
     * stream then ends by itself (reset) or the connection does. */
    (void)nghttp2_submit_response(st->c->s, st->id, nva, sizeof nva / sizeof nva[0], NULL);
}

static ssize_t read_resp(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *user)
{
    struct stream *st = src->ptr;
    size_t n = st->resp.len - st->resp_off;
    if (n > len)
        n = len;
    memcpy(buf, st->resp.data + st->resp_off, n);
    st->resp_off += n;
    if (st->resp_off == st->resp.len) {
        /* The status goes in trailers after the message. */
        static const nghttp2_nv trailers[] = {NV("grpc-status", "0")};
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (nghttp2_submit_trailer(s, id, trailers, 1) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return (ssize_t)n;
}

/* Answers st with what st->resp holds (prefix + message): HEADERS, DATA
 * (read_resp copies it into nghttp2's frame), trailers. */
static void answer_resp(struct stream *st)
{
    static const nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    st->answered = 1;
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_resp};
    (void)nghttp2_submit_response(st->c->s, st->id, nva, 2, &prd); /* as in answer_error */
}

/* Answers st with message m, packed by protobuf-c (Health/Check). */
static void answer_message(struct stream *st, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *p = (uint8_t *)buf_reserve(&st->resp, GRPC_PREFIX + n);
    p[0] = 0;
    p[1] = (uint8_t)(n >> 24);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 8);
    p[4] = (uint8_t)n;
    st->resp.len = GRPC_PREFIX + protobuf_c_message_pack(m, p + GRPC_PREFIX);
    answer_resp(st);
}

/* ---- ShouldRateLimit ---- */

/* Writes the answer straight into st's response buffer (grpc_wire.h). */
static void answer_rls(struct stream *st, const struct rls_answer *a)
{
    st->resp.len = 0;
    (void)grpc_wire_rls_response(&st->resp, a); /* its length: st->resp.len */
    answer_resp(st);
}

static void on_rls_reply(void *ctx, const struct rls_answer *a)
{
    struct stream *st = ctx;
    struct gconn *c = st->c;
    st->call = NULL;
    if (a->outcome == RLS_UNAVAILABLE)
        answer_error(st, GRPC_UNAVAILABLE, a->message ? a->message : "unavailable");
    else
        answer_rls(st, a);
    /* Within nghttp2 (busy) on_read writes once it returns. */
    if (!c->busy)
        grpc_reply_due(c);
}

/* The request's descriptors as rls.h wants them, pointing into m; all of
 * it (m too) in the front's arena, which the caller resets once rls_start
 * has read it. NULL when m cannot be decoded. */
static int decode_rls(struct grpc_arena *arena, const uint8_t *msg, size_t len,
                      struct rls_request *req)
{
    ProtobufCAllocator alloc = grpc_arena_protobuf(arena);
    Envoy__Service__Ratelimit__V3__RateLimitRequest *m =
        envoy__service__ratelimit__v3__rate_limit_request__unpack(&alloc, len, msg);
    if (!m)
        return -1;
    size_t nd = m->n_descriptors, ne = 0;
    for (size_t i = 0; i < nd; i++)
        ne += m->descriptors[i]->n_entries;
    /* Counts bounded by the message's length (each takes bytes of it):
     * the products cannot overflow. */
    struct rls_descriptor *ds = grpc_arena_alloc(arena, nd * sizeof *ds);
    struct descriptor_entry *es = grpc_arena_alloc(arena, ne * sizeof *es);
    if (!ds || !es)
        return -1;
    struct descriptor_entry *e = es;
    for (size_t i = 0; i < nd; i++) {
        ds[i] = (struct rls_descriptor){0};
        const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d = m->descriptors[i];
        ds[i].entries = e;
        ds[i].nentries = d->n_entries;
        /* UInt64Value: set or not; past INT64_MAX it is over any cost
         * limit anyway, and rls.c says so. */
        ds[i].hits_addend =
            d->hits_addend
                ? (d->hits_addend->value > INT64_MAX ? INT64_MAX : (int64_t)d->hits_addend->value)
                : -1;
        if (d->limit) {
            ds[i].has_limit = 1;
            ds[i].limit_unit = (enum rls_unit)d->limit->unit;
            ds[i].limit_requests_per_unit = d->limit->requests_per_unit;
        }
        for (size_t j = 0; j < d->n_entries; j++, e++) {
            /* protobuf-c ends strings at their first NUL: a key or value
             * holding one is cut there (protobuf strings are UTF-8 text). */
            e->key = d->entries[j]->key;
            e->keylen = strlen(e->key);
            e->value = d->entries[j]->value;
            e->valuelen = strlen(e->value);
        }
    }
    *req = (struct rls_request){.domain = m->domain,
                                .domainlen = strlen(m->domain),
                                .descriptors = ds,
                                .ndescriptors = nd,
                                .hits_addend = m->hits_addend};
    return 0;
}

static void start_rls(struct stream *st, const uint8_t *msg, size_t len)
{
    struct grpc *g = st->c->g;
    struct core *core = g->host->core;
    struct rls_request req;
    if (decode_rls(&g->arena, msg, len, &req) < 0) {
        grpc_arena_reset(&g->arena);
        /* Counted as POST /json counts a body it cannot decode (rls.h). */
        metrics_rls_request(core->metrics, METRICS_RLS_GRPC, METRICS_RLS_INVALID);
        answer_error(st, GRPC_INVALID_ARGUMENT, "cannot decode the RateLimitRequest message");
        return;
    }
    struct request_error err;
    struct rls_call *call = NULL;
    int rc = rls_start(core, &req, on_rls_reply, st, &call, &err);
    /* rls_start read the request and keeps nothing of it (rls.h). */
    grpc_arena_reset(&g->arena);
    if (rc < 0) {
        answer_error(st, GRPC_INVALID_ARGUMENT, err.message);
        return;
    }
    if (!st->answered)
        st->call = call;
}

/* ---- Health/Check ---- */

static void answer_health(struct stream *st, const uint8_t *msg, size_t len)
{
    Grpc__Health__V1__HealthCheckRequest *m =
        grpc__health__v1__health_check_request__unpack(NULL, len, msg);
    if (!m) {
        answer_error(st, GRPC_INVALID_ARGUMENT, "cannot decode the HealthCheckRequest message");
        return;
    }
    int known = m->service[0] == '\0' || strcmp(m->service, RLS_SERVICE) == 0;
    grpc__health__v1__health_check_request__free_unpacked(m, NULL);
    if (!known) {
        answer_error(st, GRPC_NOT_FOUND, "unknown service");
        return;
    }
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    resp.status = st->c->g->host->unready_reason(st->c->g->host->arg)
                      ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                      : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    answer_message(st, &resp.base);
}

/* ---- one call, once the client ended its stream ---- */

static void dispatch(struct stream *st)
{
    struct gconn *c = st->c;
    const uint8_t *b = (const uint8_t *)st->body.data;
    size_t len = st->body.len;
    if (!st->post || !st->grpc_type) {
        answer_error(st, GRPC_UNIMPLEMENTED, "only POST with content-type application/grpc");
        return;
    }
    if (st->method == METHOD_UNKNOWN) {
        answer_error(st, GRPC_UNIMPLEMENTED, "unknown method");
        return;
    }
    if (c->over_limit) {
        /* Then the connection ends, as the HTTP front closes one. */
        answer_error(st, GRPC_UNAVAILABLE, "the daemon has too many connections");
        /* Fails only out of memory: the connection then stays, each of
         * its calls answered so, until idle_timeout. */
        (void)nghttp2_submit_goaway(c->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR, NULL, 0);
        return;
    }
    if (!st->compressed_ok || (len > 0 && b[0] != 0)) {
        answer_error(st, GRPC_UNIMPLEMENTED, "compressed messages are not supported");
        return;
    }
    if (st->too_big) {
        answer_error(st, GRPC_RESOURCE_EXHAUSTED, "the message is larger than max_body");
        return;
    }
    uint32_t mlen = len >= GRPC_PREFIX ? (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 |
                                             (uint32_t)b[3] << 8 | (uint32_t)b[4]
                                       : 0;
    if (len < GRPC_PREFIX || len - GRPC_PREFIX != mlen) {
        answer_error(st, GRPC_INVALID_ARGUMENT, "a unary call carries exactly one message");
        return;
    }
    if (st->method == METHOD_HEALTH) {
        answer_health(st, b + GRPC_PREFIX, mlen);
        return;
    }
    if (!st->authorized) {
        answer_error(st, GRPC_UNAUTHENTICATED, "a valid authorization: Bearer token is required");
        return;
    }
    start_rls(st, b + GRPC_PREFIX, mlen);
}

/* ---- nghttp2 callbacks ---- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    struct gconn *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct stream *st = stream_new(c->g);
    st->c = c;
    st->id = f->hd.stream_id;
    st->compressed_ok = 1;
    st->authorized = listener_bearer_ok(&c->g->l, NULL, 0);
    LIST_INSERT_HEAD(&c->streams, st, link);
    metrics_count(c->g->host->core->metrics, METRICS_GRPC_STREAMS);
    if (nghttp2_session_set_stream_user_data(s, st->id, st) != 0) {
        grpc_call_stream_free(st);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static int header_is(const uint8_t *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
    struct gconn *c = user;
    struct stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!st || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers: nothing in them matters */
    st->header_bytes += nlen + vlen + 32;
    if (st->header_bytes > GRPC_HEADER_LIST_MAX)
        /* Resets the stream: the peer ignored SETTINGS_MAX_HEADER_LIST_SIZE. */
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (header_is(name, nlen, ":path")) {
        st->method = header_is(value, vlen, PATH_RLS)      ? METHOD_RLS
                     : header_is(value, vlen, PATH_HEALTH) ? METHOD_HEALTH
                                                           : METHOD_UNKNOWN;
    } else if (header_is(name, nlen, ":method")) {
        st->post = header_is(value, vlen, "POST");
    } else if (header_is(name, nlen, "content-type")) {
        /* application/grpc, application/grpc+proto, application/grpc;... */
        st->grpc_type = vlen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                        (vlen == 16 || value[16] == '+' || value[16] == ';');
    } else if (header_is(name, nlen, "grpc-encoding")) {
        st->compressed_ok = header_is(value, vlen, "identity");
    } else if (header_is(name, nlen, "authorization")) {
        st->authorized = listener_bearer_ok(&c->g->l, (const char *)value, vlen);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user)
{
    struct gconn *c = user;
    struct stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (!st || st->too_big)
        return 0;
    if (st->body.len + len > GRPC_PREFIX + c->g->max_msg) {
        /* Dropped as it comes: the call gets RESOURCE_EXHAUSTED at its end. */
        st->too_big = 1;
        buf_free(&st->body);
        return 0;
    }
    buf_append(&st->body, data, len);
    return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK))
        grpc_drain_acked(user);
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st && !st->answered)
        dispatch(st);
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
    struct stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st)
        grpc_call_stream_free(st); /* cancels a call still pending: the stream was reset */
    return 0;
}

void grpc_call_callbacks(nghttp2_session_callbacks *cb)
{
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
}

void grpc_call_spare_free(struct grpc *g)
{
    while (!LIST_EMPTY(&g->spare)) {
        struct stream *st = LIST_FIRST(&g->spare);
        LIST_REMOVE(st, link);
        buf_free(&st->body);
        buf_free(&st->resp);
        free(st);
    }
}
