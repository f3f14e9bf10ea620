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
 * The timer, re-armed after every event, stands for whichever deadline is
 * nearest: idle_timeout between requests (or while a written answer does
 * not drain), and while a request is being read both idle_timeout of
 * silence and request_timeout for the whole request (408, then close).
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
 * Owns the connections and the limits on what a client may send; not the
 * listening sockets (listen.c, owned by the worker), not the answers' bytes
 * (response.c), not the checks (check.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/check.h"
#include "core/metrics.h"
#include "core/rls.h"
#include "front/http/admin.h"
#include "front/http/auth.h"
#include "front/http/check_json.h"
#include "front/http/http.h"
#include "front/http/http_parse.h"
#include "front/http/response.h"
#include "front/http/rls_json.h"
#include "lib/client_ip.h"
#include "lib/log.h"
#include "server.h"
#include "worker.h"

#define HTTP_PIPELINE_MAX 16   /* requests of one connection awaiting their answers */
#define HTTP_READ_CHUNK 16384  /* bytes read at once */
#define HTTP_ACCEPT_BATCH 64   /* connections accepted per readable event */
#define HTTP_LINGER_US 2000000 /* reading what a closed client still sends */
/* After accept() fails for want of descriptors, accepting pauses this long
 * rather than spin on a listening socket that stays readable. */
#define HTTP_ACCEPT_RESUME_S 1

static const char metrics_type[] = "text/plain; version=0.0.4; charset=utf-8";

struct http;

struct listener {
    struct http *h;
    int fd; /* -1: none */
    struct event ev;
    int checks; /* serves /check; its connections count towards max_connections */
    int admin;  /* serves /healthz, /readyz, /metrics, /v1/keys/ */
};

enum slot_state { SLOT_FREE, SLOT_WAITING, SLOT_READY };

/* One request read and not yet answered. */
struct slot {
    struct conn *c;
    struct check *check;  /* while the core decides; NULL otherwise */
    struct reset *reset;  /* while a reset is under way; NULL otherwise */
    struct rls_call *rls; /* while a POST /json is decided; NULL otherwise */
    struct buf out;       /* the rendered answer, until earlier ones are out */
    enum slot_state state;
    unsigned flags; /* RESPONSE_* for the answer */
};

struct conn {
    struct http *h;
    struct listener *l;
    int fd;
    struct client_addr peer; /* AF_UNSPEC: a unix-socket peer */
    struct event rd, wr, timer;
    struct http_parse parse;
    struct buf in;  /* read, not yet parsed: part of a request */
    struct buf out; /* answers ready, in order; out_off of them written */
    size_t out_off;
    struct slot slots[HTTP_PIPELINE_MAX];
    unsigned head, count; /* the ring of slots in use */
    int64_t last_us;      /* monotonic: last bytes read or written */
    int64_t req_start_us; /* first byte of the request being read; 0: none */
    int64_t linger_until_us;
    int counted;          /* counts towards max_connections */
    int over_limit;       /* came past max_connections: its first request gets 503 */
    int closing;          /* no further request: close once the answers are written */
    int lingering;        /* written and shut down: dropping what the client sends */
    int busy;             /* inside one of this connection's callbacks */
    int reading, writing; /* rd, wr added */
    struct conn *prev, *next;
};

struct http {
    struct worker *w;
    struct listener main, admin;
    struct event resume; /* re-enables accepting after running out of descriptors */
    struct http_limits limits;
    int64_t idle_us, request_us;
    size_t max_conns; /* process-wide: counted in server.connections */
    char *token;      /* NULL: /check needs none */
    size_t token_len;
    struct conn *conns;
    int draining;
};

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
        if (c->slots[i].rls)
            rls_cancel(c->slots[i].rls);
        buf_free(&c->slots[i].out);
    }
    /* event_del fails only for an event never assigned; close only on a
     * bad descriptor: neither can happen here. */
    event_del(&c->rd);
    event_del(&c->wr);
    event_del(&c->timer);
    close(c->fd);
    http_parse_free(&c->parse);
    buf_free(&c->in);
    buf_free(&c->out);
    if (c->counted)
        core_count_release(&h->w->srv->connections);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
    worker_maybe_idle(h->w);
}

/* Nothing read of a next request, nothing to answer, nothing to write. */
static int conn_quiet(const struct conn *c)
{
    return c->count == 0 && c->out_off == c->out.len && c->in.len == 0 &&
           !http_parse_started(&c->parse);
}

static struct slot *slot_new(struct conn *c)
{
    struct slot *s = &c->slots[(c->head + c->count) % HTTP_PIPELINE_MAX];
    c->count++;
    s->c = c;
    s->check = NULL;
    s->reset = NULL;
    s->rls = NULL;
    s->state = SLOT_WAITING;
    s->out.len = 0;
    s->flags = 0;
    return s;
}

/* Marks s answered with status (rendered into s->out). */
static void slot_ready(struct slot *s, int status)
{
    s->state = SLOT_READY;
    metrics_http_status(s->c->h->w->core.metrics, status);
}

/* An error answer. 401 and 503 close the connection (a client refused or
 * turned away should not keep it), as does a drain. */
static void answer_error(struct slot *s, int status, const char *code, const char *message,
                         const char *hname, const char *hvalue)
{
    struct conn *c = s->c;
    if (status == 401 || status == 503 || c->h->draining) {
        s->flags |= RESPONSE_CLOSE;
        c->closing = 1;
    }
    response_error(&s->out, status, code, message, hname, hvalue, s->flags);
    slot_ready(s, status);
}

/* A drain closes every connection after its current answer. */
static void close_if_draining(struct slot *s)
{
    if (s->c->h->draining) {
        s->flags |= RESPONSE_CLOSE;
        s->c->closing = 1;
    }
}

static void answer_body(struct slot *s, int status, const char *content_type, const char *body)
{
    close_if_draining(s);
    response_body(&s->out, status, content_type, body, strlen(body), s->flags);
    slot_ready(s, status);
}

/* ---- routing ---- */

static void on_check_reply(void *ctx, const struct verdict *v)
{
    struct slot *s = ctx;
    struct conn *c = s->c;
    s->check = NULL;
    close_if_draining(s);
    slot_ready(s, response_verdict(&s->out, v, s->flags));
    if (!c->busy)
        settle(c);
}

/* True if the request carries "Authorization: Bearer <token>" with the
 * configured token (or none is configured). The comparison's time depends
 * on the length the caller sent, never on the token. */
static int authorized(const struct conn *c)
{
    const struct http *h = c->h;
    if (!h->token)
        return 1;
    const char *v = http_parse_header(&c->parse, "Authorization");
    if (!v || strncasecmp(v, "Bearer ", 7) != 0)
        return 0;
    v += 7;
    return util_consttime_equal(v, strlen(v), h->token, h->token_len);
}

static void start_check(struct slot *s, const struct http_request *req)
{
    struct worker *w = s->c->h->w;
    struct check_request creq;
    struct request_error rerr;
    if (check_json_parse(w->core.config, req->body, req->body_len, &creq, &rerr) < 0) {
        answer_error(s, rerr.status, rerr.code, rerr.message, NULL, NULL);
        return;
    }
    struct check *ch = check_start(&w->core, &creq, on_check_reply, s);
    if (s->state == SLOT_WAITING)
        s->check = ch;
}

static void start_auth(struct slot *s, const struct http_request *req)
{
    struct conn *c = s->c;
    struct worker *w = c->h->w;
    struct check_request creq;
    struct auth_skip skip;
    struct request_error rerr;
    (void)req; /* auth_parse reads the parser itself: it needs every header */
    switch (auth_parse(w->core.config, &c->parse, &c->peer, &creq, &skip, &rerr)) {
    case AUTH_ERROR:
        answer_error(s, rerr.status, rerr.code, rerr.message, NULL, NULL);
        return;
    case AUTH_SKIP:
        close_if_draining(s);
        response_auth_skipped(&s->out, skip.policy->name, skip.missing, s->flags);
        slot_ready(s, 200);
        return;
    case AUTH_CHECK:
        break;
    }
    struct check *ch = check_start(&w->core, &creq, on_check_reply, s);
    if (s->state == SLOT_WAITING)
        s->check = ch;
}

static void on_rls_reply(void *ctx, const struct rls_answer *a)
{
    struct slot *s = ctx;
    struct conn *c = s->c;
    s->rls = NULL;
    close_if_draining(s);
    slot_ready(s, response_rls(&s->out, a, s->flags));
    if (!c->busy)
        settle(c);
}

/* POST /json: envoyproxy/ratelimit's JSON form of ShouldRateLimit. */
static void start_json(struct slot *s, const struct http_request *req)
{
    struct worker *w = s->c->h->w;
    struct rls_json j;
    struct request_error rerr;
    struct rls_call *call;
    if (rls_json_parse(req->body, req->body_len, &j, &rerr) < 0) {
        metrics_rls_request(w->core.metrics, METRICS_RLS_JSON, METRICS_RLS_INVALID);
        answer_error(s, rerr.status, rerr.code, rerr.message, NULL, NULL);
        return;
    }
    int rc = rls_start(&w->core, &j.req, on_rls_reply, s, &call, &rerr);
    rls_json_free(&j); /* rls_start reads the request only while it runs */
    if (rc < 0)
        answer_error(s, rerr.status, rerr.code, rerr.message, NULL, NULL);
    else if (s->state == SLOT_WAITING)
        s->rls = call;
}

/* /check, /json, /auth/<policy> and /v1/keys/ alike: the method (405 with allow otherwise),
 * then a drain, then the bearer token, then the front's start. */
static void route_decision(struct slot *s, const struct http_request *req, int method_ok,
                           const char *use, const char *allow,
                           void (*start)(struct slot *, const struct http_request *))
{
    if (!method_ok)
        answer_error(s, 405, "method_not_allowed", use, "Allow", allow);
    else if (s->c->h->w->draining)
        answer_error(s, 503, "shutting_down", "the daemon is shutting down", "Retry-After", "1");
    else if (!authorized(s->c))
        answer_error(s, 401, "unauthorized", "a valid Authorization: Bearer token is required",
                     "WWW-Authenticate", "Bearer");
    else
        start(s, req);
}

/* ---- the admin API on keys (admin.h) ---- */

/* An answer from the core came, rendered with status: written now unless
 * the connection is inside one of its own callbacks (which settles it). */
static void slot_answered(struct slot *s, int status)
{
    slot_ready(s, status);
    if (!s->c->busy)
        settle(s->c);
}

static void on_inspect_reply(void *ctx, const struct verdict *v)
{
    struct slot *s = ctx;
    s->check = NULL;
    slot_answered(s, admin_render_inspect(&s->out, v, s->flags));
}

static void on_reset_reply(void *ctx, const struct reset_result *res)
{
    struct slot *s = ctx;
    s->reset = NULL;
    slot_answered(s, admin_render_reset(&s->out, res, s->flags));
}

/* GET or HEAD looks at a key (a dry run through the core), DELETE resets it. */
static void start_keys(struct slot *s, const struct http_request *req)
{
    struct worker *w = s->c->h->w;
    struct admin_target t;
    struct request_error err;
    if (admin_parse_path(w->core.config, req->path, &t, &err) < 0) {
        answer_error(s, err.status, err.code, err.message, NULL, NULL);
        return;
    }
    if (req->method != HTTP_DELETE) {
        struct check_request creq;
        admin_inspect_request(&t, &creq);
        struct check *ch = check_start(&w->core, &creq, on_inspect_reply, s);
        if (s->state == SLOT_WAITING)
            s->check = ch;
        return;
    }
    /* The client's address for the reset's log line. */
    char peer[CLIENT_IP_TEXT];
    if (s->c->peer.family == AF_UNSPEC)
        snprintf(peer, sizeof peer, "unix");
    else
        client_ip_format(&s->c->peer, peer);
    struct reset *r = admin_reset_start(&w->core, &t, peer, on_reset_reply, s);
    if (s->state == SLOT_WAITING)
        s->reset = r;
}

static void route_health(struct slot *s, int ready)
{
    const char *reason = ready ? worker_unready_reason(s->c->h->w) : NULL;
    char body[96];
    if (!ready) {
        answer_body(s, 200, NULL, "{\"status\":\"ok\"}");
    } else if (reason) {
        snprintf(body, sizeof body, "{\"status\":\"unready\",\"reason\":\"%s\"}", reason);
        answer_body(s, 503, NULL, body);
    } else {
        answer_body(s, 200, NULL, "{\"status\":\"ready\"}");
    }
}

static void route_metrics(struct slot *s)
{
    char *text = worker_metrics_text(s->c->h->w);
    answer_body(s, 200, metrics_type, text);
    free(text);
}

static void route(struct conn *c, const struct http_request *req)
{
    struct slot *s = slot_new(c);
    if (req->head)
        s->flags |= RESPONSE_HEAD;
    if (!req->keep_alive) {
        s->flags |= RESPONSE_CLOSE;
        c->closing = 1;
    } else if (req->http_minor == 0) {
        s->flags |= RESPONSE_KEEP_ALIVE;
    }
    const char *path = req->path;
    int admin_path = strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0 ||
                     strcmp(path, "/metrics") == 0;
    if (c->over_limit)
        answer_error(s, 503, "too_many_connections", "the daemon has too many connections",
                     "Retry-After", "1");
    else if (c->l->checks && strcmp(path, "/check") == 0)
        route_decision(s, req, req->method == HTTP_POST, "use POST on /check", "POST", start_check);
    else if (c->l->checks && strcmp(path, "/json") == 0)
        route_decision(s, req, req->method == HTTP_POST, "use POST on /json", "POST", start_json);
    else if (c->l->checks && strncmp(path, AUTH_PATH_PREFIX, strlen(AUTH_PATH_PREFIX)) == 0)
        /* Gateways ask with the original request's method (Envoy ext_authz,
         * Traefik) and the body is never read: every method is a question. */
        route_decision(s, req, 1, NULL, NULL, start_auth);
    else if (c->l->admin && strncmp(path, ADMIN_KEYS_PREFIX, strlen(ADMIN_KEYS_PREFIX)) == 0)
        route_decision(s, req,
                       req->method == HTTP_GET || req->method == HTTP_HEAD ||
                           req->method == HTTP_DELETE,
                       "use GET, HEAD or DELETE", "GET, HEAD, DELETE", start_keys);
    else if (!c->l->admin || !admin_path)
        answer_error(s, 404, "not_found", "no such path", NULL, NULL);
    else if (req->method != HTTP_GET && req->method != HTTP_HEAD)
        answer_error(s, 405, "method_not_allowed", "use GET", "Allow", "GET, HEAD");
    else if (strcmp(path, "/metrics") == 0)
        route_metrics(s);
    else
        route_health(s, strcmp(path, "/readyz") == 0);
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
            const char *code, *message;
            int status = http_parse_error(&c->parse, &code, &message);
            struct slot *s = slot_new(c);
            s->flags = RESPONSE_CLOSE;
            c->closing = 1;
            answer_error(s, status, code, message, NULL, NULL);
            break;
        }
        c->req_start_us = 0;
        route(c, http_parse_request(&c->parse));
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
    ssize_t n = recv(fd, data, sizeof data, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        /* The client is gone or has stopped sending: answers still due
         * are written (a half-closed client may read them), then close. */
        if (n < 0 || c->lingering || (c->count == 0 && c->out_off == c->out.len)) {
            conn_free(c);
            return;
        }
        c->closing = 1;
        c->in.len = 0;
        settle(c);
        return;
    }
    if (c->lingering)
        return;
    c->last_us = util_monotonic_us();
    c->busy = 1;
    if (c->in.len == 0) {
        /* The common case: whole requests, parsed from the stack. */
        size_t used = parse_input(c, data, (size_t)n);
        if (!c->closing)
            buf_append(&c->in, data + used, (size_t)n - used);
    } else {
        buf_append(&c->in, data, (size_t)n);
        parse_buffered(c);
    }
    c->busy = 0;
    settle(c);
}

/* ---- writing, timers, closing ---- */

/* Writes what c->out holds. Returns -1 if the connection broke. */
static int write_out(struct conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->last_us = util_monotonic_us();
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        } else {
            return -1;
        }
    }
    c->out.len = c->out_off = 0;
    return 0;
}

static void arm_timer(struct conn *c)
{
    const struct http *h = c->h;
    int64_t deadline;
    if (c->lingering)
        deadline = c->linger_until_us;
    else if (c->req_start_us && !c->closing) {
        deadline = c->last_us + h->idle_us;
        if (c->req_start_us + h->request_us < deadline)
            deadline = c->req_start_us + h->request_us;
    } else if (c->count == 0 || c->writing)
        deadline = c->last_us + h->idle_us;
    else {
        event_del(&c->timer); /* the core answers every check in time */
        return;
    }
    int64_t us = deadline - util_monotonic_us();
    if (us < 0)
        us = 0;
    struct timeval tv = {.tv_sec = us / 1000000, .tv_usec = us % 1000000};
    if (event_add(&c->timer, &tv) < 0)
        abort(); /* as in worker_event_want */
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    if (c->lingering || !c->req_start_us || c->closing || c->count == HTTP_PIPELINE_MAX) {
        conn_free(c);
        return;
    }
    struct slot *s = slot_new(c);
    s->flags = RESPONSE_CLOSE;
    c->closing = 1;
    c->in.len = 0;
    answer_error(s, 408, "request_timeout", "the request was not received in time", NULL, NULL);
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
    int written = c->out_off == c->out.len;
    worker_event_want(&c->wr, &c->writing, !written);
    if (written && c->count == 0 && c->closing && !c->lingering) {
        /* Shut our side, then drop what the client still sends. */
        if (shutdown(c->fd, SHUT_WR) < 0) {
            conn_free(c);
            return;
        }
        c->lingering = 1;
        c->linger_until_us = util_monotonic_us() + HTTP_LINGER_US;
    }
    if (h->draining && !c->lingering && conn_quiet(c)) {
        conn_free(c);
        return;
    }
    worker_event_want(&c->rd, &c->reading,
                      c->lingering || (!c->closing && c->count < HTTP_PIPELINE_MAX));
    arm_timer(c);
    /* An answer may have been written: a drain may be over. */
    worker_maybe_idle(h->w);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    settle(arg);
}

static void conn_new(struct http *h, struct listener *l, int fd, const struct sockaddr *peer)
{
    struct conn *c = xcalloc(1, sizeof *c);
    c->h = h;
    c->l = l;
    c->fd = fd;
    client_ip_from_sockaddr(peer, &c->peer);
    struct event_base *base = h->w->core.base;
    if (event_assign(&c->rd, base, fd, EV_READ | EV_PERSIST, on_read, c) < 0 ||
        event_assign(&c->wr, base, fd, EV_WRITE | EV_PERSIST, on_write, c) < 0 ||
        evtimer_assign(&c->timer, base, on_timer, c) < 0)
        abort(); /* only with bad arguments */
    http_parse_init(&c->parse);
    /* Only the check port's connections count: callers filling it must
     * not lock out health probes and scrapes on admin_listen. */
    if (l->checks) {
        /* One count for the whole process, whichever worker accepted:
         * SO_REUSEPORT does not spread connections evenly, so a share per
         * worker would refuse some below the configured value. */
        if (core_count_take(&h->w->srv->connections, h->max_conns))
            c->counted = 1;
        else
            c->over_limit = 1;
    }
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    c->last_us = util_monotonic_us();
    settle(c);
}

/* ---- accepting ---- */

static void accept_pause(struct http *h)
{
    if (h->main.fd >= 0)
        event_del(&h->main.ev);
    if (h->admin.fd >= 0)
        event_del(&h->admin.ev);
    struct timeval tv = {.tv_sec = HTTP_ACCEPT_RESUME_S};
    if (event_add(&h->resume, &tv) < 0)
        abort(); /* as in worker_event_want */
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    struct http *h = arg;
    if (h->draining)
        return;
    if ((h->main.fd >= 0 && event_add(&h->main.ev, NULL) < 0) ||
        (h->admin.fd >= 0 && event_add(&h->admin.ev, NULL) < 0))
        abort(); /* as in worker_event_want */
}

static void on_accept(evutil_socket_t fd, short what, void *arg)
{
    struct listener *l = arg;
    for (int i = 0; i < HTTP_ACCEPT_BATCH; i++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof peer;
        int cfd = accept4(fd, (struct sockaddr *)&peer, &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd >= 0) {
            /* The peer is ${ip} of a forward-auth key (or the proxy
             * whose X-Forwarded-For is believed). */
            if (peer_len == 0 || peer_len > sizeof peer)
                peer.ss_family = AF_UNSPEC;
            conn_new(l->h, l, cfd, (struct sockaddr *)&peer);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            accept_pause(l->h);
        return; /* EAGAIN: none left */
    }
}

static int listener_init(struct http *h, struct listener *l, int fd, int checks, int admin)
{
    *l = (struct listener){.h = h, .fd = fd, .checks = checks, .admin = admin};
    if (fd < 0)
        return 0;
    if (event_assign(&l->ev, h->w->core.base, fd, EV_READ | EV_PERSIST, on_accept, l) < 0 ||
        event_add(&l->ev, NULL) < 0) {
        l->fd = -1;
        return -1;
    }
    return 0;
}

/* ---- the front ---- */

struct http *http_new(struct worker *w, int main_fd, int main_serves_admin, int admin_fd, char *err,
                      size_t errlen)
{
    struct http *h = xcalloc(1, sizeof *h);
    h->w = w;
    h->main.fd = h->admin.fd = -1;
    http_apply_config(h, w->core.config);
    if (evtimer_assign(&h->resume, w->core.base, on_accept_resume, h) < 0 ||
        listener_init(h, &h->main, main_fd, 1, main_serves_admin) < 0 ||
        listener_init(h, &h->admin, admin_fd, 0, 1) < 0) {
        snprintf(err, errlen, "cannot watch the listening sockets");
        http_free(h);
        return NULL;
    }
    return h;
}

void http_apply_config(struct http *h, const struct config *cfg)
{
    h->limits = (struct http_limits){.max_head = HTTP_HEAD_MAX, .max_body = (size_t)cfg->max_body};
    h->idle_us = cfg->idle_timeout_us;
    h->request_us = cfg->request_timeout_us;
    h->max_conns = (size_t)cfg->max_connections;
    free(h->token);
    h->token = cfg->auth_token ? xstrdup(cfg->auth_token) : NULL;
    h->token_len = h->token ? strlen(h->token) : 0;
    /* The new timeouts count from now on for every open connection. */
    for (struct conn *c = h->conns; c; c = c->next)
        if (!c->busy)
            arm_timer(c);
}

void http_drain(struct http *h)
{
    h->draining = 1;
    if (h->main.fd >= 0)
        event_del(&h->main.ev);
    if (h->admin.fd >= 0)
        event_del(&h->admin.ev);
    event_del(&h->resume);
    for (struct conn *c = h->conns, *next; c; c = next) {
        next = c->next;
        if (!c->lingering && conn_quiet(c))
            conn_free(c);
    }
    struct timeval backstop = {.tv_sec = HTTP_DRAIN_MAX_S +
                                         h->w->core.config->redis_timeout_us / 1000000};
    event_base_loopexit(h->w->core.base, &backstop);
}

int http_idle(const struct http *h)
{
    for (const struct conn *c = h->conns; c; c = c->next)
        if (c->count || c->out_off < c->out.len)
            return 0;
    return 1;
}

void http_free(struct http *h)
{
    if (!h)
        return;
    /* No worker_maybe_idle from here on: the worker is going away. */
    while (h->conns) {
        struct conn *c = h->conns;
        conn_free(c);
    }
    if (h->main.fd >= 0)
        event_del(&h->main.ev);
    if (h->admin.fd >= 0)
        event_del(&h->admin.ev);
    event_del(&h->resume);
    free(h->token);
    free(h);
}
