/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_conn.h: the inside of the gRPC front, defined in grpc.c and shared
 * with grpc_call.c only: the front's instance, a connection, a stream.
 * Nothing outside front/grpc/ includes it.
 *
 * Owns these types' shape; the life of a connection is grpc.c's, the life
 * of a stream (its call and its answer) grpc_call.c's.
 */
#ifndef RATELIMITD_GRPC_CONN_H
#define RATELIMITD_GRPC_CONN_H

#include <event2/event_struct.h>
#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "front/conn.h"
#include "front/front.h"
#include "front/grpc/grpc_arena.h"
#include "front/listener.h"
#include "lib/buf.h"

/* SETTINGS_MAX_HEADER_LIST_SIZE, and the most header bytes a stream may
 * send (name + value + 32 each, as HTTP/2 counts them). */
#define GRPC_HEADER_LIST_MAX 16384
/* Bytes waiting to be written on one connection before it stops reading. */
#define GRPC_OUT_MAX 65536

enum grpc_method { METHOD_UNKNOWN, METHOD_RLS, METHOD_HEALTH };

struct gconn;

/* One stream: a unary call from its HEADERS to its answer. */
struct stream {
    struct gconn *c;
    int32_t id;
    enum grpc_method method;
    int post;              /* :method POST */
    int grpc_type;         /* content-type application/grpc[+proto|;...] */
    int compressed_ok;     /* grpc-encoding absent or identity */
    int authorized;        /* the bearer token matched (or none is needed) */
    size_t header_bytes;   /* counted as SETTINGS_MAX_HEADER_LIST_SIZE does */
    int too_big;           /* the message passed max_body: not kept */
    struct buf body;       /* the request's DATA */
    struct rls_call *call; /* while rls decides */
    int answered;
    struct buf resp; /* the answer's DATA (prefix + message) */
    size_t resp_off;
    LIST_ENTRY(stream) link;
};

struct gconn {
    struct grpc *g;
    struct front_conn fc; /* the socket, its events and timer, lingering */
    nghttp2_session *s;
    struct event flush_ev; /* active while a later reply waits to be written */
    int flush_due;
    struct buf out; /* bytes from nghttp2 not yet written; out_off of them are */
    size_t out_off;
    int counted;    /* counts towards max_connections */
    int over_limit; /* came past max_connections: every call gets UNAVAILABLE */
    int busy;
    int closing;     /* read nothing more into nghttp2: end once written */
    int mute;        /* a flood: send nothing more either */
    int proto_error; /* ended for a protocol error or a flood (counted once) */
    int notice;      /* a drain's shutdown notice is out; the final GOAWAY is not */
    int acked;       /* the PING sent with the notice is acknowledged */
    LIST_HEAD(, stream) streams;
    LIST_ENTRY(gconn) link;
};

struct grpc {
    struct front base; /* first: the worker holds the front by it */
    const struct front_host *host;
    struct listener l; /* grpc_listen, counting, the token, draining */
    size_t max_msg;
    uint32_t max_streams;
    int64_t idle_us;
    LIST_HEAD(, gconn) conns;
    /* A drain's shutdown notices were sent GRPC_DRAIN_NOTICE_US ago. */
    struct event notice_timer;
    int notice_over;
    /* Freed streams kept for the next ones (grpc_call.c). */
    LIST_HEAD(, stream) spare;
    size_t nspare;
    /* What one call's decoding allocates: reset once the core has it. */
    struct grpc_arena arena;
    /* What nghttp2 allocates, for every session of the front. */
    struct grpc_pool pool;
    nghttp2_mem mem;
};

/* The peer acknowledged the PING sent with a drain's shutdown notice: it
 * has read the notice (grpc.c's grpc_drain says what follows). */
void grpc_drain_acked(struct gconn *c);

/* A stream of c was answered by the core outside c's own callbacks: c is
 * written at the end of this loop turn, with the other replies of the
 * turn (inside them, on_read writes once nghttp2 returns). */
void grpc_reply_due(struct gconn *c);

#endif
