/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_call.h: the calls of the gRPC front (grpc_call.c), as its
 * connections (grpc.c) see them: the stream callbacks a session is made
 * with, and the streams to free.
 */
#ifndef RATELIMITD_GRPC_CALL_H
#define RATELIMITD_GRPC_CALL_H

#include <nghttp2/nghttp2.h>

#include "front/grpc/grpc_conn.h"

/* Sets in cb the callbacks that build the streams of a server session
 * (whose user data is the struct gconn) and answer their calls. */
void grpc_call_callbacks(nghttp2_session_callbacks *cb);

/* Frees st (a call still pending is cancelled), keeping it for reuse while
 * the front has few spare ones. */
void grpc_call_stream_free(struct stream *st);

/* Frees the streams g kept for reuse (the front's end). */
void grpc_call_spare_free(struct grpc *g);

#endif
