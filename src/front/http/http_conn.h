/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_conn.h: the inside of the HTTP front's connections, defined in
 * http.c and shared with http_routes.c only: a connection, the ring of
 * slots (one per request read and not yet answered), and the ways a route
 * answers into its slot. Nothing outside front/http/ includes it.
 *
 * Owns these types' shape; the life of a connection is http.c's, what a
 * path does is http_routes.c's.
 */
#ifndef RATELIMITD_HTTP_CONN_H
#define RATELIMITD_HTTP_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "front/conn.h"
#include "front/front.h"
#include "front/http/http_parse.h"
#include "front/listener.h"
#include "lib/buf.h"
#include "lib/client_ip.h"

#define HTTP_PIPELINE_MAX 16 /* requests of one connection awaiting their answers */

struct http;
struct conn;

enum slot_state { SLOT_FREE, SLOT_WAITING, SLOT_READY };

/* One request read and not yet answered. */
struct slot {
    struct conn *c;
    struct check *check;         /* while the core decides; NULL otherwise */
    struct reset *reset;         /* while a reset is under way; NULL otherwise */
    struct override_change *ovr; /* while an override change is under way */
    struct rls_call *rls;        /* while a POST /json is decided; NULL otherwise */
    struct lease_call *lease;    /* while a /release or /renew is under way */
    struct top_query *top;       /* while GET /v1/top is under way */
    struct buf out;              /* the rendered answer, until earlier ones are out */
    enum slot_state state;
    unsigned flags; /* RESPONSE_* for the answer */
};

struct conn {
    struct http *h;
    const struct listener_socket *sock; /* accepted there: its roles (http_routes.h) */
    struct front_conn fc;               /* the socket, its events and timer, lingering */
    struct client_addr peer;            /* AF_UNSPEC: a unix-socket peer */
    struct http_parse parse;
    struct buf in;  /* read, not yet parsed: part of a request */
    struct buf out; /* answers ready, in order; out_off of them written */
    size_t out_off;
    struct slot slots[HTTP_PIPELINE_MAX];
    unsigned head, count; /* the ring of slots in use */
    int64_t req_start_us; /* first byte of the request being read; 0: none */
    int counted;          /* holds a unit of max_connections (listener_admit) */
    int over_limit;       /* came past max_connections: its first request gets 503 */
    int closing;          /* no further request: close once the answers are written */
    int busy;             /* inside one of this connection's callbacks */
    int served;           /* has carried a request */
    struct conn *prev, *next;
};

struct http {
    struct front base; /* first: the worker holds the front by it */
    const struct front_host *host;
    struct listener l; /* listen (and admin_listen), counting, the token, draining */
    struct http_limits limits;
    int64_t idle_us, request_us;
    struct conn *conns;
};

/* The next slot of c's ring, waiting (the caller checked there is room). */
struct slot *http_slot_new(struct conn *c);

/* Marks s answered with status (rendered into s->out). */
void http_slot_ready(struct slot *s, int status);

/* An answer from the core came, rendered with status: written now unless
 * the connection is inside one of its own callbacks (which settles it). */
void http_slot_answered(struct slot *s, int status);

/* A drain closes every connection after its current answer. */
void http_close_if_draining(struct slot *s);

/* An error answer. 401 and 503 close the connection (a client refused or
 * turned away should not keep it), as does a drain. */
void http_answer_error(struct slot *s, enum request_code code, const char *message,
                       const char *hname, const char *hvalue);

/* A body answer (content_type NULL: JSON). */
void http_answer_body(struct slot *s, int status, const char *content_type, const char *body);

#endif
