/*
 * http.h: the HTTP/1.1 front of one worker, on libevent's core (plain
 * events on the sockets, no evhttp): accepting, reading, parsing
 * (http_parse.c), routing, the limits on what a client may send, answers in
 * request order, writing, and stopping for a drain.
 *
 *   POST /check     -> check.c (Bearer token when auth_token_file is set)
 *   POST /json      -> Envoy's rate limit service, envoyproxy/ratelimit's
 *                      JSON form (rls_json.c, rls.c; same token)
 *   any method /auth/<policy>[/...]
 *                   -> forward-auth (auth.c): one check, key from the
 *                      request; 200 or the policy's deny_status (same token)
 *   GET  /healthz   -> 200 while the event loop runs
 *   GET  /readyz    -> 200 when the worker can take checks
 *   GET  /metrics   -> Prometheus text
 *   anything else   -> 404, or 405 with Allow for a known path
 *
 * With admin_listen, /healthz, /readyz and /metrics are served there and
 * only there, and the check port serves /check, /json and /auth/ only.
 */
#ifndef RATELIMITD_HTTP_H
#define RATELIMITD_HTTP_H

#include <stddef.h>

#include "config/config.h"
#include "lib/util.h"

struct worker;
struct http;

/* Serves on main_fd (/check, and the admin paths too when
 * main_serves_admin) and on admin_fd (-1: none), listening sockets that the
 * caller keeps owning (listen.h) and that must outlive the front. Takes its
 * limits from w->config. Returns NULL with a message on failure. */
struct http *http_new(struct worker *w, int main_fd, int main_serves_admin, int admin_fd, char *err,
                      size_t errlen) RL_WUR;

/* A reload: max_body, idle_timeout, request_timeout, max_connections and
 * the token apply at once, to open connections too. */
void http_apply_config(struct http *h, const struct config *cfg);

/* A drain's backstop, past redis.timeout: by then every check has its
 * answer, and this is the time left to write them. So the longest drain is
 * CONFIG_REDIS_TIMEOUT_MAX_US + HTTP_DRAIN_MAX_S, which the systemd unit's
 * TimeoutStopSec and docker/compose.yaml's stop_grace_period must exceed
 * (test_docs checks them). */
#define HTTP_DRAIN_MAX_S 5

/* Stops accepting; closes idle keep-alive connections; new requests get
 * 503 shutting_down and Connection: close; answers in flight are still
 * written. The event loop is exited after redis.timeout + HTTP_DRAIN_MAX_S
 * at the latest. */
void http_drain(struct http *h);

/* Nothing left to answer or to write. */
int http_idle(const struct http *h);

/* Closes every connection (pending checks are cancelled with check_cancel)
 * and stops watching the listening sockets. NULL is a no-op. */
void http_free(struct http *h);

#endif
