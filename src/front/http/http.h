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
 * keep-alive connections (one that has carried no request yet may wait a
 * moment for its first); requests still arriving are answered, with
 * Connection: close (the backend is there until the loop ends); answers in flight are still written
 * (the worker ends the loop at the drain's backstop, worker.h). Its free: pending checks are
 * cancelled with check_cancel. */
extern const struct front_ops http_front;

#endif
