/*
 * http.h: the HTTP front (libevent evhttp): listening sockets, routing,
 * size limits, sending an answer, and stopping for a drain.
 */
#ifndef RATELIMITD_HTTP_H
#define RATELIMITD_HTTP_H

#include <stddef.h>

#include "answer.h"
#include "server.h"
#include "util.h"

struct evhttp_request;

/* Binds srv->config->listen and routes requests to srv. Returns NULL with a
 * message if the address is bad or cannot be bound. */
struct http *http_new(struct server *srv, char *err, size_t errlen) RL_WUR;

/* Sends ans on req (which may already be gone if the client left: then
 * libevent only frees it). */
void http_send_answer(struct server *srv, struct evhttp_request *req, const struct answer *ans);

/* Called by check.c when a check has been answered: lets a drain finish. */
void http_check_done(struct server *srv);

/* Applies what a reload may change without a restart (max_body,
 * idle_timeout) to new requests. */
void http_apply_config(struct http *h, const struct config *cfg);

/* Starts a drain: closes the listening sockets, answers new requests on
 * open connections with 503, and exits the event loop once every check in
 * flight is answered and written (or after 30 s at most). */
void http_drain(struct server *srv);

/* Closes everything. NULL is a no-op. */
void http_free(struct http *h);

#endif
