/*
 * http.c: evhttp setup and routing.
 *
 *   POST /check    -> check.c
 *   GET  /healthz  -> 200 while the event loop runs
 *   GET  /readyz   -> 200 when Redis is connected and the script loaded
 *   anything else  -> 404, or 405 with Allow for a known path
 *
 * Owns the listening sockets (TCP or unix) and the limits on what a client
 * may send (body, headers, idle time). Does not own any answer's content
 * (response.c).
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "backend_redis.h"
#include "check.h"
#include "http.h"

#define HTTP_MAX_HEADERS_SIZE 8192
#define HTTP_IDLE_TIMEOUT_S 30
#define HTTP_DRAIN_MAX_S 30

struct http {
    struct evhttp *evh;
    struct evhttp_bound_socket *bound; /* the listener; NULL once stopped */
    char *unix_path;                   /* unlinked on free */
};

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* Exits the loop once a drain has nothing left to answer or to write. */
static void maybe_end_drain(struct server *srv)
{
    if (srv->draining && srv->inflight == 0 && srv->writing == 0)
        event_base_loopexit(srv->base, NULL);
}

static void on_answer_written(struct evhttp_request *req, void *arg)
{
    struct server *srv = arg;
    srv->writing--;
    maybe_end_drain(srv);
}

void http_send_answer(struct server *srv, struct evhttp_request *req, const struct answer *ans)
{
    /* libevent calls on_answer_written once the answer is on the wire, which
     * lets a drain wait for it; a request whose client has left is only
     * freed, with no callback. */
    if (evhttp_request_get_connection(req)) {
        srv->writing++;
        evhttp_request_set_on_complete_cb(req, on_answer_written, srv);
    }
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Cache-Control", "no-store");
    for (size_t i = 0; i < ans->nheaders; i++)
        evhttp_add_header(h, ans->headers[i].name, ans->headers[i].value);
    if (srv->draining)
        evhttp_add_header(h, "Connection", "close");
    struct evbuffer *buf = evbuffer_new();
    if (!buf || evbuffer_add_printf(buf, "%s\n", ans->body) < 0)
        abort(); /* allocation failure */
    evhttp_send_reply(req, ans->status, reason_phrase(ans->status), buf);
    evbuffer_free(buf);
}

static void send_simple(struct server *srv, struct evhttp_request *req, int status,
                        const char *code, const char *message, const char *hname,
                        const char *hvalue)
{
    struct answer ans;
    response_error(status, code, message, &ans);
    if (hname)
        response_add_header(&ans, hname, hvalue);
    http_send_answer(srv, req, &ans);
    answer_free(&ans);
}

static void send_status(struct server *srv, struct evhttp_request *req, int status,
                        const char *state)
{
    struct answer ans = {.status = status};
    ans.body = xstrdup(state);
    http_send_answer(srv, req, &ans);
    answer_free(&ans);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct server *srv = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    if (!path)
        path = "";

    if (strcmp(path, "/check") == 0) {
        if (method != EVHTTP_REQ_POST) {
            send_simple(srv, req, 405, "method_not_allowed", "use POST on /check", "Allow",
                        "POST");
        } else if (srv->draining) {
            send_simple(srv, req, 503, "shutting_down", "the daemon is shutting down",
                        "Retry-After", "1");
        } else {
            check_start(srv, req);
        }
        return;
    }
    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0) {
        if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
            send_simple(srv, req, 405, "method_not_allowed", "use GET", "Allow", "GET, HEAD");
        } else if (path[1] == 'h') {
            send_status(srv, req, 200, "{\"status\":\"ok\"}");
        } else if (srv->draining) {
            send_status(srv, req, 503, "{\"status\":\"unready\",\"reason\":\"shutting_down\"}");
        } else if (!backend_ready(srv->backend)) {
            send_status(srv, req, 503,
                        "{\"status\":\"unready\",\"reason\":\"redis_unavailable\"}");
        } else {
            send_status(srv, req, 200, "{\"status\":\"ready\"}");
        }
        return;
    }
    send_simple(srv, req, 404, "not_found", "no such path; use POST /check", NULL, NULL);
}

void http_check_done(struct server *srv)
{
    srv->inflight--;
    maybe_end_drain(srv);
}

static void http_stop_accepting(struct http *h)
{
    if (h->bound)
        evhttp_del_accept_socket(h->evh, h->bound);
    h->bound = NULL;
}

void http_drain(struct server *srv)
{
    srv->draining = 1;
    http_stop_accepting(srv->http);
    /* A write that fails midway never completes: the backstop ends the
     * drain anyway. */
    struct timeval backstop = {.tv_sec = HTTP_DRAIN_MAX_S};
    event_base_loopexit(srv->base, &backstop);
    maybe_end_drain(srv);
}

/* Binds "unix:/path": a stale socket file from a previous run is replaced. */
static int bind_unix(struct http *h, const char *path, char *err, size_t errlen)
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
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 1024) < 0) {
        snprintf(err, errlen, "listen: cannot bind %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    h->bound = evhttp_accept_socket_with_handle(h->evh, fd);
    if (!h->bound) {
        snprintf(err, errlen, "listen: cannot accept on %s", path);
        close(fd);
        return -1;
    }
    h->unix_path = xstrdup(path);
    return 0;
}

static int bind_tcp(struct http *h, const char *listen, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    const char *hs = listen, *he = colon;
    if (listen[0] == '[') {
        hs = listen + 1;
        he = strchr(listen, ']');
        if (!he || he[1] != ':') {
            snprintf(err, errlen, "listen: bad address %s", listen);
            return -1;
        }
        colon = he + 1;
    }
    int64_t port;
    if (!colon || (size_t)(he - hs) >= sizeof host ||
        util_parse_int64(colon + 1, 0, 65535, &port, err, errlen) < 0) {
        snprintf(err, errlen, "listen: bad address %s", listen);
        return -1;
    }
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    h->bound = evhttp_bind_socket_with_handle(h->evh, host, (unsigned short)port);
    if (!h->bound) {
        snprintf(err, errlen, "listen: cannot bind %s: %s", listen, strerror(errno));
        return -1;
    }
    return 0;
}

struct http *http_new(struct server *srv, char *err, size_t errlen)
{
    struct http *h = xcalloc(1, sizeof *h);
    h->evh = evhttp_new(srv->base);
    if (!h->evh) {
        snprintf(err, errlen, "cannot create the HTTP server");
        free(h);
        return NULL;
    }
    /* Every method reaches on_request, so that the answer to a wrong one is
     * ours (405 with Allow, JSON body), not libevent's. */
    evhttp_set_allowed_methods(h->evh, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                           EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                           EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                           EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_body_size(h->evh, (ev_ssize_t)srv->config->max_body);
    /* Read (and drop) the rest of an oversized body before closing, so the
     * client gets its 413 instead of a reset. */
    evhttp_set_flags(h->evh, EVHTTP_SERVER_LINGERING_CLOSE);
    evhttp_set_max_headers_size(h->evh, HTTP_MAX_HEADERS_SIZE);
    evhttp_set_timeout(h->evh, HTTP_IDLE_TIMEOUT_S);
    evhttp_set_gencb(h->evh, on_request, srv);

    const char *listen = srv->config->listen;
    int rc = strncmp(listen, "unix:", 5) == 0 ? bind_unix(h, listen + 5, err, errlen)
                                              : bind_tcp(h, listen, err, errlen);
    if (rc < 0) {
        http_free(h);
        return NULL;
    }
    return h;
}

void http_free(struct http *h)
{
    if (!h)
        return;
    evhttp_free(h->evh);
    if (h->unix_path) {
        unlink(h->unix_path);
        free(h->unix_path);
    }
    free(h);
}
