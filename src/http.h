/*
 * http.h: the HTTP front (libevent evhttp): listening sockets, routing,
 * size limits, sending an answer, and stopping for a drain.
 */
#ifndef RATELIMITD_HTTP_H
#define RATELIMITD_HTTP_H

#include <stddef.h>

#include "config.h"
#include "util.h"

struct worker;
struct http;

/* Binds w->config->listen and routes requests to w. Returns NULL with a
 * message if the address is bad or cannot be bound. */
struct http *http_new(struct worker *w, char *err, size_t errlen) RL_WUR;

/* Nothing handed to libevent is left to write. */
int http_idle(const struct http *h);

/* Applies what a reload may change without a restart (max_body,
 * idle_timeout) to new requests. */
void http_apply_config(struct http *h, const struct config *cfg);

/* Starts a drain: closes the listening sockets, answers new requests on
 * open connections with 503, and exits the event loop once every check in
 * flight is answered and written (or after 30 s at most). */
void http_drain(struct http *h);

/* Closes everything. NULL is a no-op. */
void http_free(struct http *h);

#endif
