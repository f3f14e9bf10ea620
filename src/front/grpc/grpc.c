/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc.c: the gRPC front of one worker (grpc.h): h2c connections on
 * libevent's core, one nghttp2 server session each, unary calls decoded
 * with protobuf-c and handed to rls.c (ShouldRateLimit) or answered here
 * (Health/Check).
 *
 * Bytes move by hand, not through nghttp2's send/recv callbacks: what is
 * read goes to nghttp2_session_mem_recv from the stack; what nghttp2 wants
 * to send is pulled with nghttp2_session_mem_send into the connection's
 * output buffer only while that holds less than GRPC_OUT_MAX, and the read
 * event is removed while it is full, so a peer that does not read stops
 * being read (its requests stay in the kernel's buffers, not ours).
 *
 * One stream is one struct stream: the request message (at most max_body
 * bytes past its 5-byte gRPC prefix), the pending rls call, the packed
 * answer for the data provider. The answer is written once the client ends
 * its stream; every error is a trailers-only answer (one HEADERS frame with
 * grpc-status and a percent-encoded grpc-message), so a failed call never
 * costs the connection. A stream the client resets cancels its call.
 *
 * A connection is never freed under nghttp2: a reply from the core that
 * comes inside one of nghttp2's callbacks (rls_start answering at once) is
 * only submitted, and written once nghttp2 returns (busy); a reply that
 * comes later (a backend's) is submitted, and the connection is written
 * once the loop has run every callback that is due (flush_ev): the replies
 * of one batch from Redis to the streams of one connection leave in one
 * write, not one each. Only then may the connection end.
 *
 * Owns the HTTP/2 connections and the limits on them, and the front's
 * instance (front.h); not the listening socket, the accepting and the
 * counting (listener.c), not the decision (rls.c).
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "core/metrics.h"
#include "core/rls.h"
#include "front/front.h"
#include "front/grpc/grpc.h"
#include "front/grpc/grpc_arena.h"
#include "front/grpc/grpc_wire.h"
#include "front/listener.h"
#include "front/tls.h"
#include "lib/buf.h"
#include "lib/timer.h"

#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"

#define GRPC_READ_CHUNK 16384
/* nghttp2's RST_STREAM token bucket (CVE-2023-44487): a burst, then so
 * many a second; past it, GOAWAY and the connection ends. A client that
 * cancels calls now and then stays far below. */
#define GRPC_RST_BURST 1000
#define GRPC_RST_RATE 33
/* SETTINGS entries in one frame, and acknowledgements (SETTINGS, PING)
 * queued in nghttp2 and not yet sent: past either the peer floods and the
 * connection ends. A read brings at most GRPC_READ_CHUNK bytes, up to 963
 * PINGs, all queued before any is sent; a client's keepalive sends one at a
 * time, so a few hundred in one read is a flood. */
#define GRPC_MAX_SETTINGS 32
#define GRPC_MAX_OUTBOUND_ACK 200
/* The decode arena's block: a request of a few descriptors unpacks into
 * well under 1 KiB; a larger one takes malloc'd blocks, freed at once. */
#define GRPC_ARENA_SIZE 8192
/* Streams kept for reuse by the front (with their buffers, each held to
 * GRPC_SPARE_BUF bytes): a steady load allocates no stream. */
#define GRPC_SPARE_STREAMS 64
#define GRPC_SPARE_BUF 4096
/* After the last frame (a GOAWAY), reading and dropping what the peer
 * still sends for this long before closing: closing with unread input
 * makes the kernel reset the connection, and the peer would lose the
 * GOAWAY that says why. */
#define GRPC_LINGER_US 1000000

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

enum method { METHOD_UNKNOWN, METHOD_RLS, METHOD_HEALTH };

struct gconn;

struct stream {
    struct gconn *c;
    int32_t id;
    enum method method;
    int post;              /* :method POST */
    int grpc_type;         /* content-type application/grpc[+proto|;...] */
    int compressed_ok;     /* grpc-encoding absent or identity */
    int authorized;        /* the bearer token matched (or none is needed) */
    size_t header_bytes;   /* counted as SETTINGS_MAX_HEADER_LIST_SIZE does */
    int too_big;           /* the message passed max_body: not kept */
    struct buf body;       /* the request's DATA */
    struct rls_call *call; /* while rls decides */
    int answered;
    struct buf resp; /* the answer's DATA (prefix + message) */
    size_t resp_off;
    LIST_ENTRY(stream) link;
};

struct gconn {
    struct grpc *g;
    int fd;
    struct front_io io; /* fd's bytes, plain or TLS */
    nghttp2_session *s;
    struct event rd, wr, timer;
    struct event flush_ev; /* active while a later reply waits to be written */
    int flush_due;
    struct buf out; /* bytes from nghttp2 not yet written; out_off of them are */
    size_t out_off;
    int64_t last_us;
    int counted;    /* counts towards max_connections */
    int over_limit; /* came past max_connections: every call gets UNAVAILABLE */
    int busy;
    int closing;   /* read nothing more into nghttp2: end once written */
    int mute;      /* a flood: send nothing more either */
    int lingering; /* written and shut down: dropping what the peer sends */
    int64_t linger_until_us;
    int reading, writing;
    int proto_error; /* ended for a protocol error or a flood (counted once) */
    LIST_HEAD(, stream) streams;
    LIST_ENTRY(gconn) link;
};

struct grpc {
    struct front base; /* first: the worker holds the front by it */
    const struct front_host *host;
    struct listener l; /* grpc_listen, counting, the token, draining */
    size_t max_msg;
    uint32_t max_streams;
    int64_t idle_us;
    LIST_HEAD(, gconn) conns;
    /* Freed streams kept for the next ones (at most GRPC_SPARE_STREAMS). */
    LIST_HEAD(, stream) spare;
    size_t nspare;
    /* What one call's decoding allocates: reset once the core has it. */
    struct grpc_arena arena;
    /* What nghttp2 allocates, for every session of the front. */
    struct grpc_pool pool;
    nghttp2_mem mem;
};

static void settle(struct gconn *c);

/* ---- streams ---- */

/* A buffer a spare stream keeps: emptied, and freed when it grew large. */
static void buf_recycle(struct buf *b)
{
    if (b->cap > GRPC_SPARE_BUF)
        buf_free(b);
    b->len = 0;
}

static void stream_free(struct stream *st)
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
    (void)grpc_wire_rls_response(&st->resp, a);
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
    /* Within nghttp2 (busy) on_read writes once it returns; otherwise at
     * the end of this loop turn, with the other replies of the turn. */
    if (!c->busy && !c->flush_due) {
        c->flush_due = 1;
        event_active(&c->flush_ev, EV_TIMEOUT, 1);
    }
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
    struct grpc *g = c->g;
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
    if (*g->host->draining) {
        answer_error(st, GRPC_UNAVAILABLE, "the daemon is shutting down");
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
        stream_free(st);
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
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (st && !st->answered)
        dispatch(st);
    return 0;
}

/* Counted when seen (not when the connection is freed, a linger later),
 * once per connection. */
static void count_proto_error(struct gconn *c)
{
    if (!c->proto_error)
        metrics_count(c->g->host->core->metrics, METRICS_GRPC_PROTOCOL_ERRORS);
    c->proto_error = 1;
}

/* nghttp2 ends a connection for a peer's error by itself (a flood of
 * RST_STREAM, too many SETTINGS entries...): its GOAWAY says so. */
static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
    struct gconn *c = user;
    if (f->hd.type == NGHTTP2_GOAWAY && f->goaway.error_code != NGHTTP2_NO_ERROR)
        count_proto_error(c);
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
    struct stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st)
        stream_free(st); /* cancels a call still pending: the stream was reset */
    return 0;
}

/* ---- the connection ---- */

static void conn_free(struct gconn *c)
{
    struct grpc *g = c->g;
    while (!LIST_EMPTY(&c->streams))
        stream_free(LIST_FIRST(&c->streams));
    nghttp2_session_del(c->s);
    /* event_del fails only for an event never assigned; close only on a
     * bad descriptor: neither can happen here. */
    event_del(&c->rd);
    event_del(&c->wr);
    event_del(&c->timer);
    event_del(&c->flush_ev);
    front_io_fini(&c->io);
    close(c->fd);
    buf_free(&c->out);
    if (c->counted)
        listener_release(&g->l);
    LIST_REMOVE(c, link);
    free(c);
    g->host->maybe_idle(g->host->arg);
}

static int conn_active(const struct gconn *c)
{
    return !LIST_EMPTY(&c->streams) || c->out_off < c->out.len || front_io_pending(&c->io) ||
           nghttp2_session_want_write(c->s);
}

/* Pulls what nghttp2 wants to send while the output holds less than
 * GRPC_OUT_MAX, then writes. Returns -1 if the connection must close. */
static int flush(struct gconn *c)
{
    if (front_io_flush(&c->io) < 0)
        return -1;
    for (;;) {
        while (!c->mute && c->out.len - c->out_off < GRPC_OUT_MAX) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(c->s, &data);
            if (n < 0)
                return -1;
            if (n == 0)
                break;
            if (c->out_off == c->out.len)
                c->out.len = c->out_off = 0;
            buf_append(&c->out, data, (size_t)n);
        }
        if (c->out_off == c->out.len)
            return 0;
        ssize_t n = front_io_send(&c->io, c->out.data + c->out_off, c->out.len - c->out_off);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->last_us = util_monotonic_us();
            if (c->out_off == c->out.len)
                c->out.len = c->out_off = 0;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        } else {
            return -1;
        }
    }
}

/* A stream waits for the core: the core answers every call in time. Other
 * open streams wait for the peer (a request never ended, an answer its
 * flow-control window holds back) and keep no connection past idle_timeout. */
static int conn_deciding(const struct gconn *c)
{
    const struct stream *st;
    for (st = LIST_FIRST(&c->streams); st; st = LIST_NEXT(st, link))
        if (st->call)
            return 1;
    return 0;
}

static void arm_timer(struct gconn *c)
{
    if (!c->lingering && !c->writing && conn_deciding(c)) {
        event_del(&c->timer);
        return;
    }
    int64_t deadline = c->lingering ? c->linger_until_us : c->last_us + c->g->idle_us;
    timer_arm_us(&c->timer, deadline - util_monotonic_us());
}

/* Writes what is due, then decides what the connection waits for. */
static void settle(struct gconn *c)
{
    if (flush(c) < 0) {
        conn_free(c);
        return;
    }
    int pending = c->out_off < c->out.len || front_io_pending(&c->io);
    if (!pending && !c->lingering &&
        (c->closing || (!nghttp2_session_want_read(c->s) && !nghttp2_session_want_write(c->s)))) {
        /* The last frame is written (a GOAWAY after a drain, an error, a
         * flood, or idle_timeout) and no stream is left to answer. */
        front_io_shutdown(&c->io);
        if (shutdown(c->fd, SHUT_WR) < 0) {
            conn_free(c);
            return;
        }
        c->lingering = 1;
        c->linger_until_us = util_monotonic_us() + GRPC_LINGER_US;
    }
    front_event_want(&c->wr, &c->writing, pending);
    /* A full output buffer stops reading: the peer must read first. */
    front_event_want(&c->rd, &c->reading,
                     c->lingering || !pending || c->out.len - c->out_off < GRPC_OUT_MAX);
    front_io_kick(&c->io);
    arm_timer(c);
    c->g->host->maybe_idle(c->g->host->arg);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct gconn *c = arg;
    uint8_t data[GRPC_READ_CHUNK];
    ssize_t n = front_io_recv(&c->io, data, sizeof data);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        /* Only a handshake moved, its answer maybe still to write. */
        if (front_io_pending(&c->io))
            front_event_want(&c->wr, &c->writing, 1);
        return;
    }
    if (n <= 0) {
        conn_free(c); /* pending calls are cancelled: nobody would read them */
        return;
    }
    if (c->lingering || c->closing)
        return; /* dropped */
    c->last_us = util_monotonic_us();
    c->busy = 1;
    ssize_t used = nghttp2_session_mem_recv(c->s, data, (size_t)n);
    c->busy = 0;
    if (used < 0) {
        /* A protocol error: a GOAWAY is written, then the connection ends.
         * A flood (acknowledgements piling up unsent): nothing more is
         * sent, as nghttp2 asks. */
        count_proto_error(c);
        c->closing = 1;
        if (used == NGHTTP2_ERR_FLOODED) {
            c->mute = 1;
            c->out.len = c->out_off = 0;
        } else if (used != NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
            (void)nghttp2_session_terminate_session(c->s, NGHTTP2_PROTOCOL_ERROR);
        } else {
            c->mute = 1; /* not HTTP/2 at all */
        }
    }
    settle(c);
}

/* The replies that came since flush_ev was made active, written at once. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct gconn *c = arg;
    c->flush_due = 0;
    settle(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    settle(arg);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    /* Lingered enough; or idle (or not reading what it is sent) for
     * idle_timeout: a GOAWAY if it can still be written, then close. */
    struct gconn *c = arg;
    if (c->lingering || c->closing) {
        conn_free(c);
        return;
    }
    (void)nghttp2_session_terminate_session(c->s, NGHTTP2_NO_ERROR);
    c->closing = 1;
    settle(c);
}

static nghttp2_session_callbacks *callbacks_new(void)
{
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return NULL;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    return cb;
}

static int session_new(struct gconn *c)
{
    nghttp2_session_callbacks *cb = callbacks_new();
    nghttp2_option *opt = NULL;
    int rc = -1;
    if (!cb || nghttp2_option_new(&opt) != 0)
        goto out;
    nghttp2_option_set_max_settings(opt, GRPC_MAX_SETTINGS);
    nghttp2_option_set_max_outbound_ack(opt, GRPC_MAX_OUTBOUND_ACK);
    nghttp2_option_set_stream_reset_rate_limit(opt, GRPC_RST_BURST, GRPC_RST_RATE);
    if (nghttp2_session_server_new3(&c->s, cb, c, opt, &c->g->mem) != 0)
        goto out;
    const nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, c->g->max_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_HEADER_LIST_MAX},
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
    };
    rc = nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) == 0 ? 0
                                                                                             : -1;
out:
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    return rc;
}

/* A connection accepted on s (listener.h). */
static void on_accept(void *arg, const struct listener_socket *s, int fd,
                      const struct sockaddr *peer)
{
    struct grpc *g = arg;
    (void)peer; /* nothing of a call depends on it */
    struct gconn *c = xcalloc(1, sizeof *c);
    c->g = g;
    c->fd = fd;
    struct event_base *base = g->host->core->base;
    if (event_assign(&c->rd, base, fd, EV_READ | EV_PERSIST, on_read, c) < 0 ||
        event_assign(&c->wr, base, fd, EV_WRITE | EV_PERSIST, on_write, c) < 0 ||
        evtimer_assign(&c->timer, base, on_timer, c) < 0 ||
        event_assign(&c->flush_ev, base, -1, 0, on_flush, c) < 0)
        abort(); /* only with bad arguments */
    /* The context of the snapshot in force now (see http.c). */
    front_io_init(&c->io, fd, g->host->core->config->listen_tls[s->tls].server,
                  (enum tls_listener)s->tls, &c->rd, g->host->core);
    LIST_INIT(&c->streams);
    LIST_INSERT_HEAD(&g->conns, c, link);
    metrics_count(g->host->core->metrics, METRICS_GRPC_CONNECTIONS);
    /* One count with the HTTP front's connections (listener.h). */
    c->over_limit = !listener_admit(&g->l, s, &c->counted);
    c->last_us = util_monotonic_us();
    if (session_new(c) < 0) {
        c->s = NULL;
        conn_free(c);
        return;
    }
    settle(c);
}

/* ---- the front ---- */

static struct grpc *grpc_of(struct front *f)
{
    return (struct grpc *)f; /* base is the first member */
}

static int grpc_enabled(const struct config *cfg)
{
    return cfg->grpc_listen != NULL;
}

static void grpc_apply_config(struct front *f, const struct config *cfg)
{
    struct grpc *g = grpc_of(f);
    g->max_msg = (size_t)cfg->max_body;
    g->max_streams = (uint32_t)cfg->grpc_max_streams;
    g->idle_us = cfg->idle_timeout_us;
    listener_apply_config(&g->l, cfg);
    struct gconn *c;
    for (c = LIST_FIRST(&g->conns); c; c = LIST_NEXT(c, link))
        if (!c->busy)
            arm_timer(c);
}

static void grpc_free(struct front *f)
{
    struct grpc *g = grpc_of(f);
    if (!g)
        return;
    while (!LIST_EMPTY(&g->conns))
        conn_free(LIST_FIRST(&g->conns));
    while (!LIST_EMPTY(&g->spare)) {
        struct stream *st = LIST_FIRST(&g->spare);
        LIST_REMOVE(st, link);
        buf_free(&st->body);
        buf_free(&st->resp);
        free(st);
    }
    grpc_arena_fini(&g->arena);
    grpc_pool_fini(&g->pool); /* every session is deleted: all is given back */
    listener_fini(&g->l);
    free(g);
}

static struct front *grpc_new(const struct front_host *host, const struct front *first, char *err,
                              size_t errlen)
{
    const struct config *cfg = host->core->config;
    struct grpc *g = xcalloc(1, sizeof *g);
    g->base.ops = &grpc_front;
    LIST_INIT(&g->conns);
    LIST_INIT(&g->spare);
    grpc_arena_init(&g->arena, GRPC_ARENA_SIZE);
    grpc_pool_init(&g->pool);
    g->mem = grpc_pool_nghttp2(&g->pool);
    g->host = host;
    listener_init(&g->l, host, on_accept, g);
    grpc_apply_config(&g->base, cfg);
    const struct listener *first_l = first ? &((const struct grpc *)first)->l : NULL;
    struct listener_socket *s =
        listener_open(&g->l, cfg, "grpc_listen", cfg->grpc_listen, first_l, 0, 1, err, errlen);
    if (!s) {
        grpc_free(&g->base);
        return NULL;
    }
    s->tls = TLS_GRPC_LISTEN;
    if (listener_start(&g->l) < 0) {
        snprintf(err, errlen, "cannot watch the grpc_listen socket");
        grpc_free(&g->base);
        return NULL;
    }
    return &g->base;
}

static void grpc_drain(struct front *f)
{
    struct grpc *g = grpc_of(f);
    listener_drain(&g->l);
    for (struct gconn *c = LIST_FIRST(&g->conns), *next; c; c = next) {
        next = LIST_NEXT(c, link);
        /* Streams up to the last one seen are still answered; later ones
         * are refused by nghttp2; the connection closes once all are. */
        (void)nghttp2_submit_goaway(c->s, NGHTTP2_FLAG_NONE,
                                    nghttp2_session_get_last_proc_stream_id(c->s), NGHTTP2_NO_ERROR,
                                    NULL, 0);
        if (!c->busy)
            settle(c);
    }
}

static int grpc_idle(const struct front *f)
{
    const struct grpc *g = (const struct grpc *)f;
    const struct gconn *c;
    for (c = LIST_FIRST(&g->conns); c; c = LIST_NEXT(c, link))
        if (conn_active(c))
            return 0;
    return 1;
}

const struct front_ops grpc_front = {
    .name = "grpc",
    .enabled = grpc_enabled,
    .new = grpc_new,
    .apply_config = grpc_apply_config,
    .drain = grpc_drain,
    .idle = grpc_idle,
    .free = grpc_free,
};
