/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.h: the HTTP/1.1 front of one worker, on libevent's core (plain
 * events on the sockets, no evhttp): reading, parsing (http_parse.c),
 * routing (http_routes.c: which path is served where), the limits on what
 * a client may send, answers in request order, writing, and stopping for a
 * drain. Accepting, max_connections and the token are listener.c's.
 *
 * It serves listen (/check, /json, /auth/, and the admin paths too unless
 * admin_listen is set) and admin_listen (/healthz, /readyz, /metrics,
 * /v1/keys/). The worker reaches it only through its ops table.
 */
#ifndef RATELIMITD_HTTP_H
#define RATELIMITD_HTTP_H

#include "front/front.h"

/* The HTTP front's row of front_all (front.c). Its apply_config: max_body,
 * idle_timeout, request_timeout, max_connections and the token apply at
 * once, to open connections too. Its drain: stops accepting; closes idle
 * keep-alive connections; new requests get 503 shutting_down and
 * Connection: close; answers in flight are still written; the event loop
 * is exited after redis.timeout + HTTP_DRAIN_MAX_S at the latest. Its free:
 * pending checks are cancelled with check_cancel. */
extern const struct front_ops http_front;

/* A drain's backstop, past redis.timeout: by then every check has its
 * answer, and this is the time left to write them. So the longest drain is
 * CONFIG_REDIS_TIMEOUT_MAX_US + HTTP_DRAIN_MAX_S, which the systemd unit's
 * TimeoutStopSec and docker/compose.yaml's stop_grace_period must exceed
 * (test_docs checks them). */
#define HTTP_DRAIN_MAX_S 5

#endif
