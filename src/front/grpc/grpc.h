/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc.h: the gRPC front of one worker: h2c (HTTP/2 with prior knowledge,
 * as Envoy's gRPC client speaks it) on libevent's core, with nghttp2 for
 * the framing, HPACK and flow control and protobuf-c for the messages
 * (generated at build time from proto/).
 *
 *   /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit -> rls.c
 *   /grpc.health.v1.Health/Check    -> SERVING when the worker is ready
 *                                      (as /readyz), NOT_SERVING otherwise
 *   anything else                   -> grpc-status UNIMPLEMENTED
 *
 * Limits, so that what a client sends keeps memory bounded:
 * grpc_max_streams concurrent streams per connection, a header list of
 * GRPC_HEADER_LIST_MAX bytes, one message of max_body bytes, HTTP/2's
 * default frame size, nghttp2's flood guards (SETTINGS, queued PING and
 * SETTINGS acknowledgements, RST_STREAM rate: CVE-2023-44487), at most
 * GRPC_OUT_MAX bytes of output waiting per connection (reading stops while
 * the peer does not read), idle_timeout, and max_connections counted with
 * the HTTP front's connections (listener.c); the two constants are in
 * grpc_conn.h. The worker reaches it only through its ops table.
 */
#ifndef RATELIMITD_GRPC_H
#define RATELIMITD_GRPC_H

#include "front/front.h"

/* The gRPC front's row of front_all (front.c), enabled by grpc_listen. Its
 * apply_config: max_body, idle_timeout, max_connections, grpc_max_streams
 * (for connections accepted afterwards) and the token apply. Its drain:
 * stops accepting; every connection gets a GOAWAY naming the last stream
 * it sent, those streams are still answered, then the connection closes.
 * Its free: pending calls are cancelled with rls_cancel. */
extern const struct front_ops grpc_front;

#endif
