/*
 * http.c: evhttp setup and routing.
 *
 *   POST /check    -> check.c (Bearer token when auth_token_file is set)
 *   GET  /healthz  -> 200 while the event loop runs
 *   GET  /readyz   -> 200 when Redis is connected and the script loaded
 *   GET  /metrics  -> Prometheus text (metrics.c)
 *   anything else  -> 404, or 405 with Allow for a known path
 *
 * With admin_listen, /healthz, /readyz and /metrics are served there and only there,
 * and the admin address serves nothing else: the check port can be exposed
 * while the admin port stays local.
 *
 * Owns the listening sockets (TCP or unix), the limits on what a client may
 * send (body, headers, idle time, connections) and the drain. Does not own
 * any answer's content (response.c).
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"
#include "http.h"
#include "metrics.h"
#include "request.h"
#include "answer.h"
#include "sha1.h"
#include "worker.h"

#define HTTP_MAX_HEADERS_SIZE 8192
#define HTTP_DRAIN_MAX_S 5 /* past redis.timeout */
/* After accept() fails (out of descriptors), accepting pauses until the
 * next tick of this timer, rather than spinning on a listening socket that
 * stays readable. */
#define HTTP_ACCEPT_RESUME_S 1

/* One listening address and its evhttp. */
struct listener {
    struct http *http;
    struct evhttp *evh;
    struct evhttp_bound_socket *bound; /* NULL once stopped */
    char *unix_path;                   /* unlinked on free */
    int checks;                        /* serves /check */
    int admin;                         /* serves /healthz, /readyz */
};

/*
 * The open connections, as a set of evhttp_connection pointers (open
 * addressing, linear probing). libevent 2.1 has no connection limit and no
 * hook at accept, so a connection is counted from its first request until
 * libevent closes it; one still sending its first request is bounded by
 * idle_timeout instead.
 */
struct conn_slot {
    struct evhttp_connection *conn; /* NULL: empty */
    unsigned writing;               /* answers handed to libevent, not yet written */
};

struct conn_set {
    struct conn_slot *slots;
    size_t mask; /* capacity - 1, capacity a power of two > 2 * max */
    size_t count;
    size_t max;
};

struct http {
    struct worker *w;
    size_t writing; /* answers handed to libevent and not yet written */
    struct listener main, admin;
    struct event *resume; /* re-enables accepting paused by on_accept_error */
    struct conn_set conns;
};

/* ---- the connection set ---- */

static void conn_set_init(struct conn_set *s, size_t max)
{
    size_t cap = 16;
    while (cap < 2 * max + 1)
        cap *= 2;
    s->slots = xcalloc(cap, sizeof *s->slots);
    s->mask = cap - 1;
    s->count = 0;
    s->max = max;
}

static size_t conn_hash(const struct conn_set *s, const struct evhttp_connection *c)
{
    return (size_t)(((uintptr_t)c >> 4) * 0x9E3779B97F4A7C15ULL >> 17) & s->mask;
}

/* The slot holding c, or the empty slot where it would go. */
static struct conn_slot *conn_find(const struct conn_set *s, const struct evhttp_connection *c)
{
    size_t i = conn_hash(s, c);
    while (s->slots[i].conn && s->slots[i].conn != c)
        i = (i + 1) & s->mask;
    return &s->slots[i];
}

static void conn_remove(struct conn_set *s, struct conn_slot *slot)
{
    size_t i = (size_t)(slot - s->slots);
    s->slots[i] = (struct conn_slot){0};
    s->count--;
    /* Backward-shift deletion: move up any entry of the same cluster whose
     * home slot is not between the hole and itself. */
    for (size_t j = (i + 1) & s->mask; s->slots[j].conn; j = (j + 1) & s->mask) {
        size_t k = conn_hash(s, s->slots[j].conn);
        if ((j > i && (k <= i || k > j)) || (j < i && k <= i && k > j)) {
            s->slots[i] = s->slots[j];
            s->slots[j] = (struct conn_slot){0};
            i = j;
        }
    }
}


/* libevent frees a connection whose write failed without telling the
 * request (no on-complete callback): its unwritten answers are forgotten
 * here, so a drain never waits for them. */
static void on_connection_closed(struct evhttp_connection *evcon, void *arg)
{
    struct http *h = arg;
    struct conn_slot *slot = conn_find(&h->conns, evcon);
    if (!slot->conn)
        return;
    h->writing -= slot->writing;
    conn_remove(&h->conns, slot);
    worker_maybe_idle(h->w);
}

/* Counts req's connection if it is new. Returns -1 when it is new and the
 * limit is reached (the caller refuses the request and closes). */
static int conn_track(struct http *h, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (!evcon)
        return 0;
    struct conn_slot *slot = conn_find(&h->conns, evcon);
    if (slot->conn)
        return 0;
    if (h->conns.count >= h->conns.max)
        return -1;
    slot->conn = evcon;
    h->conns.count++;
    evhttp_connection_set_closecb(evcon, on_connection_closed, h);
    return 0;
}

/* ---- answers ---- */

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

static void on_answer_written(struct evhttp_request *req, void *arg)
{
    struct http *h = arg;
    struct conn_slot *slot = conn_find(&h->conns, evhttp_request_get_connection(req));
    if (slot->conn && slot->writing) {
        slot->writing--;
        h->writing--;
    }
    worker_maybe_idle(h->w);
}

static void send_answer(struct http *h, struct evhttp_request *req, const struct answer *ans)
{
    /* A drain waits for answers on counted connections to be written:
     * libevent calls on_answer_written once one is on the wire, or the
     * connection's close callback if it fails first. */
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct conn_slot *slot = evcon ? conn_find(&h->conns, evcon) : NULL;
    if (slot && slot->conn) {
        slot->writing++;
        h->writing++;
        evhttp_request_set_on_complete_cb(req, on_answer_written, h);
    }
    metrics_http_status(h->w->metrics, ans->status);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    evhttp_add_header(out, "Content-Type",
                      ans->content_type ? ans->content_type : "application/json");
    evhttp_add_header(out, "Cache-Control", "no-store");
    for (size_t i = 0; i < ans->nheaders; i++)
        evhttp_add_header(out, ans->headers[i].name, ans->headers[i].value);
    if (h->w->draining || ans->close)
        evhttp_add_header(out, "Connection", "close");
    struct evbuffer *buf = evbuffer_new();
    size_t len = strlen(ans->body);
    /* Every body ends with exactly one newline, for people with curl. */
    if (!buf || evbuffer_add(buf, ans->body, len) < 0 ||
        ((len == 0 || ans->body[len - 1] != '\n') && evbuffer_add(buf, "\n", 1) < 0))
        abort(); /* allocation failure */
    evhttp_send_reply(req, ans->status, reason_phrase(ans->status), buf);
    evbuffer_free(buf);
}

static void send_error(struct http *h, struct evhttp_request *req, int status,
                       const char *code, const char *message, const char *hname,
                       const char *hvalue)
{
    struct answer ans;
    answer_error(status, code, message, &ans);
    if (hname)
        answer_add_header(&ans, hname, hvalue);
    ans.close = status == 503 || status == 401;
    send_answer(h, req, &ans);
    answer_free(&ans);
}

static void send_status(struct http *h, struct evhttp_request *req, int status,
                        const char *state)
{
    struct answer ans = {.status = status};
    ans.body = xstrdup(state);
    send_answer(h, req, &ans);
    answer_free(&ans);
}

/* ---- routing ---- */

/* True if the request carries "Authorization: Bearer <token>" with the
 * configured token (or none is configured). */
static int authorized(const struct config *cfg, struct evhttp_request *req)
{
    if (!cfg->auth_token)
        return 1;
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!v || strncasecmp(v, "Bearer ", 7) != 0)
        return 0;
    v += 7;
    /* Compare digests, so that neither the time nor the length of the
     * comparison depends on the token. */
    char got[41], want[41];
    sha1_hex(v, strlen(v), got);
    sha1_hex(cfg->auth_token, strlen(cfg->auth_token), want);
    return util_consttime_equal(got, 40, want, 40);
}

/* What a check's answer needs to find its way back. */
struct pending_answer {
    struct http *h;
    struct evhttp_request *req;
};

static void on_check_reply(void *ctx, const struct verdict *v)
{
    struct pending_answer *pa = ctx;
    struct answer ans;
    answer_verdict(v, &ans);
    send_answer(pa->h, pa->req, &ans);
    answer_free(&ans);
    free(pa);
}

/* Decodes the body and hands the request to the core. */
static void start_check(struct http *h, struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    struct check_request creq;
    struct request_error rerr;
    if (request_parse(h->w->config, body, len, &creq, &rerr) < 0) {
        send_error(h, req, rerr.status, rerr.code, rerr.message, NULL, NULL);
        return;
    }
    struct pending_answer *pa = xmalloc(sizeof *pa);
    *pa = (struct pending_answer){h, req};
    (void)check_start(h->w, &creq, on_check_reply, pa);
}

static void route_check(struct http *h, struct evhttp_request *req)
{
    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST)
        send_error(h, req, 405, "method_not_allowed", "use POST on /check", "Allow", "POST");
    else if (h->w->draining)
        send_error(h, req, 503, "shutting_down", "the daemon is shutting down", "Retry-After",
                   "1");
    else if (!authorized(h->w->config, req))
        send_error(h, req, 401, "unauthorized", "a valid Authorization: Bearer token is required",
                   "WWW-Authenticate", "Bearer");
    else
        start_check(h, req);
}

static void route_health(struct http *h, struct evhttp_request *req, int ready)
{
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    const char *reason = ready ? worker_unready_reason(h->w) : NULL;
    char body[96];
    if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
        send_error(h, req, 405, "method_not_allowed", "use GET", "Allow", "GET, HEAD");
    } else if (!ready) {
        send_status(h, req, 200, "{\"status\":\"ok\"}");
    } else if (reason) {
        snprintf(body, sizeof body, "{\"status\":\"unready\",\"reason\":\"%s\"}", reason);
        send_status(h, req, 503, body);
    } else {
        send_status(h, req, 200, "{\"status\":\"ready\"}");
    }
}

static void route_metrics(struct http *h, struct evhttp_request *req)
{
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
        send_error(h, req, 405, "method_not_allowed", "use GET", "Allow", "GET, HEAD");
        return;
    }
    /* The body is the exposition text, not JSON. */
    struct answer ans = {.status = 200, .content_type = "text/plain; version=0.0.4; charset=utf-8"};
    ans.body = worker_metrics_text(h->w);
    send_answer(h, req, &ans);
    answer_free(&ans);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct listener *l = arg;
    struct http *h = l->http;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path)
        path = "";

    /* Only the check port's connections count: callers filling it up must
     * not lock out health probes and scrapes on admin_listen. */
    if (l->checks && conn_track(l->http, req) < 0) {
        send_error(h, req, 503, "too_many_connections", "the daemon has too many connections",
                   "Retry-After", "1");
        return;
    }
    if (l->checks && strcmp(path, "/check") == 0)
        route_check(h, req);
    else if (l->admin && strcmp(path, "/healthz") == 0)
        route_health(h, req, 0);
    else if (l->admin && strcmp(path, "/readyz") == 0)
        route_health(h, req, 1);
    else if (l->admin && strcmp(path, "/metrics") == 0)
        route_metrics(h, req);
    else
        send_error(h, req, 404, "not_found", "no such path", NULL, NULL);
}

int http_idle(const struct http *h)
{
    return h->writing == 0;
}

/* ---- listeners ---- */

/* Binds "unix:/path": a stale socket file from a previous run is replaced,
 * but not one another process still answers on. */
static int bind_unix(struct listener *l, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "listen: unix socket path too long: %s", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "listen: socket: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (probe >= 0)
            close(probe);
        if (live) {
            snprintf(err, errlen, "listen: %s is in use by another process", path);
            close(fd);
            return -1;
        }
        unlink(path);
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 1024) < 0) {
        snprintf(err, errlen, "listen: cannot bind %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    l->bound = evhttp_accept_socket_with_handle(l->evh, fd);
    if (!l->bound) {
        snprintf(err, errlen, "listen: cannot accept on %s", path);
        close(fd);
        return -1;
    }
    l->unix_path = xstrdup(path);
    return 0;
}

static int bind_tcp(struct listener *l, const char *listen, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    const char *hs = listen, *he = colon;
    if (listen[0] == '[') {
        hs = listen + 1;
        he = strchr(listen, ']');
        colon = he ? he + 1 : NULL;
    }
    int64_t port;
    if (!colon || *colon != ':' || (size_t)(he - hs) >= sizeof host ||
        util_parse_int64(colon + 1, 0, 65535, &port, err, errlen) < 0) {
        snprintf(err, errlen, "listen: bad address %s", listen);
        return -1;
    }
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    l->bound = evhttp_bind_socket_with_handle(l->evh, host, (unsigned short)port);
    if (!l->bound) {
        snprintf(err, errlen, "listen: cannot bind %s: %s", listen, strerror(errno));
        return -1;
    }
    return 0;
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    struct http *h = arg;
    /* Enabling an enabled listener changes nothing. */
    if (h->main.bound)
        evconnlistener_enable(evhttp_bound_socket_get_listener(h->main.bound));
    if (h->admin.bound)
        evconnlistener_enable(evhttp_bound_socket_get_listener(h->admin.bound));
}

/* libevent passes its own evhttp as arg, not ours: hence the timer above
 * rather than one armed from here. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
    evconnlistener_disable(lev);
}

/* Settings a reload may change take effect for new requests. */
static void apply_limits(struct listener *l, const struct config *cfg)
{
    evhttp_set_max_body_size(l->evh, (ev_ssize_t)cfg->max_body);
    struct timeval tv = {.tv_sec = cfg->idle_timeout_us / 1000000,
                         .tv_usec = cfg->idle_timeout_us % 1000000};
    evhttp_set_timeout_tv(l->evh, &tv);
}

static int listener_open(struct http *h, struct listener *l, const char *addr, int checks,
                         int admin, char *err, size_t errlen)
{
    l->http = h;
    l->checks = checks;
    l->admin = admin;
    l->evh = evhttp_new(h->w->base);
    if (!l->evh) {
        snprintf(err, errlen, "cannot create the HTTP server");
        return -1;
    }
    /* Every method reaches on_request, so that the answer to a wrong one is
     * ours (405 with Allow, JSON body), not libevent's. */
    evhttp_set_allowed_methods(l->evh, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                           EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                           EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                           EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_headers_size(l->evh, HTTP_MAX_HEADERS_SIZE);
    /* Read (and drop) the rest of an oversized body before closing, so the
     * client gets its 413 instead of a reset. */
    evhttp_set_flags(l->evh, EVHTTP_SERVER_LINGERING_CLOSE);
    apply_limits(l, h->w->config);
    evhttp_set_gencb(l->evh, on_request, l);
    int rc = strncmp(addr, "unix:", 5) == 0 ? bind_unix(l, addr + 5, err, errlen)
                                            : bind_tcp(l, addr, err, errlen);
    if (rc == 0)
        evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(l->bound), on_accept_error);
    return rc;
}

static void listener_stop(struct listener *l)
{
    if (l->bound)
        evhttp_del_accept_socket(l->evh, l->bound);
    l->bound = NULL;
}

static void listener_close(struct listener *l)
{
    if (l->evh)
        evhttp_free(l->evh);
    if (l->unix_path) {
        unlink(l->unix_path);
        free(l->unix_path);
    }
}

struct http *http_new(struct worker *w, char *err, size_t errlen)
{
    const struct config *cfg = w->config;
    struct http *h = xcalloc(1, sizeof *h);
    h->w = w;
    conn_set_init(&h->conns, (size_t)cfg->max_connections);
    struct timeval tick = {.tv_sec = HTTP_ACCEPT_RESUME_S};
    h->resume = event_new(w->base, -1, EV_PERSIST, on_accept_resume, h);
    if (!h->resume || event_add(h->resume, &tick) < 0) {
        snprintf(err, errlen, "cannot create a timer");
        http_free(h);
        return NULL;
    }
    if (listener_open(h, &h->main, cfg->listen, 1, !cfg->admin_listen, err, errlen) < 0 ||
        (cfg->admin_listen &&
         listener_open(h, &h->admin, cfg->admin_listen, 0, 1, err, errlen) < 0)) {
        http_free(h);
        return NULL;
    }
    return h;
}

void http_apply_config(struct http *h, const struct config *cfg)
{
    apply_limits(&h->main, cfg);
    if (h->admin.evh)
        apply_limits(&h->admin, cfg);
}

void http_drain(struct http *h)
{
    listener_stop(&h->main);
    listener_stop(&h->admin);
    /* The backstop ends a drain that waits too long anyway: past the Redis
     * deadline every check has had its answer. */
    struct timeval backstop = {.tv_sec = HTTP_DRAIN_MAX_S +
                                         h->w->config->redis_timeout_us / 1000000};
    event_base_loopexit(h->w->base, &backstop);
}

void http_free(struct http *h)
{
    if (!h)
        return;
    /* evhttp_free closes the connections, calling on_connection_closed:
     * the set must outlive it. */
    if (h->resume)
        event_free(h->resume);
    listener_close(&h->main);
    listener_close(&h->admin);
    free(h->conns.slots);
    free(h);
}
