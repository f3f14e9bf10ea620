/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.c: the HTTP/1.1 front of one worker on libevent's core (http.h).
 *
 * Each connection is one struct conn holding everything it needs, embedded:
 * its read and write events, one timer, the parser, an input buffer (only
 * for a request split across reads), an output buffer, and a ring of
 * HTTP_PIPELINE_MAX slots, one per request read and not yet answered.
 * Checks complete in any order; an answer waits in its slot until those of
 * every earlier request are in the output buffer, so answers leave in
 * request order (pipelining). Everything ready is written with one send();
 * EV_WRITE is asked for only when the socket would block, and the read event
 * stays added, so a keep-alive request costs no epoll_ctl.
 *
 * The timer stands for whichever deadline is nearest: idle_timeout between
 * requests (or while a written answer does not drain), and while a request
 * is being read both idle_timeout of silence and request_timeout for the
 * whole request (408, then close). It is armed lazily (front_conn_arm).
 *
 * A connection that must close (an error that breaks framing, Connection:
 * close, 401, 503) reads no further request; once its answers are written
 * it shuts down its side and reads and drops what the client still sends
 * for a moment (HTTP_LINGER_US), so that a client still sending a large
 * body reads its 413 instead of a reset.
 *
 * A reply from the core may come while the connection is in one of its own
 * callbacks (check_start answering at once): it is then only rendered into
 * its slot, and written when the callback ends (conn->busy). A connection is
 * freed only at the end of a callback: never under a caller.
 *
 * Owns the connections and the limits on what a client may send, and the
 * front's instance (front.h); not the listening sockets, the accepting and
 * the counting (listener.c), not which path does what (http_routes.c), not
 * the answers' bytes (response.c), not the checks (check.c).
 */
#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config.h"
#include "core/check.h"
#include "core/lease.h"
#include "core/metrics.h"
#include "core/override_change.h"
#include "core/rls.h"
#include "core/top_keys.h"
#include "front/http/admin.h"
#include "front/http/http.h"
#include "front/http/http_conn.h"
#include "front/http/http_parse.h"
#include "front/http/http_routes.h"
#include "front/http/response.h"
#include "lib/client_ip.h"

#define HTTP_READ_CHUNK 16384  /* bytes read at once */
#define HTTP_LINGER_US 2000000 /* reading what a closed client still sends */
/* In a drain, how long a connection that has carried no request yet may
 * wait for its first one (drain_may_close). */
#define HTTP_DRAIN_FIRST_US 1000000

static void settle(struct conn *c);

/* ---- connections ---- */

static void conn_free(struct conn *c)
{
    struct http *h = c->h;
    for (unsigned i = 0; i < HTTP_PIPELINE_MAX; i++) {
        if (c->slots[i].check)
            check_cancel(c->slots[i].check);
        if (c->slots[i].reset)
            reset_cancel(c->slots[i].reset);
        if (c->slots[i].ovr)
            override_change_cancel(c->slots[i].ovr);
        if (c->slots[i].rls)
            rls_cancel(c->slots[i].rls);
        if (c->slots[i].lease)
            lease_cancel(c->slots[i].lease);
        top_query_cancel(c->slots[i].top);
        buf_free(&c->slots[i].out);
    }
    front_conn_fini(&c->fc);
    http_parse_free(&c->parse);
    buf_free(&c->in);
    buf_free(&c->out);
    if (c->counted)
        listener_release(&h->l);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
    h->host->maybe_idle(h->host->arg);
}

/* Nothing read of a next request, nothing to answer, nothing to write. */
static int conn_quiet(const struct conn *c)
{
    return c->count == 0 && c->out_off == c->out.len && !front_io_pending(&c->fc.io) &&
           c->in.len == 0 && !http_parse_started(&c->parse);
}

/* A drain closes a quiet connection at once, except one that has carried
 * no request yet, for HTTP_DRAIN_FIRST_US after it was accepted (it
 * keeps the drain from ending, first_awaited): its client
 * connected to send one, which may be on its way (a client whose request
 * meets a close sees a failure, not a reason to retry; and in a hand-over
 * it could not have known the socket was about to change process). */
static int first_awaited(const struct conn *c)
{
    return !c->served && !c->fc.lingering &&
           util_monotonic_us() < c->fc.last_us + HTTP_DRAIN_FIRST_US;
}

static int drain_may_close(const struct conn *c)
{
    return !c->fc.lingering && conn_quiet(c) && !first_awaited(c);
}

struct slot *http_slot_new(struct conn *c)
{
    c->served = 1;
    struct slot *s = &c->slots[(c->head + c->count) % HTTP_PIPELINE_MAX];
    c->count++;
    s->c = c;
    s->check = NULL;
    s->reset = NULL;
    s->ovr = NULL;
    s->rls = NULL;
    s->lease = NULL;
    s->top = NULL;
    s->state = SLOT_WAITING;
    s->out.len = 0;
    s->flags = 0;
    return s;
}

void http_slot_answered(struct slot *s, int status)
{
    http_slot_ready(s, status);
    if (!s->c->busy)
        settle(s->c);
}

void http_slot_ready(struct slot *s, int status)
{
    s->state = SLOT_READY;
    metrics_http_status(s->c->h->host->core->metrics, status);
}

void http_answer_error(struct slot *s, enum request_code code, const char *message,
                       const char *hname, const char *hvalue)
{
    struct conn *c = s->c;
    int status = request_code_status(code);
    if (status == 401 || status == 503 || c->h->l.draining) {
        s->flags |= RESPONSE_CLOSE;
        c->closing = 1;
    }
    response_error(&s->out, code, message, hname, hvalue, s->flags);
    http_slot_ready(s, status);
}

void http_close_if_draining(struct slot *s)
{
    if (s->c->h->l.draining) {
        s->flags |= RESPONSE_CLOSE;
        s->c->closing = 1;
    }
}

void http_answer_body(struct slot *s, int status, const char *content_type, const char *body)
{
    http_close_if_draining(s);
    response_body(&s->out, status, content_type, body, strlen(body), s->flags);
    http_slot_ready(s, status);
}

/* ---- reading ---- */

/* Parses len bytes of data into requests and routes them; stops at a
 * full pipeline or once the connection is closing. Returns the bytes
 * used. */
static size_t parse_input(struct conn *c, const char *data, size_t len)
{
    size_t off = 0;
    while (off < len && !c->closing && c->count < HTTP_PIPELINE_MAX) {
        size_t used;
        enum http_parse_status st =
            http_parse_feed(&c->parse, &c->h->limits, data + off, len - off, &used);
        off += used;
        if (!c->req_start_us && http_parse_started(&c->parse))
            c->req_start_us = util_monotonic_us();
        if (st == HTTP_PARSE_MORE)
            break;
        if (st == HTTP_PARSE_CONTINUE) {
            /* Only when every earlier answer is out (the interim answer
             * belongs to this request); else the client's own wait for
             * it ends and it sends the body anyway. */
            if (c->count == 0)
                response_continue(&c->out);
            continue;
        }
        if (st == HTTP_PARSE_ERROR) {
            const char *message;
            enum request_code code = http_parse_error(&c->parse, &message);
            struct slot *s = http_slot_new(c);
            s->flags = RESPONSE_CLOSE;
            c->closing = 1;
            http_answer_error(s, code, message, NULL, NULL);
            break;
        }
        c->req_start_us = 0;
        http_route(c, http_parse_request(&c->parse));
    }
    return off;
}

/* Parses what c->in holds (after a pause for a full pipeline). */
static void parse_buffered(struct conn *c)
{
    size_t used = parse_input(c, c->in.data, c->in.len);
    buf_consume(&c->in, used);
    if (c->closing)
        c->in.len = 0;
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    char data[HTTP_READ_CHUNK];
    size_t n;
    enum front_conn_read r = front_conn_read(&c->fc, data, sizeof data, &n);
    if (r == FRONT_CONN_NOTHING)
        return;
    if (r != FRONT_CONN_DATA) {
        /* The client is gone or has stopped sending: answers still due
         * are written (a half-closed client may read them), then close. */
        if (r == FRONT_CONN_BROKEN || c->fc.lingering ||
            (c->count == 0 && c->out_off == c->out.len)) {
            conn_free(c);
            return;
        }
        c->closing = 1;
        c->in.len = 0;
        settle(c);
        return;
    }
    if (c->fc.lingering)
        return;
    c->fc.last_us = util_monotonic_us();
    c->busy = 1;
    if (c->in.len == 0) {
        /* The common case: whole requests, parsed from the stack. */
        size_t used = parse_input(c, data, n);
        if (!c->closing)
            buf_append(&c->in, data + used, n - used);
    } else {
        buf_append(&c->in, data, n);
        parse_buffered(c);
    }
    c->busy = 0;
    settle(c);
}

/* ---- writing, timers, closing ---- */

/* Writes what c->out holds. Returns -1 if the connection broke. */
static int write_out(struct conn *c)
{
    if (front_io_flush(&c->fc.io) < 0)
        return -1;
    while (c->out_off < c->out.len) {
        ssize_t n = front_conn_send(&c->fc, c->out.data + c->out_off, c->out.len - c->out_off);
        if (n <= 0)
            return (int)n; /* 0: the socket is full, -1: broken */
        c->out_off += (size_t)n;
    }
    c->out.len = c->out_off = 0;
    return 0;
}

/* The deadline the timer stands for now (monotonic µs), or 0: none, the
 * core answering every check in time. */
static int64_t timer_deadline(const struct conn *c)
{
    const struct http *h = c->h;
    if (c->fc.lingering)
        return c->fc.linger_until_us;
    if (h->l.draining && !c->served && !c->req_start_us)
        return c->fc.last_us + HTTP_DRAIN_FIRST_US; /* drain_may_close */
    if (c->req_start_us && !c->closing) {
        int64_t deadline = c->fc.last_us + h->idle_us;
        if (c->req_start_us + h->request_us < deadline)
            deadline = c->req_start_us + h->request_us;
        return deadline;
    }
    if (c->count == 0 || c->fc.writing)
        return c->fc.last_us + h->idle_us;
    return 0;
}

static void arm_timer(struct conn *c)
{
    front_conn_arm(&c->fc, timer_deadline(c));
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    if (!front_conn_timer_due(&c->fc, timer_deadline(c)))
        return;
    if (c->fc.lingering || !c->req_start_us || c->closing || c->count == HTTP_PIPELINE_MAX) {
        conn_free(c);
        return;
    }
    struct slot *s = http_slot_new(c);
    s->flags = RESPONSE_CLOSE;
    c->closing = 1;
    c->in.len = 0;
    http_answer_error(s, RC_REQUEST_TIMEOUT, "the request was not received in time", NULL, NULL);
    settle(c);
}

/* Moves the answers that are next in order to the output, writes, then
 * decides what the connection waits for next. */
static void settle(struct conn *c)
{
    struct http *h = c->h;
    for (;;) {
        while (c->count && c->slots[c->head].state == SLOT_READY) {
            struct slot *s = &c->slots[c->head];
            buf_append(&c->out, s->out.data, s->out.len);
            s->state = SLOT_FREE;
            c->head = (c->head + 1) % HTTP_PIPELINE_MAX;
            c->count--;
        }
        if (write_out(c) < 0) {
            conn_free(c);
            return;
        }
        /* Requests held back by a full pipeline. */
        if (c->in.len == 0 || c->closing || c->count == HTTP_PIPELINE_MAX)
            break;
        c->busy = 1;
        parse_buffered(c);
        c->busy = 0;
    }
    int written = c->out_off == c->out.len && !front_io_pending(&c->fc.io);
    if (written && c->count == 0 && c->closing && !c->fc.lingering &&
        front_conn_linger(&c->fc, HTTP_LINGER_US) < 0) {
        conn_free(c);
        return;
    }
    if (h->l.draining && drain_may_close(c)) {
        conn_free(c);
        return;
    }
    front_conn_want(&c->fc, c->fc.lingering || (!c->closing && c->count < HTTP_PIPELINE_MAX),
                    !written);
    arm_timer(c);
    /* An answer may have been written: a drain may be over. */
    h->host->maybe_idle(h->host->arg);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    settle(arg);
}

/* A connection accepted on s (listener.h). */
static void on_accept(void *arg, const struct listener_socket *s, int fd,
                      const struct sockaddr *peer)
{
    struct http *h = arg;
    struct conn *c = xcalloc(1, sizeof *c);
    c->h = h;
    c->sock = s;
    /* The peer is ${ip} of a forward-auth key (or the proxy whose
     * X-Forwarded-For is believed). */
    client_ip_from_sockaddr(peer, &c->peer);
    front_conn_init(&c->fc, h->host->core, s, fd, on_read, on_write, on_timer, c);
    http_parse_init(&c->parse);
    c->over_limit = !listener_admit(&h->l, s, &c->counted);
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    settle(c);
}

/* ---- the front ---- */

static struct http *http_of(struct front *f)
{
    return (struct http *)f; /* base is the first member */
}

static int http_enabled(const struct config *cfg)
{
    (void)cfg;
    return 1; /* listen always has a value */
}

static void http_apply_config(struct front *f, const struct config *cfg)
{
    struct http *h = http_of(f);
    h->limits = (struct http_limits){.max_head = HTTP_HEAD_MAX, .max_body = (size_t)cfg->max_body};
    h->idle_us = cfg->idle_timeout_us;
    h->request_us = cfg->request_timeout_us;
    listener_apply_config(&h->l, cfg);
    /* The new timeouts count from now on for every open connection. */
    for (struct conn *c = h->conns; c; c = c->next)
        if (!c->busy)
            arm_timer(c);
}

static void http_free(struct front *f)
{
    struct http *h = http_of(f);
    if (!h)
        return;
    /* The worker has taken the front out of its array: the closing
     * connections' maybe_idle does not look at it. */
    while (h->conns) {
        struct conn *c = h->conns;
        conn_free(c);
    }
    listener_fini(&h->l);
    free(h);
}

static struct front *http_new(const struct front_host *host, const struct front *first, char *err,
                              size_t errlen)
{
    const struct config *cfg = host->core->config;
    struct http *h = xcalloc(1, sizeof *h);
    h->base.ops = &http_front;
    h->host = host;
    listener_init(&h->l, host, on_accept, h);
    http_apply_config(&h->base, cfg);
    const struct listener *first_l = first ? &((const struct http *)first)->l : NULL;
    /* The check port serves the admin paths too unless admin_listen is
     * set (the keys only when guarded: http_routes.h); only its
     * connections count towards max_connections. */
    unsigned main_roles =
        HTTP_ROLE_CHECKS | (cfg->admin_listen ? 0 : HTTP_ROLE_ADMIN | HTTP_ROLE_KEYS_IF_GUARDED);
    struct listener_socket *main_s, *admin_s = NULL;
    if (!(main_s = listener_open(&h->l, cfg, "listen", cfg->listen, first_l, main_roles, 1, err,
                                 errlen)) ||
        (cfg->admin_listen &&
         !(admin_s = listener_open(&h->l, cfg, "admin_listen", cfg->admin_listen, first_l,
                                   HTTP_ROLE_ADMIN | HTTP_ROLE_KEYS, 0, err, errlen)))) {
        http_free(&h->base);
        return NULL;
    }
    main_s->tls = TLS_LISTEN;
    if (admin_s)
        admin_s->tls = TLS_ADMIN_LISTEN;
    return &h->base;
}

static int http_start(struct front *f)
{
    return listener_start(&http_of(f)->l);
}

static void http_drain(struct front *f)
{
    struct http *h = http_of(f);
    listener_drain(&h->l);
    for (struct conn *c = h->conns, *next; c; c = next) {
        next = c->next;
        if (drain_may_close(c))
            conn_free(c);
        else if (!c->busy)
            arm_timer(c); /* a first request's wait is shorter now */
    }
}

static int http_idle(const struct front *f)
{
    const struct http *h = (const struct http *)f;
    for (const struct conn *c = h->conns; c; c = c->next)
        if (c->count || c->out_off < c->out.len || front_io_pending(&c->fc.io) || first_awaited(c))
            return 0;
    return 1;
}

const struct front_ops http_front = {
    .name = "http",
    .enabled = http_enabled,
    .new = http_new,
    .start = http_start,
    .apply_config = http_apply_config,
    .drain = http_drain,
    .idle = http_idle,
    .free = http_free,
    .log_status = response_status,
};
