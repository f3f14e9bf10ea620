/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc.c: the gRPC front of one worker (grpc.h): h2c connections on
 * libevent's core, one nghttp2 server session each, whose streams' calls
 * grpc_call.c decodes, decides and answers.
 *
 * Bytes move by hand, not through nghttp2's send/recv callbacks: what is
 * read goes to nghttp2_session_mem_recv from the stack; what nghttp2 wants
 * to send is pulled with nghttp2_session_mem_send into the connection's
 * output buffer only while that holds less than GRPC_OUT_MAX, and the read
 * event is removed while it is full, so a peer that does not read stops
 * being read (its requests stay in the kernel's buffers, not ours).
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
 * counting (listener.c), not the streams and their calls (grpc_call.c),
 * not the socket's plumbing and lingering (front/conn.c).
 */
#include <event2/event.h>
#include <event2/event_struct.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/queue.h>

#include "config/config.h"
#include "core/metrics.h"
#include "front/conn.h"
#include "front/front.h"
#include "front/grpc/grpc.h"
#include "front/grpc/grpc_arena.h"
#include "front/grpc/grpc_call.h"
#include "front/grpc/grpc_conn.h"
#include "front/listener.h"
#include "front/tls.h"
#include "lib/buf.h"
#include "lib/timer.h"

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
/* After the last frame (a GOAWAY), reading and dropping what the peer
 * still sends for this long before closing: closing with unread input
 * makes the kernel reset the connection, and the peer would lose the
 * GOAWAY that says why. */
#define GRPC_LINGER_US 1000000
/* In a drain, how long after the shutdown notice the final GOAWAY waits at
 * least (grpc_drain). */
#define GRPC_DRAIN_NOTICE_US 1000000

static void settle(struct gconn *c);
static void on_notice_over(evutil_socket_t fd, short what, void *arg);

/* ---- protocol errors ---- */

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

/* ---- the connection ---- */

static void conn_free(struct gconn *c)
{
    struct grpc *g = c->g;
    while (!LIST_EMPTY(&c->streams))
        grpc_call_stream_free(LIST_FIRST(&c->streams));
    nghttp2_session_del(c->s);
    /* Fails only for an event never assigned (front_conn_fini). */
    event_del(&c->flush_ev);
    front_conn_fini(&c->fc);
    buf_free(&c->out);
    if (c->counted)
        listener_release(&g->l);
    LIST_REMOVE(c, link);
    free(c);
    g->host->maybe_idle(g->host->arg);
}

static int conn_active(const struct gconn *c)
{
    return !LIST_EMPTY(&c->streams) || c->out_off < c->out.len || front_io_pending(&c->fc.io) ||
           nghttp2_session_want_write(c->s) || c->notice;
}

/* Pulls what nghttp2 wants to send while the output holds less than
 * GRPC_OUT_MAX, then writes. Returns -1 if the connection must close. */
static int flush(struct gconn *c)
{
    if (front_io_flush(&c->fc.io) < 0)
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
        ssize_t n = front_conn_send(&c->fc, c->out.data + c->out_off, c->out.len - c->out_off);
        if (n <= 0)
            return (int)n; /* 0: the socket is full, -1: broken */
        c->out_off += (size_t)n;
        if (c->out_off == c->out.len)
            c->out.len = c->out_off = 0;
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

/* The deadline the timer stands for now (monotonic µs), or 0: none, the
 * core answering every call in time. */
static int64_t timer_deadline(const struct gconn *c)
{
    if (!c->fc.lingering && !c->fc.writing && conn_deciding(c))
        return 0;
    return c->fc.lingering ? c->fc.linger_until_us : c->fc.last_us + c->g->idle_us;
}

static void arm_timer(struct gconn *c)
{
    front_conn_arm(&c->fc, timer_deadline(c));
}

/* Writes what is due, then decides what the connection waits for. */
static void settle(struct gconn *c)
{
    if (flush(c) < 0) {
        conn_free(c);
        return;
    }
    int pending = c->out_off < c->out.len || front_io_pending(&c->fc.io);
    if (!pending && !c->fc.lingering &&
        (c->closing || (!nghttp2_session_want_read(c->s) && !nghttp2_session_want_write(c->s)))) {
        /* The last frame is written (a GOAWAY after a drain, an error, a
         * flood, or idle_timeout) and no stream is left to answer. */
        if (front_conn_linger(&c->fc, GRPC_LINGER_US) < 0) {
            conn_free(c);
            return;
        }
    }
    /* A full output buffer stops reading: the peer must read first. */
    front_conn_want(&c->fc, c->fc.lingering || !pending || c->out.len - c->out_off < GRPC_OUT_MAX,
                    pending);
    arm_timer(c);
    c->g->host->maybe_idle(c->g->host->arg);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct gconn *c = arg;
    uint8_t data[GRPC_READ_CHUNK];
    size_t n;
    enum front_conn_read r = front_conn_read(&c->fc, data, sizeof data, &n);
    if (r == FRONT_CONN_NOTHING)
        return;
    if (r != FRONT_CONN_DATA) {
        conn_free(c); /* pending calls are cancelled: nobody would read them */
        return;
    }
    if (c->fc.lingering || c->closing)
        return; /* dropped */
    c->fc.last_us = util_monotonic_us();
    c->busy = 1;
    ssize_t used = nghttp2_session_mem_recv(c->s, data, n);
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
            /* Fails only out of memory: the connection then ends (closing)
             * without the GOAWAY that says why. */
            (void)nghttp2_session_terminate_session(c->s, NGHTTP2_PROTOCOL_ERROR);
        } else {
            c->mute = 1; /* not HTTP/2 at all */
        }
    }
    settle(c);
}

void grpc_reply_due(struct gconn *c)
{
    if (!c->flush_due) {
        c->flush_due = 1;
        event_active(&c->flush_ev, EV_TIMEOUT, 1);
    }
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
    if (!front_conn_timer_due(&c->fc, timer_deadline(c)))
        return;
    if (c->fc.lingering || c->closing) {
        conn_free(c);
        return;
    }
    /* As in on_read: out of memory, the connection ends without it. */
    (void)nghttp2_session_terminate_session(c->s, NGHTTP2_NO_ERROR);
    c->closing = 1;
    settle(c);
}

static nghttp2_session_callbacks *callbacks_new(void)
{
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return NULL;
    grpc_call_callbacks(cb);
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
    front_conn_init(&c->fc, g->host->core, s, fd, on_read, on_write, on_timer, c);
    if (event_assign(&c->flush_ev, g->host->core->base, -1, 0, on_flush, c) < 0)
        abort(); /* only with bad arguments */
    LIST_INIT(&c->streams);
    LIST_INSERT_HEAD(&g->conns, c, link);
    metrics_count(g->host->core->metrics, METRICS_GRPC_CONNECTIONS);
    /* One count with the HTTP front's connections (listener.h). */
    c->over_limit = !listener_admit(&g->l, s, &c->counted);
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
    event_del(&g->notice_timer);
    while (!LIST_EMPTY(&g->conns))
        conn_free(LIST_FIRST(&g->conns));
    grpc_call_spare_free(g);
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
    if (evtimer_assign(&g->notice_timer, host->core->base, on_notice_over, g) < 0)
        abort(); /* only with bad arguments */
    grpc_apply_config(&g->base, cfg);
    const struct listener *first_l = first ? &((const struct grpc *)first)->l : NULL;
    struct listener_socket *s =
        listener_open(&g->l, cfg, "grpc_listen", cfg->grpc_listen, first_l, 0, 1, err, errlen);
    if (!s) {
        grpc_free(&g->base);
        return NULL;
    }
    s->tls = TLS_GRPC_LISTEN;
    return &g->base;
}

static int grpc_start(struct front *f)
{
    return listener_start(&grpc_of(f)->l);
}

/* The final GOAWAY: streams up to the last one seen are still answered;
 * later ones are refused by nghttp2 (REFUSED_STREAM: a client may send
 * them again elsewhere); the connection closes once all are. Fails only
 * out of memory: the drain then ends when the streams are answered
 * (grpc_idle), and the connection with the loop. */
static void final_goaway(struct gconn *c)
{
    c->notice = 0;
    (void)nghttp2_submit_goaway(c->s, NGHTTP2_FLAG_NONE,
                                nghttp2_session_get_last_proc_stream_id(c->s), NGHTTP2_NO_ERROR,
                                NULL, 0);
}

void grpc_drain_acked(struct gconn *c)
{
    c->acked = 1;
    if (c->notice && c->g->notice_over)
        final_goaway(c);
}

static void on_notice_over(evutil_socket_t fd, short what, void *arg)
{
    struct grpc *g = arg;
    g->notice_over = 1;
    for (struct gconn *c = LIST_FIRST(&g->conns), *next; c; c = next) {
        next = LIST_NEXT(c, link);
        if (c->notice && c->acked) {
            final_goaway(c);
            settle(c);
        }
    }
}

/* HTTP/2's graceful shutdown (RFC 9113 6.8): a GOAWAY naming no stream
 * first, and a PING. Streams the client still opens are answered; the
 * final GOAWAY goes once the client has acknowledged the PING (it has read
 * the notice and opens no more streams here) and GRPC_DRAIN_NOTICE_US has
 * passed: a client may have queued streams it writes after the ACK, and a
 * single GOAWAY, or one at the ACK, refused them (UNAVAILABLE for a client
 * that does not retry). A client that never acknowledges holds its
 * connection until the drain's backstop. */
static void grpc_drain(struct front *f)
{
    struct grpc *g = grpc_of(f);
    listener_drain(&g->l);
    timer_arm_us(&g->notice_timer, GRPC_DRAIN_NOTICE_US);
    for (struct gconn *c = LIST_FIRST(&g->conns), *next; c; c = next) {
        next = LIST_NEXT(c, link);
        if (nghttp2_submit_shutdown_notice(c->s) == 0 &&
            nghttp2_submit_ping(c->s, NGHTTP2_FLAG_NONE, NULL) == 0)
            c->notice = 1;
        else
            final_goaway(c);
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
    .start = grpc_start,
    .apply_config = grpc_apply_config,
    .drain = grpc_drain,
    .idle = grpc_idle,
    .free = grpc_free,
};
